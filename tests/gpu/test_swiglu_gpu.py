"""GPU correctness of `m_grouped_fp8_gemm_nt_contiguous_swiglu` and `m_grouped_fp8_gemm_nt_masked_swiglu` (the MoE
gate/up GEMM with SwiGLU and FP8 output): against `per_token_cast_to_fp8` of SiLU(gate) * up computed from the
dequantised FP32 product of the original (not interleaved) weights (tests/gemm_cases.py's builders: values within one
e4m3 step plus the GEMM's own rounding, scales within 2e-3, poisoned D, guard bands, SFD padding untouched), with
and without activation_clamp, over ragged expert sizes, k not a multiple of 128, 64- and 128-row tiles; bitwise
reruns; all-zero and huge rows; a whole expert MLP (gate/up SwiGLU, then the down GEMM taking (D, SFD) as its `a`)
against the unfused path (BF16 gate/up output, activation, cast). Skipped without sm_90."""
import pytest
import torch

import deep_gemm
from deep_gemm.testing import calc_diff
from gemm_cases import (build_contiguous_swiglu, build_masked_swiglu, check_fp8_d_twice, masked_expert_mlp,
                        swiglu_reference)

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("sizes,n,k,clamp", [([100, 0, 300, 1], 512, 576, None), ([1000, 129], 4096, 2048, 10.0),
                                             ([5, 7, 64], 256, 144, 0.5), ([2000] * 4, 4096, 7168, None)])
def test_contiguous_matches_the_activation_cast(sizes, n, k, clamp):
    case = build_contiguous_swiglu(dict(sizes=sizes, n=n, k=k, clamp=clamp), torch.device("cuda"), len(sizes) + n)
    check_fp8_d_twice(case)


@pytest.mark.parametrize("groups,m_max,n,k,masked,clamp", [(4, 64, 4096, 7168, [64, 0, 1, 40], None),
                                                           (3, 300, 512, 2048, [300, 129, 7], 10.0),
                                                           (8, 32, 768, 144, [32, 5, 0, 17, 1, 32, 9, 3], 7.0),
                                                           (2, 17, 256, 576, [17, 30], None)])
def test_masked_matches_the_activation_cast(groups, m_max, n, k, masked, clamp):
    p = dict(groups=groups, m_max=m_max, n=n, k=k, masked=masked, expected_m=max(1, sum(masked) // groups),
             clamp=clamp)
    case = build_masked_swiglu(p, torch.device("cuda"), groups + n)
    case.run()
    case.check()


def test_zero_and_huge_rows():
    # Contiguous, one expert: rows 0-63 of A zero (zeros, the floor scale), rows 64-127 scaled by 1e10 (gate and up
    # ~1e13, activations ~1e26: far past e4m3 at any fixed scale, still finite in FP32; scaled, not overflowed).
    inter, hidden, m = 256, 512, 256
    a8, sa = deep_gemm.per_token_cast_to_fp8(torch.randn((m, hidden), device="cuda", dtype=torch.bfloat16),
                                             mn_major_sf=True)
    a8 = a8.clone()
    a8[:64] = 0
    sa = sa.clone()
    sa[64:128] = 1e10
    w = deep_gemm.per_block_cast_to_fp8(torch.randn((2 * inter, hidden), device="cuda", dtype=torch.bfloat16))
    b = deep_gemm.utils.interleave_swiglu_weights((w[0].view(1, 2 * inter, hidden), w[1].view(1, 4, 4)))
    d = torch.empty((m, inter), dtype=torch.float8_e4m3fn, device="cuda")
    sfd = torch.empty((inter // 128, m), device="cuda").t()
    deep_gemm.m_grouped_fp8_gemm_nt_contiguous_swiglu((a8, sa), b, (d, sfd),
                                                      torch.zeros(m, dtype=torch.int32, device="cuda"))
    torch.cuda.synchronize()
    assert bool(torch.isfinite(sfd).all()) and bool((sfd > 0).all()), "scales must be finite and positive"
    assert bool((d[:64].view(torch.uint8) & 0x7F == 0).all()), "zero rows must give zeros"
    assert float(sfd[0, 0]) == float(torch.tensor(1e-4) * (1 / 448.0))
    assert not bool((d.view(torch.uint8) & 0x7F == 0x7F).any()), "NaN in D"


def test_expert_mlp_against_the_unfused_path():
    # A decode MoE layer: gate/up with SwiGLU (masked, FP8 d), then down (masked, (D, SFD) as its a), against BF16
    # gate/up output -> SiLU(gate) * up in FP32 -> per_token_cast_to_fp8 -> the same down GEMM.
    def fused(a, w1, d, masked_m, expected_m):
        deep_gemm.m_grouped_fp8_gemm_nt_masked_swiglu(a, deep_gemm.utils.interleave_swiglu_weights(w1), d, masked_m,
                                                      expected_m)
    y, y_ref, rows = masked_expert_mlp(2 * 1024, fused, lambda gate_up: swiglu_reference(gate_up.float(), None))
    assert calc_diff(y[rows].float(), y_ref[rows].float()) < 2e-3
