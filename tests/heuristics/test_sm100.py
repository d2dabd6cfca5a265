"""Blackwell configuration heuristics (deep_gemm/heuristics/sm100.py): budgets (shared memory, tensor memory, the
register cap of the FP32-scale path), legality of the 2-CTA and multicast modes, and invariants over DeepGEMM's and
random shapes. Pure Python."""
import random

import pytest

from deep_gemm.heuristics import GemmProblem, KernelType
from deep_gemm.heuristics.common import ceil_div
from deep_gemm.heuristics.sm100 import (MAX_BLOCK_N_FP32, MAX_STAGES, NUM_SMS_B200, SCALE_PATHS, SCALES_FP32,
                                        SCALES_UE8M0, SMEM_BUDGET, TMEM_COLS, Sm100Config, build_sm100_config,
                                        get_sm100_config, kernel_key, legal_block, sm100_kernel_variants,
                                        sm100_smem_size, sm100_tmem_cols, tmem_alloc_cols)

KINDS = (KernelType.NORMAL, KernelType.M_GROUPED_CONTIGUOUS, KernelType.M_GROUPED_MASKED)
DEEPSEEK_NK = [(2112, 7168), (24576, 1536), (32768, 512), (7168, 16384), (4096, 7168), (7168, 2048), (7168, 576)]


def _problems(seed: int, count: int):
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        kind = rng.choice(KINDS)
        groups = 1 if kind == KernelType.NORMAL else rng.choice([1, 4, 8, 32, 256])
        m = max(1, int(round(2 ** rng.uniform(0, 15))))
        n = rng.choice([rng.randint(1, 512), rng.randint(1, 40000), 8 * rng.randint(1, 2048)])
        k = rng.choice([rng.randint(1, 600), 16 * rng.randint(1, 1024), 128 * rng.randint(1, 128)])
        sms = rng.choice([NUM_SMS_B200, NUM_SMS_B200, 147, 132, 74, 8, 2, 1])
        out.append((GemmProblem(m, n, k, sms, "sm_100a", kind, groups), rng.choice(SCALE_PATHS)))
    return out


PROBLEMS = [(GemmProblem(m, n, k, NUM_SMS_B200, "sm_100a"), s) for m in (1, 64, 128, 4096, 8192)
            for n, k in DEEPSEEK_NK for s in SCALE_PATHS] + _problems(19, 300)


def check_invariants(p: GemmProblem, scales: str, c: Sm100Config) -> None:
    assert c.scales == scales
    assert c.block_m in (128, 256) and c.block_n % 16 == 0 and 16 <= c.block_n <= 256
    # Budgets, as the kernel static-asserts them.
    assert c.smem_size == sm100_smem_size(c.block_m, c.block_n, c.num_stages, c.ue8m0) <= SMEM_BUDGET
    assert sm100_tmem_cols(c.block_n, c.ue8m0) <= c.tmem_cols == tmem_alloc_cols(sm100_tmem_cols(c.block_n, c.ue8m0))
    assert c.tmem_cols <= TMEM_COLS
    assert 1 <= c.num_stages <= MAX_STAGES
    # The deepest pipeline that fits.
    assert c.num_stages == MAX_STAGES or sm100_smem_size(c.block_m, c.block_n, c.num_stages + 1, c.ue8m0) > SMEM_BUDGET
    if not c.ue8m0:
        assert c.block_n <= MAX_BLOCK_N_FP32
    # 2-CTA tiles: a cluster of 2, FP32 scales, never the contiguous layout (a tile would span two experts).
    if c.pair:
        assert c.num_multicast == 2 and not c.ue8m0 and p.kernel_type != KernelType.M_GROUPED_CONTIGUOUS
    # Multicast of one-CTA tiles: pairs of tiles must share the multicast block.
    if c.num_multicast == 2 and not c.pair:
        if c.multicast_on_a:
            assert ceil_div(p.n, c.block_n) % 2 == 0
        else:
            assert p.kernel_type == KernelType.NORMAL and ceil_div(p.m, c.block_m) % 2 == 0
    # Grid: within the SMs, a multiple of the cluster size.
    assert 1 <= c.num_sms <= p.num_sms and c.num_sms % c.num_multicast == 0
    assert c.num_threads == 384


@pytest.mark.parametrize("problem, scales", PROBLEMS, ids=lambda x: str(x) if isinstance(x, str) else
                         f"{x.kernel_type.value}-m{x.m}-n{x.n}-k{x.k}-sms{x.num_sms}")
def test_invariants(problem, scales):
    check_invariants(problem, scales, get_sm100_config(problem, scales))


def test_budgets_mirror_the_kernel_layout():
    # [stages x (A 128x128 + B rows x 128 + UE8M0 factors)] + barriers (2 per stage + 4) + the TMEM address slot.
    assert sm100_smem_size(128, 128, 4, False) == 4 * (16384 + 16384) + (8 + 4) * 8 + 8
    assert sm100_smem_size(256, 128, 4, False) == 4 * (16384 + 8192) + (8 + 4) * 8 + 8
    assert sm100_smem_size(128, 144, 2, True) == 2 * (16384 + 144 * 128 + (128 + 256) * 4) + (4 + 4) * 8 + 8
    assert sm100_tmem_cols(224, False) == 448 and sm100_tmem_cols(224, True) == 448 + 4 + 8
    assert sm100_tmem_cols(256, True) > TMEM_COLS  # two 256-column accumulators leave no room for scale factors
    assert [tmem_alloc_cols(u) for u in (1, 32, 33, 200, 300, 512)] == [32, 32, 64, 256, 512, 512]
    with pytest.raises(ValueError, match="exceed"):
        tmem_alloc_cols(513)


