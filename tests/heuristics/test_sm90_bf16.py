"""The BF16 GEMM's configuration (deep_gemm/heuristics/sm90_bf16.py), no GPU needed: every pick fits shared memory
and the kernel's static requirements, and the picks follow the measured rules (benchmarks/NOTES.md, "BF16 GEMMs")."""
import pytest

from deep_gemm.heuristics.common import KernelType
from deep_gemm.heuristics.sm90 import SMEM_BUDGET
from deep_gemm.heuristics.sm90_bf16 import (COMPUTE_BLOCK_NS, MAX_CLUSTER_K_SPLITS, bf16_smem_size, build_bf16_config,
                                            get_bf16_config, legal_block, max_clusters)

SHAPES = [(m, n) for m in (1, 7, 64, 128, 129, 1000, 4096, 16384) for n in (16, 200, 576, 2112, 4096, 7168, 32768)]


@pytest.mark.parametrize("mn_major_b", [False, True])
@pytest.mark.parametrize("out_bytes", [2, 4])
def test_every_pick_is_legal_and_fits(mn_major_b, out_bytes):
    for m, n in SHAPES:
        c = get_bf16_config(m, n, 132, mn_major_b, out_bytes)
        assert legal_block(c.block_m, c.block_n, mn_major_b), (m, n, c)
        assert c.smem_size == bf16_smem_size(c.block_m, c.block_n, c.num_stages, out_bytes) <= SMEM_BUDGET
        assert c.num_stages >= 2 and 1 <= c.num_sms <= 132
        assert (c.block_n * out_bytes) % c.swizzle_d_bytes == 0
        if mn_major_b:
            assert c.block_n % 64 == 0
        if m > 128:
            assert c.block_n in COMPUTE_BLOCK_NS and c.block_m > 64, (m, n, c)


def test_large_problems_take_wide_tiles_and_decode_spreads_over_the_sms():
    big = get_bf16_config(4096, 7168, 132, False, 2)
    assert (big.block_m, big.block_n) == (128, 256)
    decode = get_bf16_config(1, 2112, 132, False, 2)
    assert decode.block_m == 64 and decode.num_sms == 132 and decode.num_stages > 8


def test_compute_bound_grouped_calls_take_two_math_warpgroups():
    """Masked calls of ~192 rows per group are compute-bound: 64-row tiles (one math warpgroup) ran at 0.37x
    DeepGEMM on an H100 (32 groups, n = 6144, k = 7168)."""
    for n in (4096, 6144, 7168):
        c = get_bf16_config(192, n, 132, False, 2, KernelType.M_GROUPED_MASKED, 32)
        assert c.block_m == 128, (n, c)
    assert get_bf16_config(20, 6144, 132, False, 2, KernelType.M_GROUPED_MASKED, 32).block_m == 64


def test_illegal_blocks_are_refused():
    assert not legal_block(256, 256, False)   # 256 accumulators per thread
    assert not legal_block(128, 96, True)     # MN-major B tiles are whole 64-wide chunks
    with pytest.raises(ValueError, match="does not fit"):
        build_bf16_config(128, 256, 128, 256, 132, 4, num_stages=8)


