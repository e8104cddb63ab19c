"""The functional decode reference against transformers 5.17.0 (CPU, float64, tiny config):
teacher-forced logits at every position for several sequences of different lengths."""

import torch

from netra.model import checkpoint as ck
from netra.model.config import tiny
from netra.reference.qwen36 import Reference


def test_decode_reference_matches_transformers_teacher_forced():
    cfg = tiny(layers=8)  # two full-attention layers, six GDN layers
    c = ck.synthetic_checkpoint(cfg, seed=11)
    model = ck.transformers_model(c, torch.float64)
    ref = Reference(c, torch.float64)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, cfg.vocab_size, (3, 10), generator=g)
    with torch.no_grad():
        want = model(ids).logits  # [3, 10, V], a prefill of the whole sequence
    st = ref.new_state(3, 16)
    worst = 0.0
    for t in range(ids.shape[1]):
        got = ref.step(ids[:, t], st)
        worst = max(worst, ((got - want[:, t]).abs().max() / want[:, t].abs().max()).item())
    # transformers computes its norms, RoPE tables, router softmax and delta rule in float32
    # even in a float64 model, so agreement is ~1e-6; a wrong formula is off by >1e-2.
    assert worst < 1e-5, worst
    # and the states are per sequence: decoding sequence 1 alone gives the same logits
    st1 = ref.new_state(1, 16)
    for t in range(ids.shape[1]):
        one = ref.step(ids[1:2, t], st1)
    assert ((one[0] - want[1, -1]).abs().max() / want[1, -1].abs().max()).item() < 1e-5
