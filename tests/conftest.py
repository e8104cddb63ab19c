import pytest


def _gpu_reason() -> str | None:
    try:
        import torch
    except ImportError:
        return "torch not installed"
    if not torch.cuda.is_available():
        return "needs an NVIDIA H200 (sm_90a): no CUDA device visible"
    if torch.cuda.get_device_capability() != (9, 0):
        return f"needs an NVIDIA H200 (sm_90a): device is sm_{''.join(map(str, torch.cuda.get_device_capability()))}"
    return None


def pytest_collection_modifyitems(config, items):
    reason = _gpu_reason()
    if reason is None:
        return
    skip = pytest.mark.skip(reason=reason)
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
