import pytest


def _gpu_reason() -> str | None:
    from netra.runtime.gpu import unavailable_reason

    reason = unavailable_reason()
    return None if reason is None else f"needs an NVIDIA H200 (sm_90a): {reason}"


def pytest_collection_modifyitems(config, items):
    reason = _gpu_reason()
    if reason is None:
        return
    skip = pytest.mark.skip(reason=reason)
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
