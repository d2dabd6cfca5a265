"""The FP8 1D2D layout's per-call part on the CPU: which trailing arguments are an index tensor and which host ints;
the SwiGLU variants' clamp bits; the FP8-d variants' SFD layouts."""
import pytest
import torch

from deep_gemm.families.fp8_gemm_1d2d_args import GemmLayout
from deep_gemm.heuristics import KernelType


def _zeroing_layout(kind, head_splits=(0, 0, 0), extents=(64,) * 6):
    return GemmLayout(kind, "zero", torch.device("cpu"), False, True, True, extents, 0, 132, "sm_90a",
                      head_splits=head_splits)


def _operands():
    a, sa, b, sb = torch.ones(4, 8), torch.ones(4, 1), torch.ones(8, 8), torch.ones(1, 1)
    return (a, sa), (b, sb), torch.ones(4, 8)


def test_skip_head_mid_host_ints_are_not_an_index():
    # fp8_gemm_nt_skip_head_mid passes (left, mid, right) after out, where grouped variants pass their index tensor.
    lhs, rhs, out = _operands()
    assert _zeroing_layout(KernelType.NORMAL, (16, 8, 16)).run(lhs, rhs, out, 16, 8, 16) is None
    assert not out.any()


def test_masked_index_then_host_int():
    lhs, rhs, out = _operands()
    layout = _zeroing_layout(KernelType.M_GROUPED_MASKED)
    layout.action = "zero_masked"
    masked_m = torch.tensor([2], dtype=torch.int32)
    out = out.view(1, 4, 8)
    layout.run(lhs, rhs, out, masked_m, 4)
    assert not out[0, :2].any() and out[0, 2:].all()  # k = 0: rows below masked_m become zeros, the rest stay


@pytest.mark.parametrize("bits,exc", [(0x7FC00000, ValueError), (0x00000000, ValueError), (0xC1200000, ValueError),
                                      (1 << 32, TypeError), (True, TypeError)])
def test_swiglu_clamp_bits_refused(bits, exc):
    """The SwiGLU variants' last argument (the clamp's float32 bits, from the public functions or a direct `_C` op
    call): NaN, zero, negative and out-of-range bits never reach a kernel."""
    from deep_gemm.families.fp8_gemm_1d2d_args import _swiglu_epilogue
    with pytest.raises(exc, match="clamp"):
        _swiglu_epilogue(bits)


def test_swiglu_clamp_bits_taken():
    from deep_gemm.families.fp8_gemm_1d2d_args import _swiglu_epilogue
    from deep_gemm.heuristics.common import NO_CLAMP_BITS
    assert _swiglu_epilogue(NO_CLAMP_BITS).clamp_bits == NO_CLAMP_BITS
    assert _swiglu_epilogue(0x41200000).clamp_bits == 0x41200000  # 10.0


def _fp8_d_named(n, sfd):
    m, k = 64, 128
    fp8 = torch.float8_e4m3fn
    tensors = (torch.zeros(m, k, dtype=fp8), torch.ones(m, 1), torch.zeros(n, k, dtype=fp8),
               torch.ones((n + 127) // 128, 1), torch.zeros(m, n, dtype=fp8), sfd)
    return list(zip(("a", "sfa", "b", "sfb", "d", "sfd"), tensors)), n, k


def test_fp8_d_scales_of_one_column_may_be_contiguous():
    """SFD must be MN-major (stride(0) == 1, stride(1) >= m); with one column of scales (n <= 128) its stride(1) is
    never used, so torch.empty((m, 1)) is taken."""
    from deep_gemm.families.fp8_gemm_1d2d_args import _check_fp8_d
    _check_fp8_d(*_fp8_d_named(128, torch.ones(64, 1)))
    _check_fp8_d(*_fp8_d_named(256, torch.ones(2, 64).t()))   # MN-major
    with pytest.raises(ValueError, match="MN-major"):
        _check_fp8_d(*_fp8_d_named(256, torch.ones(64, 2)))   # row-major scales: refused