def test_legal_blocks():
    assert legal_block(KernelType.NORMAL, 256, 224, SCALES_FP32)
    assert not legal_block(KernelType.NORMAL, 256, 128, SCALES_UE8M0)
    assert not legal_block(KernelType.M_GROUPED_CONTIGUOUS, 256, 128, SCALES_FP32)
    assert not legal_block(KernelType.NORMAL, 128, 256, SCALES_FP32)   # the register cap of path (a)
    assert not legal_block(KernelType.NORMAL, 128, 256, SCALES_UE8M0)  # 512 + scale-factor columns
    assert legal_block(KernelType.NORMAL, 128, 240, SCALES_UE8M0)


@pytest.mark.parametrize("changes, match", [
    (dict(block_m=64), "block_m"),
    (dict(block_n=40), "block_n"),
    (dict(smem_size=SMEM_BUDGET + 8), "shared memory"),
    (dict(tmem_cols=128), "tensor memory"),
    (dict(scales="fp8"), "scales"),
    (dict(num_sms=147, num_multicast=2), "cluster"),
])
def test_config_asserts_its_budgets(changes, match):
    fields = dict(block_m=128, block_n=128, num_stages=4, num_multicast=1, multicast_on_a=True, scales=SCALES_FP32,
                  num_sms=148, smem_size=sm100_smem_size(128, 128, 4, False), tmem_cols=256)
    fields.update(changes)
    with pytest.raises(ValueError, match=match):
        Sm100Config(**fields)


def test_pair_config_needs_its_cluster_and_fp32_scales():
    with pytest.raises(ValueError, match="2-CTA"):
        Sm100Config(block_m=256, block_n=128, num_stages=4, num_multicast=1, multicast_on_a=True, scales=SCALES_FP32,
                    num_sms=148, smem_size=sm100_smem_size(256, 128, 4, False), tmem_cols=256)
    config = build_sm100_config(4096, 7168, 256, 128, 148)
    assert config.pair and config.num_multicast == 2 and config.multicast_on_a


def test_large_dense_problems_use_2cta_tiles_and_small_ones_spread_over_sms():
    big = get_sm100_config(GemmProblem(4096, 7168, 7168, NUM_SMS_B200, "sm_100a"))
    assert big.pair and big.block_n >= 128
    small = get_sm100_config(GemmProblem(64, 7168, 7168, NUM_SMS_B200, "sm_100a"))
    assert not small.pair and small.block_m == 128 and small.num_sms >= 100
    ue8m0 = get_sm100_config(GemmProblem(4096, 7168, 7168, NUM_SMS_B200, "sm_100a"), SCALES_UE8M0)
    assert not ue8m0.pair and ue8m0.ue8m0


def test_masked_grids_take_every_sm():
    c = get_sm100_config(GemmProblem(256, 4096, 7168, NUM_SMS_B200, "sm_100a", KernelType.M_GROUPED_MASKED, 4))
    assert c.num_sms == NUM_SMS_B200


@pytest.mark.parametrize("arch", ["sm_90a", "sm_100"])
def test_rejects_other_arches(arch):
    with pytest.raises(ValueError, match="arch"):
        get_sm100_config(GemmProblem(128, 128, 128, NUM_SMS_B200, arch))


def test_rejects_kinds_without_a_kernel_and_unknown_scales():
    with pytest.raises(ValueError, match="psum"):
        get_sm100_config(GemmProblem(128, 128, 128, 148, "sm_100a", KernelType.M_GROUPED_PSUM, 2))
    with pytest.raises(ValueError, match="scales"):
        get_sm100_config(GemmProblem(128, 128, 128, 148, "sm_100a"), "e4m3")


@pytest.mark.parametrize("kind", [KernelType.NORMAL, KernelType.M_GROUPED_CONTIGUOUS])
@pytest.mark.parametrize("scales", SCALE_PATHS)
def test_variants_cover_every_m(kind, scales):
    n, k = 4096, 7168
    variants = {kernel_key(v) for v in sm100_kernel_variants(n, k, NUM_SMS_B200, kind, scales)}
    rng = random.Random(7)
    for m in [1, 127, 128, 129, 511, 512, 4095, 4096, 65536] + [rng.randint(1, 65536) for _ in range(40)]:
        c = get_sm100_config(GemmProblem(m, n, k, NUM_SMS_B200, "sm_100a", kind), scales)
        assert kernel_key(c) in variants, (m, c)


def test_memoised():
    p = GemmProblem(4096, 7168, 2048, NUM_SMS_B200, "sm_100a")
    assert get_sm100_config(p) is get_sm100_config(p)
