"""Input validation of the weight-gradient GEMMs (deep_gemm/ops/wgrad.py): all of it runs before any launch, on CPU."""
import pytest
import torch

from deep_gemm import k_grouped_wgrad_gemm_fp8_fp8_fp32_nt as k_grouped
from deep_gemm import wgrad_gemm_fp8_fp8_fp32_nt as wgrad

from test_grouped_validation import _check  # one "raises, names the argument, says what" assertion

FP8 = torch.float8_e4m3fn
M, N, K = 256, 384, 512  # K blocks: 4
KS = [256, 0, 512]       # K blocks: 2 + 0 + 4 = 6


def dense_args() -> dict:
    return dict(a=torch.zeros((M, K), dtype=FP8), sa=torch.ones((M, 4)), b=torch.zeros((N, K), dtype=FP8),
                sb=torch.ones((4, N)), out=torch.zeros((M, N)))


def grouped_args() -> dict:
    return dict(a=torch.zeros((M * sum(KS),), dtype=FP8), sa=torch.ones((6, M)),
                b=torch.zeros((N * sum(KS),), dtype=FP8), sb=torch.ones((6, N)), out=torch.zeros((3, M, N)),
                ks=list(KS))


def call_dense(a, sa, b, sb, out):
    wgrad((a, sa), (b, sb), out)


def call_grouped(a, sa, b, sb, out, ks):
    k_grouped((a, sa), (b, sb), out, ks)


DENSE = [
    ("A-bf16", dict(a=torch.zeros((M, K), dtype=torch.bfloat16)), TypeError, "lhs[0] (A)", "float8_e4m3fn"),
    ("A-3d", dict(a=torch.zeros((1, M, K), dtype=FP8)), ValueError, "lhs[0] (A)", "2-D"),
    ("B-k", dict(b=torch.zeros((N, K - 128), dtype=FP8)), ValueError, "rhs[0] (B)", "(n, 512)"),
    ("out-bf16", dict(out=torch.zeros((M, N), dtype=torch.bfloat16)), TypeError, "out", "float32"),
    ("out-shape", dict(out=torch.zeros((N, M))), ValueError, "out", "(256, 384)"),
    ("SA-shape", dict(sa=torch.ones((M, 3))), ValueError, "lhs[1] (SA)", "(256, 4) or (4, 256)"),
    ("SB-shape", dict(sb=torch.ones((N, 5))), ValueError, "rhs[1] (SB)", "(384, 4) or (4, 384)"),
    ("SA-fp16", dict(sa=torch.ones((M, 4), dtype=torch.float16)), TypeError, "lhs[1] (SA)", "float32"),
    ("lhs-not-pair", dict(a=None), TypeError, "lhs[0] (A)", "torch.Tensor"),
    ("cpu", {}, ValueError, "lhs[0] (A)", "CUDA tensor"),
]
GROUPED = [
    ("ks-length", dict(ks=[256, 512]), ValueError, "batch_sizes", "one entry per group of out (3)"),
    ("ks-float", dict(ks=[256.0, 0, 512]), TypeError, "batch_sizes[0]", "int"),
    ("ks-negative", dict(ks=[256, -16, 528]), ValueError, "batch_sizes[1]", ">= 0"),
    ("ks-not-16", dict(ks=[250, 6, 512]), ValueError, "batch_sizes[0]", "multiple of 16"),
    ("ks-not-list", dict(ks=768), TypeError, "batch_sizes", "list of ints"),
    ("A-numel", dict(a=torch.zeros((M * sum(KS) - 16,), dtype=FP8)), ValueError, "lhs[0] (A)", "hold 196608"),
    ("B-numel", dict(b=torch.zeros((N * sum(KS) + 16,), dtype=FP8)), ValueError, "rhs[0] (B)", "hold 294912"),
    ("A-strided", dict(a=torch.zeros((2 * M * sum(KS),), dtype=FP8)[::2]), ValueError, "lhs[0] (A)",
     "contiguous"),
    ("SA-rows-form", dict(sa=torch.ones((M, 6))), ValueError, "lhs[1] (SA)", "(6, 256)"),
    ("SB-kb", dict(sb=torch.ones((5, N))), ValueError, "rhs[1] (SB)", "(6, 384)"),
    ("out-2d", dict(out=torch.zeros((M, N))), ValueError, "out", "3-D"),
    ("out-bf16", dict(out=torch.zeros((3, M, N), dtype=torch.bfloat16)), TypeError, "out", "float32"),
    ("cpu", {}, ValueError, "lhs[0] (A)", "CUDA tensor"),
]


@pytest.mark.parametrize("change,exc,name,detail", [c[1:] for c in DENSE], ids=[c[0] for c in DENSE])
def test_wgrad_bad_argument(change, exc, name, detail):
    _check(call_dense, {**dense_args(), **change}, exc, name, detail)


@pytest.mark.parametrize("change,exc,name,detail", [c[1:] for c in GROUPED], ids=[c[0] for c in GROUPED])
def test_k_grouped_bad_argument(change, exc, name, detail):
    _check(call_grouped, {**grouped_args(), **change}, exc, name, detail)


def test_k_grouped_device_batch_sizes_refused_without_sync():
    # Any tensor not in host memory would need a device-to-host copy (a sync); a meta tensor stands in for a CUDA
    # one here (tests/gpu/test_wgrad_gpu.py checks the CUDA tensor itself).
    with pytest.raises(TypeError, match="batch_sizes must be a host list"):
        call_grouped(**{**grouped_args(), "ks": torch.tensor(KS, device="meta")})
    # A CPU tensor is a host list: validation goes on (and stops at the CPU operands).
    with pytest.raises(ValueError, match="CUDA tensor"):
        call_grouped(**{**grouped_args(), "ks": torch.tensor(KS)})
