"""Input validation of the grouped GEMMs (deep_gemm/ops/grouped.py): all of it runs before any launch, on CPU."""
import pytest
import torch

import deep_gemm
from deep_gemm import m_grouped_gemm_fp8_fp8_bf16_nt_contiguous as contiguous
from deep_gemm import m_grouped_gemm_fp8_fp8_bf16_nt_masked as masked

FP8 = torch.float8_e4m3fn
G, M, N, K = 3, 256, 256, 256
M_MAX = 64


def contiguous_args() -> dict:
    return dict(a=torch.zeros((M, K), dtype=FP8), sa=torch.ones((M, 2)), b=torch.zeros((G, N, K), dtype=FP8),
                sb=torch.ones((G, 2, 2)), out=torch.empty((M, N), dtype=torch.bfloat16),
                idx=torch.zeros((M,), dtype=torch.int32))


def masked_args() -> dict:
    return dict(a=torch.zeros((G, M_MAX, K), dtype=FP8), sa=torch.ones((G, M_MAX, 2)),
                b=torch.zeros((G, N, K), dtype=FP8), sb=torch.ones((G, 2, 2)),
                out=torch.empty((G, M_MAX, N), dtype=torch.bfloat16), idx=torch.ones((G,), dtype=torch.int32),
                expected_m=32)


def call_contiguous(a, sa, b, sb, out, idx):
    contiguous((a, sa), (b, sb), out, idx)


def call_masked(a, sa, b, sb, out, idx, expected_m):
    masked((a, sa), (b, sb), out, idx, expected_m)


COMMON = [
    ("B-2d", dict(b=torch.zeros((N, K), dtype=FP8)), ValueError, "rhs[0] (B)", "3-D"),
    ("B-bf16", dict(b=torch.zeros((G, N, K), dtype=torch.bfloat16)), TypeError, "rhs[0] (B)", "float8_e4m3fn"),
    ("B-k", dict(b=torch.zeros((G, N, 128), dtype=FP8)), ValueError, "rhs[0] (B)", "k=256"),
    ("SB-2d", dict(sb=torch.ones((2, 2))), ValueError, "rhs[1] (SB)", "3-D"),
    ("SB-groups", dict(sb=torch.ones((G + 1, 2, 2))), ValueError, "rhs[1] (SB)", "(3, 2, 2)"),
    ("SB-fp16", dict(sb=torch.ones((G, 2, 2), dtype=torch.float16)), TypeError, "rhs[1] (SB)", "float32"),
    ("rhs-not-pair", dict(b=None), TypeError, "rhs[0] (B)", "torch.Tensor"),
]
CONTIGUOUS = COMMON + [
    ("A-3d", dict(a=torch.zeros((1, M, K), dtype=FP8)), ValueError, "lhs[0] (A)", "2-D"),
    ("SA-shape", dict(sa=torch.ones((M, 1))), ValueError, "lhs[1] (SA)", "(256, 2)"),
    ("out-shape", dict(out=torch.empty((M, N + 8), dtype=torch.bfloat16)), ValueError, "out", "(256, 256)"),
    ("out-fp32", dict(out=torch.empty((M, N))), TypeError, "out", "bfloat16"),
    ("idx-int64", dict(idx=torch.zeros((M,), dtype=torch.int64)), TypeError, "m_indices", "int32"),
    ("idx-short", dict(idx=torch.zeros((M - 1,), dtype=torch.int32)), ValueError, "m_indices", "(256,)"),
    ("idx-2d", dict(idx=torch.zeros((M, 1), dtype=torch.int32)), ValueError, "m_indices", "(256,)"),
    ("idx-list", dict(idx=[0] * M), TypeError, "m_indices", "torch.Tensor"),
    ("idx-strided", dict(idx=torch.zeros((2 * M,), dtype=torch.int32)[::2]), ValueError, "m_indices",
     "contiguous"),
    ("cpu", {}, ValueError, "lhs[0] (A)", "CUDA tensor"),
]
MASKED = COMMON + [
    ("A-2d", dict(a=torch.zeros((M_MAX, K), dtype=FP8)), ValueError, "lhs[0] (A)", "3-D"),
    ("SA-2d", dict(sa=torch.ones((M_MAX, 2))), ValueError, "lhs[1] (SA)", "3-D"),
    ("SA-shape", dict(sa=torch.ones((G, M_MAX, 1))), ValueError, "lhs[1] (SA)", "(3, 64, 2)"),
    ("out-shape", dict(out=torch.empty((G, M_MAX + 1, N), dtype=torch.bfloat16)), ValueError, "out",
     "(3, 64, 256)"),
    ("masked_m-long", dict(idx=torch.ones((G + 1,), dtype=torch.int32)), ValueError, "masked_m", "(3,)"),
    ("masked_m-short", dict(idx=torch.ones((G - 1,), dtype=torch.int32)), ValueError, "masked_m", "(3,)"),
    ("masked_m-int64", dict(idx=torch.ones((G,), dtype=torch.int64)), TypeError, "masked_m", "int32"),
    ("expected_m-float", dict(expected_m=3.5), TypeError, "expected_m", "int"),
    ("expected_m-bool", dict(expected_m=True), TypeError, "expected_m", "int"),
    ("expected_m-tensor", dict(expected_m=torch.tensor(3)), TypeError, "expected_m", "int"),
    ("expected_m-negative", dict(expected_m=-1), ValueError, "expected_m", ">= 0"),
    ("cpu", {}, ValueError, "lhs[0] (A)", "CUDA tensor"),
]