@pytest.mark.parametrize("mn_major_b", [False, True])
@pytest.mark.parametrize("out_bytes", [2, 4])
def test_decode_picks_are_legal_and_fit(mn_major_b, out_bytes):
    """Dense calls of m <= 128 given k: the decode model's tile and cluster K splits (grid a multiple of the split
    count, at most one wave of co-resident clusters with splits, at least 4 stages beside the partial tile)."""
    for m in (1, 7, 32, 64, 65, 128):
        for n in (16, 200, 256, 576, 2112, 4096, 7168, 24576, 129280):
            for k in (64, 100, 512, 1536, 7168, 16384):
                c = get_bf16_config(m, n, 132, mn_major_b, out_bytes, k=k)
                splits = c.cluster_k_splits
                assert legal_block(c.block_m, c.block_n, mn_major_b), (m, n, k, c)
                assert c.block_m == (64 if m <= 64 else 128), (m, n, k, c)
                assert 1 <= splits <= MAX_CLUSTER_K_SPLITS and c.num_sms % splits == 0 and c.num_multicast == 1
                assert c.smem_size == bf16_smem_size(c.block_m, c.block_n, c.num_stages, out_bytes, splits)
                assert c.smem_size <= SMEM_BUDGET and c.num_stages >= (4 if splits > 1 else 2)
                if splits > 1:
                    tiles = -(-m // c.block_m) * -(-n // c.block_n)
                    assert c.num_sms == tiles * splits and tiles <= max_clusters(132, splits), (m, n, k, c)


def test_decode_picks_follow_the_measured_sweep():
    """The H100 sweep (benchmarks/NOTES.md, "BF16 GEMMs"): few-tile shapes cut K over a cluster, 128-row calls take
    two math warpgroups (128 x 7168 x 16384: 128 x 64 ran 92 us, the earlier 64 x 112 pick 110), wide n keeps one
    wave of wide tiles, and without k (warm-up of old shapes) nothing is split."""
    assert get_bf16_config(1, 576, 132, False, 2, k=7168).cluster_k_splits > 1
    assert get_bf16_config(1, 256, 132, False, 4, k=7168).cluster_k_splits > 1
    big = get_bf16_config(128, 7168, 132, False, 2, k=16384)
    assert (big.block_m, big.block_n, big.cluster_k_splits) == (128, 64, 1)
    wide = get_bf16_config(1, 32768, 132, False, 2, k=512)
    assert wide.cluster_k_splits == 1 and wide.block_n == 256 and wide.num_sms == 128
    assert get_bf16_config(1, 576, 132, False, 2).cluster_k_splits == 1
    assert get_bf16_config(256, 576, 132, False, 2, k=7168).cluster_k_splits == 1  # m > 128: compute tiles


def test_cluster_size_limits():
    assert [max_clusters(132, s) for s in (1, 2, 3, 4, 6, 8)] == [132, 66, 40, 32, 16, 16]
    with pytest.raises(ValueError, match="cluster K splits"):
        build_bf16_config(64, 256, 64, 64, 132, 2, groups=4, cluster_k_splits=2)
    with pytest.raises(ValueError, match="cluster_k_splits must be 1-8"):
        build_bf16_config(1, 256, 64, 64, 132, 2, cluster_k_splits=9)


def test_dense_multicast_only_with_a_full_wave_of_paired_blocks():
    """Compute-bound dense calls share a tile operand's loads over 2-CTA clusters once the tiles fill (nearly) every
    SM (H100: 4096 x 2112 x 7168 182 -> 170 us, 4096 x 576 x 7168 at 128 x 144 55.3 -> 51.9 us); 96 tiles lost 3%.
    The larger matrix is shared where its blocks pair up, whatever the operands' majors."""
    for mn_major_b in (False, True):
        c = get_bf16_config(4096, 2112, 132, mn_major_b, 2)
        assert (c.block_m, c.block_n, c.num_multicast, c.multicast_on_a) == (128, 192, 2, False) and c.num_sms % 2 == 0
    c = get_bf16_config(4096, 576, 132, False, 2)
    assert (c.block_n, c.num_multicast, c.multicast_on_a, c.num_sms) == (144, 2, True, 128)  # 128 tiles, A shared
    assert get_bf16_config(4096, 576, 132, True, 2).num_multicast == 1   # MN-major B: 128 x 192, 96 tiles
    for m, n in ((4096, 7168), (8192, 4096), (4096, 129280)):
        c = get_bf16_config(m, n, 132, False, 4)
        blocks = -(-n // c.block_n) if c.multicast_on_a else -(-m // c.block_m)
        assert c.num_multicast == 2 and blocks % 2 == 0, (m, n, c)
        assert c.multicast_on_a == (m >= n and -(-n // c.block_n) % 2 == 0), (m, n, c)
    with pytest.raises(ValueError, match="multicast of A"):
        build_bf16_config(4096, 2112, 128, 192, 132, 2, num_multicast=2, multicast_on_a=True)


def test_grouped_multicast_shares_b_past_one_m_block_per_group():
    """Contiguous and masked calls pair M blocks to share B once the tiles fill every SM (H100: contiguous 4 x 8192
    rows 4336 -> 3936 us, masked 6 x 1024 983 -> 757 us); not masked groups of one M block, nor psum."""
    for kind, m, groups in ((KernelType.M_GROUPED_CONTIGUOUS, 32768, 1), (KernelType.M_GROUPED_MASKED, 1024, 6),
                            (KernelType.M_GROUPED_MASKED, 192, 32)):
        c = get_bf16_config(m, 6144, 132, False, 2, kind, groups)
        assert (c.num_multicast, c.multicast_on_a) == (2, False) and c.num_sms % 2 == 0, (kind, m, c)
    assert get_bf16_config(20, 6144, 132, False, 2, KernelType.M_GROUPED_MASKED, 32).num_multicast == 1
    assert get_bf16_config(256, 6144, 132, False, 2, KernelType.M_GROUPED_CONTIGUOUS).num_multicast == 1  # 96 tiles
    assert get_bf16_config(4096, 6144, 132, False, 2, KernelType.M_GROUPED_PSUM, 8).num_multicast == 1


def test_dense_calls_of_fewer_rows_load_only_their_rows_of_a():
    """m < BLOCK_M, dense, A K-major: each stage loads m rows of A rounded up to a power of two >= 8 (a_rows_per_stage,
    tests/heuristics/test_sm90.py; as DeepGEMM's 16- and 32-row decode tiles); grouped calls, MN-major A and full
    tiles load BLOCK_M rows."""
    assert get_bf16_config(1, 2112, 132, False, 2, k=7168).a_box_rows == 8
    assert get_bf16_config(20, 2112, 132, True, 4, k=7168).a_box_rows == 32
    assert get_bf16_config(1, 2112, 132, False, 2, k=7168, mn_major_a=True).a_box_rows == 0
    assert get_bf16_config(128, 2112, 132, False, 2, k=7168).a_box_rows == 0
    assert get_bf16_config(20, 6144, 132, False, 2, KernelType.M_GROUPED_MASKED, 32).a_box_rows == 0
    with pytest.raises(ValueError, match="fewer A rows"):
        build_bf16_config(1, 2112, 64, 64, 132, 2, groups=4, kind=KernelType.BATCHED, a_box_rows=8)


def test_memory_bound_tiles_read_no_rows_past_n():
    """Batched heads and grouped experts stack B along n: a tile wider than n's rest would load the next head's or
    expert's rows. Among widths giving as many tiles the pick loads the fewest B rows (DeepGEMM's einsum heads,
    n = 128)."""
    for kind, groups in ((KernelType.BATCHED, 128), (KernelType.BATCHED, 8), (KernelType.M_GROUPED_MASKED, 32)):
        for m, n in ((1, 128), (64, 128), (128, 128), (64, 200), (128, 576), (16, 2112)):
            c = get_bf16_config(m, n, 132, False, 2, kind, groups)
            loaded = -(-n // c.block_n) * c.block_n
            for bn in range(16, 257, 16):
                if legal_block(c.block_m, bn, False) and -(-n // bn) == -(-n // c.block_n):
                    assert loaded <= -(-n // bn) * bn, (kind, m, n, bn, c)
    heads = get_bf16_config(128, 128, 132, False, 2, KernelType.BATCHED, 128)
    assert (heads.block_m, heads.block_n) == (128, 128)


def test_batched_heads_past_128_rows_take_whole_128_or_256_wide_tiles():
    """DeepGEMM's bhd,hdr->bhr at h = 8 (4096 x 4096 x 1024 per head, B MN-major): 128 x 256, measured 1.26x faster
    than the cycle model's 128 x 192 (H100); no 144 or 192 wide tile for any batched call past 128 rows."""
    for m in (4096, 8192):
        c = get_bf16_config(m, 4096, 132, True, 2, KernelType.BATCHED, 8)
        assert (c.block_m, c.block_n) == (128, 256), c
    for m, n, heads in ((200, 576, 16), (4096, 1536, 8), (1000, 2112, 32)):
        for mn_major_b in (False, True):
            c = get_bf16_config(m, n, 132, mn_major_b, 2, KernelType.BATCHED, heads)
            assert c.block_n in (64, 128, 256), (m, n, heads, c)
