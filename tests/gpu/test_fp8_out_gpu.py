"""GPU correctness of `fp8_gemm_nt_fp8_out`, `m_grouped_fp8_gemm_nt_contiguous_fp8_out` and
`m_grouped_fp8_gemm_nt_masked_fp8_out` (the FP8 GEMMs whose epilogue writes e4m3 with per-row 1 x 128 scales):
against `per_token_cast_to_fp8` of the dequantised FP32 product (tests/gemm_cases.py's builders: values within one
e4m3 step plus the FP8 GEMM's own rounding, scales within 2e-3, poisoned D and guard bands, SFD's padding rows
untouched) over ragged m, n and k; bitwise reruns; huge products (saturation, no inf / NaN scales) and all-zero rows;
a CUDA graph; the (D, SFD) pair fed to the next FP8 GEMM as its `a` with no conversion (dense, and masked as an MoE
expert's gate/up then down projections); contiguous padding rows zero with the floor scale; masked rows >= masked_m
untouched in D and SFD; grouped n not a multiple of 128 (the
columns past n hold the next expert's products, kept out of the amax). Skipped without sm_90."""
import pytest
import torch

import deep_gemm
from deep_gemm import runtime
from deep_gemm.testing import calc_diff
from gemm_cases import (build_contiguous_fp8_out, build_fp8_out, build_masked_fp8_out, check_fp8_d_twice,
                        dense_operands, masked_expert_mlp)

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("m", [1, 7, 129, 4096])
@pytest.mark.parametrize("n,k", [(16, 200), (400, 7168), (2112, 100), (7168, 2048)])
def test_matches_the_cast_of_the_product(m, n, k):
    case = build_fp8_out(dict(m=m, n=n, k=k), torch.device("cuda"), m * 7 + n)
    check_fp8_d_twice(case)


