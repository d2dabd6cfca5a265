"""GPU correctness of the sm100 kernel family (Blackwell, sm_100) in both scale paths: dense, MoE contiguous and
masked, run through DeepGEMM's v2 names (UE8M0 scales by default, FP32 with disable_ue8m0_cast=True), against
dequantised FP32 references; the first-use self-test gate. Skipped without an sm_100 device.

Path (a) (scales="fp32") must match the Hopper numerics (calc_diff < 1e-5 against the dequantised reference);
path (b) (scales="ue8m0") is compared with a reference that uses the same power-of-two-rounded scales (< 1e-4), and
with the BF16 product (< 1e-3 here too: rounding the scales up only costs FP8 range, not precision)."""
import random

import pytest
import torch

import deep_gemm
from deep_gemm import selftest, sm100_selftest
from deep_gemm.heuristics.sm100 import SCALE_PATHS, SCALES_UE8M0
from deep_gemm.families import sm100_fp8_gemm_1d2d as sm100
from deep_gemm.testing import calc_diff, dequant_per_block, dequant_per_token
from deep_gemm.utils.math import ceil_to_ue8m0
from gemm_cases import Guarded, contiguous_inputs, masked_inputs, padded_rows, quant_blocks, quant_rows


def has_sm100() -> bool:
    return torch.cuda.is_available() and torch.cuda.get_device_capability(0)[0] == 10


pytestmark = pytest.mark.skipif(not has_sm100(), reason="needs an sm_100 (Blackwell) device")

BOUND = {"fp32": 1e-5, "ue8m0": 1e-4}
DENSE_KN = ((576, 7168), (7168, 2112), (1536, 24576), (512, 32768), (16384, 7168), (7168, 4096), (2048, 7168))


def _applied(scales: str):
    return ceil_to_ue8m0 if scales == SCALES_UE8M0 else (lambda s: s)


def _check(out, ref, ref_bf16, scales, what):
    assert bool(torch.isfinite(out.float()).all()), f"{what}: NaN/Inf (unwritten or overflowed)"
    diff = calc_diff(out, ref)
    assert diff < BOUND[scales], f"{what}: calc_diff vs dequantised FP32 = {diff:.3g}"
    if ref_bf16 is not None and ref_bf16.numel() >= 1024:
        assert calc_diff(out, ref_bf16) < 1e-3, f"{what}: calc_diff vs BF16"


def run_dense(m, n, k, scales, seed):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    a8, sa, _, a = quant_rows(m, k, gen, "cuda")
    b8, sb, _, b = quant_blocks(1, n, k, gen, "cuda")
    b8, sb, b = b8[0], sb[0], b[0]
    applied = _applied(scales)
    ref = dequant_per_token(a8, applied(sa)) @ dequant_per_block(b8, applied(sb)).t()
    g = Guarded((m, n), torch.bfloat16, "cuda")
    lhs, rhs = (padded_rows(a8), sa), (padded_rows(b8), sb)
    deep_gemm.fp8_gemm_nt(lhs, rhs, g.out, disable_ue8m0_cast=scales == "fp32")
    torch.cuda.synchronize()
    assert not bool(g.untouched().any()), "elements left unwritten"
    _check(g.out, ref, a.float() @ b.float().t(), scales, f"dense {m}x{n}x{k} {scales}")
    first = g.out.clone()
    deep_gemm.fp8_gemm_nt(lhs, rhs, g.out, disable_ue8m0_cast=scales == "fp32")
    torch.cuda.synchronize()
    assert torch.equal(first.view(torch.int16), g.out.view(torch.int16)), "rerun is not bitwise identical"


@pytest.mark.parametrize("scales", SCALE_PATHS)
@pytest.mark.parametrize("m", [64, 128, 4096])
@pytest.mark.parametrize("k,n", DENSE_KN)
def test_dense_deepgemm_shapes(m, n, k, scales):
    run_dense(m, n, k, scales, seed=m + n + k)


@pytest.mark.parametrize("scales", SCALE_PATHS)
@pytest.mark.parametrize("m,n,k", [(1, 8, 16), (7, 72, 200), (129, 136, 576), (255, 1000, 128), (300, 4100, 1008),
                                   (1000, 2112, 7168)])
def test_dense_ragged(m, n, k, scales):
    run_dense(m, n, k, scales, seed=m * 7 + n)


def test_public_dense_op_takes_the_fp32_path():
    m, n, k = 300, 2112, 576
    gen = torch.Generator(device="cuda").manual_seed(3)
    a8, sa, a_deq, _ = quant_rows(m, k, gen, "cuda")
    b8, sb, b_deq, _ = quant_blocks(1, n, k, gen, "cuda")
    out = torch.empty((m, n), dtype=torch.bfloat16, device="cuda")
    deep_gemm.gemm_fp8_fp8_bf16_nt((a8, sa), (b8[0], sb[0]), out)
    torch.cuda.synchronize()
    assert calc_diff(out, a_deq @ b_deq[0].t()) < 1e-5


