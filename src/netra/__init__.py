"""Netra: hand-written PTX kernels for Qwen3.6-35B-A3B inference on the NVIDIA H200 (sm_90a).

Data flows one way: kernels (``kernels/sm_90a/<family>/<name>.ptx``) -> contracts ->
runtime (build, load, launch) -> ops (guard, kernel or framework path) -> lifecycle and CLI.
"""

__version__ = "0.1.0"
