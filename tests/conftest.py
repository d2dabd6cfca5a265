import os
import random
import tempfile

import pytest
import torch

# Keep test runs from touching the user's ~/.deep_gemm: one cache per session unless the caller chose one.
# Most tests compile only what they launch; tests of the first-sight precompile turn it on themselves.
os.environ.setdefault("DG_JIT_PRECOMPILE", "0")
if not os.environ.get("DG_JIT_CACHE_DIR"):
    os.environ["DG_JIT_CACHE_DIR"] = tempfile.mkdtemp(prefix="deep_gemm_test_cache_")


# The random sweep's fresh seed (tests/gpu/test_sweep_gpu.py), drawn here so that the session header reports it.
os.environ.setdefault("DG_SWEEP_FRESH_SEED", str(random.SystemRandom().randrange(1 << 31)))


def pytest_report_header(config):
    return f"deep_gemm random sweep: fresh seed DG_SWEEP_FRESH_SEED={os.environ['DG_SWEEP_FRESH_SEED']}"


def has_sm90() -> bool:
    return torch.cuda.is_available() and torch.cuda.get_device_capability(0) == (9, 0)


def pytest_collection_modifyitems(config, items):
    if has_sm90():
        return
    skip = pytest.mark.skip(reason="needs an sm_90 (Hopper) CUDA device")
    for item in items:
        # tests/gpu/test_sm100_gpu.py (Blackwell) skips itself unless an sm_100 device is present.
        if "gpu" in item.keywords and "test_sm100_gpu.py" not in item.keywords:
            item.add_marker(skip)
