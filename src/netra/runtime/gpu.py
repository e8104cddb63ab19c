"""Whether a GPU that can run the sm_90a kernels is here, and if not, why not."""

from __future__ import annotations


def unavailable_reason(device: int | None = None) -> str | None:
    """None when device (default: the current one) is an sm_90 GPU, else the reason."""
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return "no CUDA device is visible"
    device = torch.cuda.current_device() if device is None else device
    cap = torch.cuda.get_device_capability(device)
    if cap != (9, 0):
        return f"device {device} is sm_{cap[0]}{cap[1]}, not sm_90 (Hopper)"
    return None