def _check(fn, args, exc, name, detail):
    with pytest.raises(exc) as info:
        fn(**args)
    message = str(info.value)
    assert message.startswith(f"{name} must"), message
    assert detail in message, message


@pytest.mark.parametrize("change,exc,name,detail", [c[1:] for c in CONTIGUOUS], ids=[c[0] for c in CONTIGUOUS])
def test_contiguous_bad_argument(change, exc, name, detail):
    _check(call_contiguous, {**contiguous_args(), **change}, exc, name, detail)


@pytest.mark.parametrize("change,exc,name,detail", [c[1:] for c in MASKED], ids=[c[0] for c in MASKED])
def test_masked_bad_argument(change, exc, name, detail):
    _check(call_masked, {**masked_args(), **change}, exc, name, detail)


def test_masked_group_count_mismatch():
    args = masked_args()
    args["a"] = torch.zeros((G + 1, M_MAX, K), dtype=FP8)
    with pytest.raises(ValueError, match=r"lhs\[0\] \(A\) has 4 groups but rhs\[0\] \(B\) has 3"):
        call_masked(**args)


def test_alignment_helpers():
    assert deep_gemm.get_m_alignment_for_contiguous_layout() == 128
    assert deep_gemm.get_mk_alignment_for_contiguous_layout() == 128


def test_rows_view_needs_uniform_groups():
    from deep_gemm.families.checks import rows_view
    t = torch.zeros((3, 4, 16))
    assert rows_view(t, "x").shape == (12, 16)
    gapped = torch.zeros((3, 5, 16))[:, :4]
    with pytest.raises(ValueError, match="x must stack its 3 groups uniformly"):
        rows_view(gapped, "x")
    assert rows_view(torch.zeros((1, 5, 16))[:, :4], "x").shape == (4, 16)


def test_rows_view_with_one_row_per_group_uses_the_group_stride():
    """[G, 1, C] views of padded storage have an arbitrary stride(1); found by the random sweep (masked m_max = 1)."""
    from deep_gemm.families.checks import rows_view
    buf = torch.zeros((4, 24))
    t = buf[:, 8:16].view(4, 1, 8)
    assert t.stride(0) != t.size(1) * t.stride(1)
    rows = rows_view(t, "x")
    assert rows.shape == (4, 8) and rows.stride() == (24, 1) and rows.data_ptr() == t.data_ptr()
