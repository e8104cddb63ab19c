"""Qwen3.6-35B-A3B: its text config, its checkpoint (the real FP8 and BF16 safetensors
layouts, validation, synthetic checkpoints) and the bridge to the transformers reference."""