def _pair(m, n):
    d = torch.empty((m, n), dtype=torch.float8_e4m3fn, device="cuda")
    sfd = torch.empty(((n + 127) // 128, (m + 3) // 4 * 4), device="cuda").t()[:m]
    return d, sfd


def test_zero_rows_and_huge_products():
    m, n, k = 256, 512, 256
    (a8, sa), rhs, _, _ = dense_operands(m, n, k, torch.device("cuda"), 5)
    a8 = a8.clone()
    a8[:64] = 0                      # all-zero rows: the floor scale, zeros
    sa = sa.clone()
    sa[64:128] = 1e30                # products far past the e4m3 range of any fixed scale: scaled, not overflowed
    d, sfd = _pair(m, n)
    deep_gemm.fp8_gemm_nt_fp8_out((a8, sa), rhs, (d, sfd))
    torch.cuda.synchronize()
    assert bool(torch.isfinite(sfd).all()) and bool((sfd > 0).all()), "scales must be finite and positive"
    assert bool((d[:64].view(torch.uint8) & 0x7F == 0).all()), "zero rows must give zeros"
    assert float(sfd[0, 0]) == float(torch.tensor(1e-4) * (1 / 448.0))
    assert not bool((d.view(torch.uint8) & 0x7F == 0x7F).any()), "NaN in D"
    assert float(d[64:128].float().abs().max()) == 448.0   # each row's amax maps to the e4m3 maximum


def test_one_column_of_scales_may_be_contiguous():
    # n <= 128: SFD [m, 1]; a contiguous one (strides (1, 1)) is taken, as its column stride is never used
    m, n, k = 300, 128, 512
    lhs, rhs, _, _ = dense_operands(m, n, k, torch.device("cuda"), 21)
    d, sfd = _pair(m, n)
    d_contiguous, sfd_contiguous = torch.empty_like(d), torch.empty((m, 1), device="cuda")
    deep_gemm.fp8_gemm_nt_fp8_out(lhs, rhs, (d, sfd))
    deep_gemm.fp8_gemm_nt_fp8_out(lhs, rhs, (d_contiguous, sfd_contiguous))
    torch.cuda.synchronize()
    assert torch.equal(d.view(torch.uint8), d_contiguous.view(torch.uint8)) and torch.equal(sfd, sfd_contiguous)


def test_cuda_graph_replay():
    m, n, k = 300, 2112, 1024
    lhs, rhs, ref, _ = dense_operands(m, n, k, torch.device("cuda"), 9)
    d, sfd = _pair(m, n)
    deep_gemm.fp8_gemm_nt_fp8_out(lhs, rhs, (d, sfd))   # compiled and planned before the capture
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        with torch.cuda.graph(graph):
            deep_gemm.fp8_gemm_nt_fp8_out(lhs, rhs, (d, sfd))
    d.view(torch.uint8).fill_(0xFF)
    sfd.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    ref_d, ref_sf = deep_gemm.utils.math.per_token_cast_to_fp8_torch(ref)
    assert bool(torch.allclose(sfd, ref_sf, rtol=2e-3, atol=0))
    assert calc_diff(d.float() * sfd.repeat_interleave(128, dim=1)[:, :n], ref) < 1.5e-3


def test_feeds_the_next_gemm_without_conversion():
    # An expert MLP's two GEMMs: h = x W1^T in e4m3 with its scales, then y = h W2^T, with h's (D, SFD) as `a`.
    m, hidden, inter = 1000, 2048, 1536
    x = torch.randn((m, hidden), device="cuda", dtype=torch.bfloat16)
    w1 = torch.randn((inter, hidden), device="cuda", dtype=torch.bfloat16)
    w2 = torch.randn((hidden, inter), device="cuda", dtype=torch.bfloat16)
    x8 = deep_gemm.per_token_cast_to_fp8(x, mn_major_sf=True)
    w18, w28 = deep_gemm.per_block_cast_to_fp8(w1), deep_gemm.per_block_cast_to_fp8(w2)
    h = _pair(m, inter)
    deep_gemm.fp8_gemm_nt_fp8_out(x8, w18, h)
    y = torch.empty((m, hidden), device="cuda", dtype=torch.bfloat16)
    deep_gemm.fp8_gemm_nt(h, w28, y)
    fast = runtime.stats()["fast"]
    deep_gemm.fp8_gemm_nt(h, w28, y)   # SFD is already the layout the GEMM reads: `_C` launches it by itself
    assert runtime.stats()["fast"] == fast + 1
    # The unfused path: BF16 output, then the cast.
    h_bf16 = torch.empty((m, inter), device="cuda", dtype=torch.bfloat16)
    deep_gemm.fp8_gemm_nt(x8, w18, h_bf16)
    y_ref = torch.empty_like(y)
    deep_gemm.fp8_gemm_nt(deep_gemm.per_token_cast_to_fp8(h_bf16, mn_major_sf=True), w28, y_ref)
    torch.cuda.synchronize()
    assert calc_diff(y.float(), y_ref.float()) < 1e-3
    assert calc_diff(y.float(), x.float() @ w1.float().t() @ w2.float().t()) < 1e-2


@pytest.mark.parametrize("groups,m_max,n,k,masked", [(4, 64, 2048, 7168, [64, 0, 1, 40]),
                                                     (3, 300, 4096, 2048, [300, 129, 7]),
                                                     (2, 17, 16, 144, [17, 5]), (3, 70, 272, 576, [70, 0, 33])])
def test_masked_matches_the_cast_of_the_product(groups, m_max, n, k, masked):
    p = dict(groups=groups, m_max=m_max, n=n, k=k, masked=masked, expected_m=max(1, sum(masked) // groups))
    case = build_masked_fp8_out(p, torch.device("cuda"), groups + n)
    case.run()
    case.check()


def test_masked_expert_mlp_without_conversions():
    # A decode MoE layer: gate/up (masked, FP8 d) then down (masked, the (D, SFD) pair as its a), against the same
    # layer with a BF16 gate/up output cast by per_token_cast_to_fp8.
    y, y_ref, rows = masked_expert_mlp(1024, deep_gemm.m_grouped_fp8_gemm_nt_masked_fp8_out, lambda h: h)
    assert calc_diff(y[rows].float(), y_ref[rows].float()) < 1e-3


@pytest.mark.parametrize("sizes,n,k", [([100, 0, 300, 1], 4096, 7168), ([1000, 129], 2048, 2048),
                                       ([100, 0, 300, 1], 400, 576), ([5, 7], 16, 144)])
def test_contiguous_matches_the_cast_of_the_product(sizes, n, k):
    case = build_contiguous_fp8_out(dict(sizes=sizes, n=n, k=k), torch.device("cuda"), len(sizes) + n)
    case.run()
    case.check()
