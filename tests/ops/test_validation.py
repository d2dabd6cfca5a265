"""Input validation of gemm_fp8_fp8_bf16_nt (deep_gemm/ops/gemm.py, checks.py); it all runs before any launch."""
import pytest
import torch

from deep_gemm import gemm_fp8_fp8_bf16_nt
from deep_gemm.families import checks

FP8 = torch.float8_e4m3fn
M, N, K = 4, 256, 256


def valid_args(m: int = M, n: int = N, k: int = K) -> dict:
    """Well-formed CPU arguments: they pass every check except the CUDA-device one."""
    kb = (k + 127) // 128
    return dict(a=torch.zeros((m, k), dtype=FP8), sa=torch.ones((m, kb)),
                b=torch.zeros((n, k), dtype=FP8), sb=torch.ones(((n + 127) // 128, kb)),
                out=torch.empty((m, n), dtype=torch.bfloat16))


def call(a, sa, b, sb, out):
    gemm_fp8_fp8_bf16_nt((a, sa), (b, sb), out)


# (case id, replacement for one argument, expected exception, what the message must start with, and contain)
CASES = [
    # dtypes
    ("A-bf16", dict(a=torch.zeros((M, K), dtype=torch.bfloat16)), TypeError, "lhs[0] (A)", "float8_e4m3fn"),
    ("A-e5m2", dict(a=torch.zeros((M, K), dtype=torch.float8_e5m2)), TypeError, "lhs[0] (A)", "float8_e4m3fn"),
    ("SA-fp16", dict(sa=torch.ones((M, 2), dtype=torch.float16)), TypeError, "lhs[1] (SA)", "float32"),
    ("B-uint8", dict(b=torch.zeros((N, K), dtype=torch.uint8)), TypeError, "rhs[0] (B)", "float8_e4m3fn"),
    ("SB-fp64", dict(sb=torch.ones((2, 2), dtype=torch.float64)), TypeError, "rhs[1] (SB)", "float32"),
    ("out-fp32", dict(out=torch.empty((M, N))), TypeError, "out", "bfloat16"),
    ("out-fp16", dict(out=torch.empty((M, N), dtype=torch.float16)), TypeError, "out", "bfloat16"),
    # not tensors
    ("A-list", dict(a=[[0.0] * K] * M), TypeError, "lhs[0] (A)", "torch.Tensor"),
    ("SB-none", dict(sb=None), TypeError, "rhs[1] (SB)", "torch.Tensor"),
    ("out-none", dict(out=None), TypeError, "out", "torch.Tensor"),
    # ranks
    ("A-3d", dict(a=torch.zeros((1, M, K), dtype=FP8)), ValueError, "lhs[0] (A)", "2-D"),
    ("SA-1d", dict(sa=torch.ones((M,))), ValueError, "lhs[1] (SA)", "2-D"),
    ("B-1d", dict(b=torch.zeros((N * K,), dtype=FP8)), ValueError, "rhs[0] (B)", "2-D"),
    ("SB-3d", dict(sb=torch.ones((1, 2, 2))), ValueError, "rhs[1] (SB)", "2-D"),
    ("out-3d", dict(out=torch.empty((1, M, N), dtype=torch.bfloat16)), ValueError, "out", "2-D"),
    # shapes
    ("k-mismatch", dict(b=torch.zeros((N, 128), dtype=FP8)), ValueError, "rhs[0] (B)", "k=256"),
    ("out-n", dict(out=torch.empty((M, N - 8), dtype=torch.bfloat16)), ValueError, "out", "(4, 256)"),
    ("out-m", dict(out=torch.empty((M + 1, N), dtype=torch.bfloat16)), ValueError, "out", "(4, 256)"),
    ("out-transposed", dict(out=torch.empty((N, M), dtype=torch.bfloat16)), ValueError, "out", "(4, 256)"),
    ("SA-kb", dict(sa=torch.ones((M, 1))), ValueError, "lhs[1] (SA)", "(4, 2)"),
    ("SA-transposed", dict(sa=torch.ones((2, M))), ValueError, "lhs[1] (SA)", "(4, 2)"),
    ("SB-nb", dict(sb=torch.ones((1, 2))), ValueError, "rhs[1] (SB)", "(2, 2)"),
    ("SB-per-row", dict(sb=torch.ones((N, 2))), ValueError, "rhs[1] (SB)", "(2, 2)"),
    ("SB-kb", dict(sb=torch.ones((2, 3))), ValueError, "rhs[1] (SB)", "(2, 2)"),
]


@pytest.mark.parametrize("change,exc,name,detail", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_argument(change, exc, name, detail):
    args = {**valid_args(), **change}
    with pytest.raises(exc) as info:
        call(**args)
    message = str(info.value)
    assert message.startswith(f"{name} must"), message
    assert detail in message, message


def test_ragged_shapes_expect_rounded_up_scales():
    # n = 129, k = 200: two N blocks and two K blocks of scales.
    args = valid_args(m=3, n=129, k=200)
    assert args["sb"].shape == (2, 2)
    args["sb"] = torch.ones((1, 2))
    with pytest.raises(ValueError, match=r"^rhs\[1\] \(SB\) must have shape \(2, 2\)"):
        call(**args)
    args = valid_args(m=3, n=129, k=200)
    args["sa"] = torch.ones((3, 1))
    with pytest.raises(ValueError, match=r"^lhs\[1\] \(SA\) must have shape \(3, 2\)"):
        call(**args)


@pytest.mark.parametrize("lhs,detail", [
    ("tensor", "got Tensor"),
    ("one", "of length 1"),
    ("three", "of length 3"),
    ("dict", "got dict"),
])
def test_lhs_not_a_pair(lhs, detail):
    args = valid_args()
    value = dict(tensor=args["a"], one=(args["a"],), three=(args["a"], args["sa"], args["sa"]),
                 dict={"a": args["a"], "sa": args["sa"]})[lhs]
    with pytest.raises(TypeError) as info:
        gemm_fp8_fp8_bf16_nt(value, (args["b"], args["sb"]), args["out"])
    assert str(info.value).startswith("lhs must be a (tensor, scales) pair")
    assert detail in str(info.value)


def test_rhs_not_a_pair():
    args = valid_args()
    with pytest.raises(TypeError, match=r"^rhs must be a \(tensor, scales\) pair, got tuple of length 3"):
        gemm_fp8_fp8_bf16_nt((args["a"], args["sa"]), (args["b"], args["sb"], args["sb"]), args["out"])


def test_list_pairs_are_accepted():
    # A list is as good as a tuple: validation proceeds to the device check.
    args = valid_args()
    with pytest.raises(ValueError, match="CUDA"):
        gemm_fp8_fp8_bf16_nt([args["a"], args["sa"]], [args["b"], args["sb"]], args["out"])


def test_cpu_tensors_rejected():
    with pytest.raises(ValueError) as info:
        call(**valid_args())
    assert str(info.value).startswith("lhs[0] (A) must be a CUDA tensor")
    assert "cpu" in str(info.value)


@pytest.mark.parametrize("m,n,k", [(0, 256, 256), (4, 0, 256), (4, 256, 0)])
def test_empty_problems_still_checked_for_device(m, n, k):
    # Early returns for empty problems come after validation: a CPU tensor is an error even then.
    with pytest.raises(ValueError, match="CUDA"):
        call(**valid_args(m, n, k))


def test_dtype_checked_before_shape():
    args = valid_args()
    args["a"] = args["a"].to(torch.bfloat16)
    args["out"] = torch.empty((1, 1), dtype=torch.bfloat16)
    with pytest.raises(TypeError, match=r"^lhs\[0\] \(A\)"):
        call(**args)


def test_shape_checked_before_device():
    args = valid_args()
    args["out"] = torch.empty((M, N + 8), dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="^out must have shape"):
        call(**args)


# ---- checks.py helpers that need no device ----

def test_check_tma_matrix():
    base = torch.zeros((4, 32), dtype=FP8)
    checks.check_tma_matrix(base, "x")
    checks.check_tma_matrix(base[:, :20], "x")  # padded rows: stride 32 bytes
    with pytest.raises(ValueError, match=r"^x's row stride is 20 elements"):
        checks.check_tma_matrix(torch.zeros((4, 20), dtype=FP8), "x")
    with pytest.raises(ValueError, match="^x must have a contiguous inner dimension"):
        checks.check_tma_matrix(torch.zeros((32, 4), dtype=FP8).t(), "x")
    with pytest.raises(ValueError, match="^x's data pointer must be 16-byte aligned"):
        checks.check_tma_matrix(torch.zeros((64,), dtype=FP8)[1:33].view(2, 16), "x")
    checks.check_tma_matrix(torch.zeros((1, 20), dtype=FP8), "x")  # a single row has no row stride


def test_check_no_overlap():
    buf = torch.zeros(1024)
    out = buf[:512].view(16, 32)
    checks.check_no_overlap(out, "out", [("a", buf[512:].view(16, 32))])
    with pytest.raises(ValueError, match="^out overlaps the memory of a"):
        checks.check_no_overlap(out, "out", [("a", buf[500:1012].view(16, 32))])
    checks.check_no_overlap(buf[:0].view(0, 32), "out", [("a", buf.view(32, 32))])


def test_extent_bytes_and_pointer_overlap():
    buf = torch.zeros(1024, dtype=torch.float32)
    view = buf.as_strided((4, 3), (10, 1))
    assert checks.extent_bytes(view) == (3 * 10 + 2 + 1) * 4
    assert checks.extent_bytes(buf[:0]) == 0
    checks.check_no_overlap_ptrs("out", 1000, 100, [("a", 1100, 50), ("b", 900, 100)])  # touching, not overlapping
    with pytest.raises(ValueError, match="out overlaps the memory of b"):
        checks.check_no_overlap_ptrs("out", 1000, 100, [("a", 1100, 50), ("b", 950, 51)])
    checks.check_no_overlap_ptrs("out", 1000, 0, [("a", 1000, 50)])  # empty output overlaps nothing


def test_layout_key_is_none_for_non_tensors():
    from deep_gemm import _C
    from deep_gemm.runtime import Op
    assert _C.layout_key(Op.DENSE, (1, 2), (3, 4), 5) is None
    assert _C.layout_key(Op.DENSE, "ab", None, None) is None