@pytest.mark.parametrize("scales", SCALE_PATHS)
@pytest.mark.parametrize("num_groups,m,n,k", [(4, 8192, 4096, 7168), (8, 4096, 7168, 2048), (32, 256, 4096, 7168)])
def test_contiguous(num_groups, m, n, k, scales):
    rng = random.Random(num_groups * m + n)
    sizes = [int(m * rng.uniform(0.7, 1.3)) for _ in range(num_groups)] + [0]
    gen = torch.Generator(device="cuda").manual_seed(n + k)
    lhs, rhs, m_indices, ref, ref_bf16 = contiguous_inputs(sizes, n, k, gen, "cuda")
    if scales == SCALES_UE8M0:
        (a8, sa), (b8, sb) = lhs, rhs
        a_deq = dequant_per_token(a8, ceil_to_ue8m0(sa))
        ref = torch.zeros_like(ref)
        for e in range(num_groups):
            rows = (m_indices == e).nonzero().squeeze(1)
            ref[rows] = a_deq[rows] @ dequant_per_block(b8[e], ceil_to_ue8m0(sb[e])).t()
    g = Guarded((m_indices.numel(), n), torch.bfloat16, "cuda")
    deep_gemm.m_grouped_fp8_gemm_nt_contiguous(lhs, rhs, g.out, m_indices, disable_ue8m0_cast=scales == "fp32")
    torch.cuda.synchronize()
    assert not bool(g.untouched().any()), "rows left unwritten"
    assert bool((g.out[m_indices < 0].float() == 0).all()), "padding rows must be zeros"
    _check(g.out, ref, ref_bf16, scales, f"contiguous {num_groups}x{m} n={n} k={k} {scales}")


@pytest.mark.parametrize("scales", SCALE_PATHS)
@pytest.mark.parametrize("num_groups,expected_m", [(1, 1024), (2, 512), (4, 256), (6, 37)])
@pytest.mark.parametrize("k,n", [(7168, 4096), (2048, 7168), (576, 136)])
def test_masked(num_groups, expected_m, k, n, scales):
    m_max = 4096 if expected_m >= 256 else 128
    gen = torch.Generator(device="cuda").manual_seed(num_groups + k)
    lhs, rhs, ref, ref_bf16 = masked_inputs(num_groups, m_max, n, k, gen, "cuda")
    if scales == SCALES_UE8M0:
        (a8, sa), (b8, sb) = lhs, rhs
        ref = torch.stack([dequant_per_token(a8[g], ceil_to_ue8m0(sa[g])) @
                           dequant_per_block(b8[g], ceil_to_ue8m0(sb[g])).t() for g in range(num_groups)])
    rng = random.Random(expected_m)
    masked = [min(m_max, int(expected_m * rng.uniform(0.7, 1.3))) for _ in range(num_groups)]
    masked[-1] = 0 if num_groups > 1 else masked[-1]
    masked_m = torch.tensor(masked, dtype=torch.int32, device="cuda")
    g = Guarded((num_groups, m_max, n), torch.bfloat16, "cuda")
    deep_gemm.m_grouped_fp8_gemm_nt_masked(lhs, rhs, g.out, masked_m, expected_m,
                                           disable_ue8m0_cast=scales == "fp32")
    torch.cuda.synchronize()
    valid = torch.arange(m_max, device="cuda").view(1, m_max) < masked_m.view(num_groups, 1)
    untouched = g.untouched()
    assert not bool(untouched[valid].any()), "rows < masked_m left unwritten"
    assert bool(untouched[~valid].all()), "rows >= masked_m were written"
    _check(g.out[valid], ref[valid], ref_bf16[valid], scales, f"masked {num_groups}x{expected_m} n={n} k={k}")


@pytest.mark.parametrize("kind", sm100.KINDS, ids=lambda k: k.value)
@pytest.mark.parametrize("scales", SCALE_PATHS)
def test_selftest_passes_on_this_device(kind, scales):
    results = sm100_selftest.run_selftest(kind, scales, torch.device("cuda", 0))
    assert results and all(r.ok for r in results), results


def test_gate_verdicts_are_cached_per_family():
    selftest.clear()
    run_dense(130, 200, 576, "fp32", seed=1)
    passed = {family: ok for (_, family), ok in selftest.verdicts().items()}
    assert passed.get("dense") is True


@pytest.mark.parametrize("m,n,k", [(130, 2112, 576), (4096, 7168, 2048)])
def test_dense_packed_ue8m0_scales_match_the_converted_ones(m, n, k):
    """Packed UE8M0 scales (the utils' MN-major int32 layout, SB per row of B) give the same bits as FP32 scales that
    the family converts itself."""
    gen = torch.Generator(device="cuda").manual_seed(m + k)
    a8, sa, _, _ = quant_rows(m, k, gen, "cuda")
    b8, sb, _, _ = quant_blocks(1, n, k, gen, "cuda")
    b8, sb = b8[0], sb[0]
    converted = torch.empty((m, n), dtype=torch.bfloat16, device="cuda")
    deep_gemm.fp8_gemm_nt((a8, sa), (b8, sb), converted)
    packed_sa = sm100.pack_ue8m0(sa).transpose(-1, -2)
    packed_sb = sm100.pack_ue8m0(sm100.rows_of_block_scales(sb, n)).transpose(-1, -2)
    packed = torch.empty_like(converted)
    deep_gemm.fp8_gemm_nt((a8, packed_sa), (b8, packed_sb), packed)
    torch.cuda.synchronize()
    assert torch.equal(converted.view(torch.int16), packed.view(torch.int16))
