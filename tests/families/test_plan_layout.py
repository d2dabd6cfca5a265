"""families/plan.py's OneOutputLayout on the CPU: per-call pointer alignment and output/input overlap are refused
with the tensor's name before any plan is made or launch happens."""
import pytest
import torch

from deep_gemm.families.plan import OneOutputLayout


def _layout(extents):
    return OneOutputLayout(False, torch.device("cpu"), None, ("a", "b", "out"), (16, 4, 4), extents, 132, "sm_90a")


def test_misaligned_pointer_names_the_tensor():
    raw = torch.zeros(64, dtype=torch.uint8)
    a, b, out = raw[1:17], torch.zeros(4), torch.zeros(4)
    with pytest.raises(ValueError, match="a's data pointer must be 16-byte aligned"):
        _layout((16, 16, 16)).run(a, b, out, 7)


def test_output_overlapping_an_input_is_refused():
    buf = torch.zeros(64)
    a, b, out = torch.zeros(16, dtype=torch.uint8), buf[:8], buf[4:12]
    with pytest.raises(ValueError, match="out"):
        _layout((16, 32, 32)).run(a, b, out)
