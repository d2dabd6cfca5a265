"""Hopper (sm_90a) configuration for the BF16 GEMM (include/deep_gemm/sm90/bf16_gemm.cuh): block shape, stages,
output swizzle and grid, for either operand layout and a BF16 or FP32 D."""
import functools
from typing import Tuple

from .common import (GemmConfig, KernelType, a_rows_per_stage, ceil_div, max_clusters, min_sms_for_waves,
                     num_waves)
from .sm90 import SMEM_BUDGET, SMEM_BYTES_PER_CLK, num_math_threads

BLOCK_K = 64              # BF16 elements of K per stage: one 128-byte swizzle row
# NOTES: narrow decode tiles carry little per stage: the pipeline's depth is what keeps enough weight bytes in flight
# (the FP8 kernel measured 16 stages vs 8 at 64x4096x7168: 13.5 vs 14.7 us).
MAX_STAGES = 16
BF16_FLOPS_PER_CLK = 4096  # dense BF16 FLOPs per clock of one SM (Hopper): half of FP8's
BLOCK_MS = (64, 128, 256)
BLOCK_NS = tuple(range(16, 257, 16))
# NOTES: past m = 128 only whole 64-wide tiles: the first measurement (H100, 4096x7168x16384 nt) ran 128x176 (picked
# by the model, 32-byte D swizzle) at 619 TFLOPS against 791 for 128x256 (the MN-major B layouts' pick).
COMPUTE_BLOCK_NS = (64, 128, 144, 192, 256)
# NOTES: the einsums' per-head GEMMs past m = 128 take whole 128- or 256-wide tiles: on an H100 (h = 8, 4096 x 4096 x
# 1024 per head, B MN-major) the model's 128 x 192 (4 stages, a ragged last N tile) ran 470 us where 128 x 256 (3
# stages) ran 375 and DeepGEMM 372; K-major B, n = 1024: 444 vs 353 us.
BATCHED_COMPUTE_BLOCK_NS = (64, 128, 256)
# Modelled efficiency of a pipeline this shallow (the K loop waits for each K block before the next is issued).
_STAGE_EFFICIENCY = {1: 0.4, 2: 0.7, 3: 0.9}
# Dense calls of m <= 128 rows stream B (memory-bound) and may cut K over a cluster of CTAs (bf16_gemm.cuh,
# ClusterSplitEpilogue). Their model (decode_us): a fixed cost per call, one more with splits (the partial tiles'
# exchange), each CTA's K loop (a K block costs its fixed round trip or its A and B rows at one SM's streaming rate),
# and DRAM shared by the active CTAs (each adds its share, up to the whole card's rate). The constants were chosen
# so that the picks lose least against the best of an H100 sweep over 10 shapes (`python -m tools.tune --family
# bf16`, its 320 configurations with the heuristic's BLOCK_M; 3% in geomean, at most 11% at 1 x 256 x 7168;
# benchmarks/NOTES.md "BF16 GEMMs"). With m-row A boxes (a_box_rows) unsplit narrow tiles got cheaper: the split
# cost went 1 -> 2 us (H100, 1 x 2112 x 7168: 64 x 16 on 132 SMs 18.8 us, 64 x 48 cut in 2 20.0).
MAX_CLUSTER_K_SPLITS = 8          # the kernel's limit (a portable cluster)
DECODE_SPLITS = (1, 2, 3, 4, 6)   # the counts the heuristic picks from (the measured ones)
_CALL_US = 3.0
_SPLIT_US = 2.0
_KBLOCK_US = 0.15
_CTA_BYTES_PER_US = 80e3
_CTA_SHARE_BYTES_PER_US = 30e3
_DRAM_BYTES_PER_US = 2.1e6
# Candidates modelled within this factor of the fastest count as equal: then the fewest splits, the fewest waves
# (wide tiles for wide n: the model does not see A's re-reads per tile), the most CTAs.
_DECODE_TOLERANCE = 1.03


def decode_us(m: int, n: int, k: int, block_m: int, block_n: int, num_sms: int, splits: int) -> float:
    """Modelled time of a dense m <= 128 call with this tile and split count (see the constants above)."""
    tiles = ceil_div(m, block_m) * ceil_div(n, block_n)
    clusters = max_clusters(num_sms, splits)
    ctas = min(tiles, clusters) * splits
    stage_bytes = (min(m, block_m) + block_n) * BLOCK_K * 2
    per_cta = ceil_div(ceil_div(k, BLOCK_K), splits) * max(_KBLOCK_US, stage_bytes / _CTA_BYTES_PER_US)
    dram = (m + n) * k * 2 / min(_DRAM_BYTES_PER_US, ctas * _CTA_SHARE_BYTES_PER_US)
    return _CALL_US + (_SPLIT_US if splits > 1 else 0.0) + max(num_waves(tiles, clusters) * per_cta, dram)


def legal_block(block_m: int, block_n: int, mn_major_b: bool) -> bool:
    """The kernel's static requirements: an MN-major B tile is whole 64-wide chunks, and a thread keeps at most 128
    FP32 accumulators (two 64-row sub-tiles per warpgroup at BLOCK_M = 256)."""
    if mn_major_b and block_n % 64:
        return False
    sub_tiles = block_m // (64 * (num_math_threads(block_m) // 128))
    return sub_tiles * block_n // 2 <= 128


def swizzle_d_bytes(block_n: int, out_bytes: int) -> int:
    """Widest TMA swizzle that divides one output row of the tile (BLOCK_N is a multiple of 16: 32 always does)."""
    return next(s for s in (128, 64, 32) if (block_n * out_bytes) % s == 0)


def bf16_smem_size(block_m: int, block_n: int, num_stages: int, out_bytes: int, cluster_k_splits: int = 1) -> int:
    """Mirror of `bf16_gemm_smem_size` in include/deep_gemm/sm90/bf16_gemm.cuh (the kernel asserts equality)."""
    if cluster_k_splits > 1:  # the FP32 partial tile and its two barriers
        d = ceil_div(block_m * block_n * 4 + 16, 1024) * 1024
    else:  # one 64-row D tile per math warpgroup
        d = num_math_threads(block_m) // 128 * 64 * block_n * out_bytes
    return d + num_stages * (block_m + block_n) * 128 + num_stages * 2 * 8


def max_stages(block_m: int, block_n: int, out_bytes: int, cluster_k_splits: int = 1) -> int:
    return next((s for s in range(MAX_STAGES, 0, -1)
                 if bf16_smem_size(block_m, block_n, s, out_bytes, cluster_k_splits) <= SMEM_BUDGET), 0)


def kblock_cycles(block_m: int, block_n: int, stages: int) -> float:
    """Modelled SM cycles per 64-wide K block of one tile: tensor-core time or shared-memory traffic (TMA writes of
    A and B, WGMMA reads of each 64-row sub-tile's A rows and all of B), whichever is larger, over the modelled
    efficiency of the pipeline's depth."""
    mma = 2 * block_m * block_n * BLOCK_K / BF16_FLOPS_PER_CLK
    smem = ((block_m + block_n) * 128 + (block_m // 64) * (64 + block_n) * 128) / SMEM_BYTES_PER_CLK
    return max(mma, smem) / _STAGE_EFFICIENCY.get(stages, 1.0)


def _pick_decode(m: int, n: int, k: int, sms: int, mn_major_b: bool, out_bytes: int) -> Tuple[int, int, int]:
    """(block_m, block_n, cluster K splits) of a dense call of m <= 128 rows: the fastest by `decode_us`, then the
    fewest splits, the fewest waves, the most CTAs. One M block of 64 or 128 rows (two math warpgroups past 64 rows:
    128 x 64 tiles ran 128 x 7168 x 16384 in 92 us where 64 x 112 took 110)."""
    block_m = 64 if m <= 64 else 128
    scored = []
    for bn in BLOCK_NS:
        if not legal_block(block_m, bn, mn_major_b):
            continue
        for splits in DECODE_SPLITS:
            if max_clusters(sms, splits) == 0 or max_stages(block_m, bn, out_bytes, splits) < (2 if splits == 1 else 4):
                continue
            tiles, clusters = ceil_div(m, block_m) * ceil_div(n, bn), max_clusters(sms, splits)
            key = (splits, num_waves(tiles, clusters), -min(tiles, clusters) * splits, bn)
            scored.append((decode_us(m, n, k, block_m, bn, sms, splits), key))
    fastest = min(t for t, _ in scored)
    splits, _, _, bn = min(key for t, key in scored if t <= fastest * _DECODE_TOLERANCE)
    return block_m, bn, splits


def _pick_blocks(m: int, n: int, sms: int, mn_major_b: bool, out_bytes: int, groups: int,
                 max_block_m: int, compute_block_ns: Tuple[int, ...] = COMPUTE_BLOCK_NS) -> Tuple[int, int]:
    candidates = []
    for bm in BLOCK_MS:
        # NOTES: past m = 128 (compute-bound) no 64-row tiles: one math warpgroup does not keep the tensor cores
        # busy, which the cycle model does not see (H100, masked 32 groups x ~192 rows, n = 6144, k = 7168: 64 x 256
        # tiles ran 191 TFLOPS where DeepGEMM ran 516).
        if (bm > 64 and m <= 64) or bm > max_block_m or (bm == 64 and m > 128):
            continue
        for bn in (BLOCK_NS if m <= 128 else compute_block_ns):
            if legal_block(bm, bn, mn_major_b) and max_stages(bm, bn, out_bytes) >= 2:
                candidates.append((bm, bn))
    best_key, best = None, None
    for bm, bn in candidates:
        tiles = groups * ceil_div(m, bm) * ceil_div(n, bn)
        waves = num_waves(tiles, sms)
        if m <= 128:
            # Memory-bound: spread the weights over as many SMs as possible (fewest waves, then fullest last wave,
            # then the fewest B rows loaded: a tile wider than n's rest reads rows past them, e.g. the next head's
            # of a batched B; then fewer A re-reads: wider N).
            key = (waves, -(tiles - (waves - 1) * sms), ceil_div(n, bn) * bn, -bn)
        else:
            key = (waves * kblock_cycles(bm, bn, max_stages(bm, bn, out_bytes)), tiles)
        if best_key is None or key < best_key:
            best_key, best = key, (bm, bn)
    return best


# A compute-bound call's tiles fill this share of the SMs or more: 2-CTA clusters share a tile operand's loads.
_MULTICAST_MIN_WAVE = 0.875


def _dense_multicast(m: int, n: int, block_m: int, block_n: int, num_sms: int) -> Tuple[int, bool]:
    """(CTAs per TMA load, shared operand A?) of a dense compute-bound call: pairs share the larger matrix's tile
    loads (A if m >= n: the one L2 holds least of) when the tiles fill (nearly) every SM (the L2-to-SM traffic then
    limits) and that operand's blocks pair up, else the other's.
    NOTES: H100, same run (benchmarks/NOTES.md "BF16 GEMMs"): 4096 x 2112 x 7168 at 128 x 192 182 -> 170 us with B
    shared, 4096 x 24576 x 1536 453 -> 405 us, 4096 x 576 x 7168 at 128 x 144 (128 tiles) 55.3 -> 51.9 us with A
    shared (53.2 with B), 4096 x 256 x 7168 at 128 x 64 (128 tiles) 44.5 -> 37.8 us with A (40.3 with B); with 96
    tiles (4096 x 576 at 128 x 192) sharing B lost 3%."""
    m_blocks, n_blocks = ceil_div(m, block_m), ceil_div(n, block_n)
    if m_blocks * n_blocks < num_sms * _MULTICAST_MIN_WAVE or num_sms % 2:
        return 1, True
    for on_a in ((True, False) if m >= n else (False, True)):
        if (n_blocks if on_a else m_blocks) % 2 == 0:
            return 2, on_a
    return 1, True


def _grouped_multicast(kind: KernelType, m: int, tiles: int, num_sms: int) -> int:
    """CTAs per B load of a contiguous or masked call: pairs of M blocks share B (the kernel checks each pair on the
    device) once the tiles fill every SM and, masked, each group spans more than one M block.
    NOTES: H100, same run: contiguous 4 x 8192 rows, 6144 x 7168 at 128 x 192 4336 -> 3936 us; 8 x 4096, 4096 x 2048
    847 -> 769 us; masked 6 x 1024, 6144 x 7168 983 -> 757 us; 32 x 192, 7168 x 3072 672 -> 603 us."""
    if kind not in (KernelType.M_GROUPED_CONTIGUOUS, KernelType.M_GROUPED_MASKED) or tiles < num_sms or num_sms % 2:
        return 1
    return 2 if kind == KernelType.M_GROUPED_CONTIGUOUS or m > 128 else 1


def build_bf16_config(m: int, n: int, block_m: int, block_n: int, num_sms: int, out_bytes: int,
                      num_stages: int = 0, groups: int = 1, cluster_k_splits: int = 1, num_multicast: int = 1,
                      multicast_on_a: bool = True, kind: KernelType = KernelType.NORMAL,
                      a_box_rows: int = 0) -> GemmConfig:
    """The full configuration for chosen blocks (deepest pipeline that fits unless `num_stages` is given, smallest
    grid that keeps the number of waves; `groups` groups of m rows each; `cluster_k_splits` CTAs per tile, each
    taking one range of K, the grid a multiple of them; `num_multicast` 2: tiles in 2-CTA clusters sharing A's
    (`multicast_on_a`: dense or `kind` batched (the einsums' heads), an even N block count) or B's (dense: an even M block count; `kind` contiguous or
    masked: any, the kernel pairs the tiles and checks each pair) TMA loads; `a_box_rows`: A rows per stage, fewer
    than block_m for a dense call of fewer rows with A K-major (0: block_m))."""
    splits = cluster_k_splits
    stages = num_stages or max_stages(block_m, block_n, out_bytes, splits)
    if stages < 1 or bf16_smem_size(block_m, block_n, stages, out_bytes, splits) > SMEM_BUDGET:
        raise ValueError(f"block {block_m}x{block_n} with {stages} stages does not fit in shared memory")
    if splits > 1 and (groups != 1 or num_sms < splits):
        raise ValueError(f"cluster K splits ({splits}) are for dense GEMMs on at least as many SMs")
    paired_on_device = kind in (KernelType.M_GROUPED_CONTIGUOUS, KernelType.M_GROUPED_MASKED) and not multicast_on_a
    heads_share_a = kind == KernelType.BATCHED and multicast_on_a  # a head's N blocks pair up: pairs stay in a head
    if num_multicast == 2 and not paired_on_device and (
            (kind != KernelType.NORMAL and not heads_share_a) or (groups != 1 and not heads_share_a) or splits > 1 or
            (ceil_div(n, block_n) if multicast_on_a else ceil_div(m, block_m)) % 2):
        raise ValueError(f"multicast of {'A' if multicast_on_a else 'B'} needs a dense GEMM whose "
                         f"{'N' if multicast_on_a else 'M'} blocks pair up, B shared by contiguous / masked pairs, "
                         f"or A by a batched GEMM's N block pairs ({m}x{n}, {block_m}x{block_n})")
    if num_multicast == 2 and num_sms < 2:
        raise ValueError("multicast needs at least 2 SMs (a 2-CTA cluster)")
    tiles = groups * ceil_div(m, block_m) * ceil_div(n, block_n)
    if num_multicast == 2:
        grid = min(num_sms // 2 * 2, min_sms_for_waves(tiles, num_waves(tiles, num_sms), 2))
    else:
        clusters = num_sms // splits
        grid = min(clusters, min_sms_for_waves(tiles, num_waves(tiles, clusters), 1)) * splits
    if a_box_rows and (kind != KernelType.NORMAL or num_multicast > 1):
        raise ValueError("fewer A rows per stage are for dense GEMMs without multicast")
    return GemmConfig(block_m=block_m, block_n=block_n, block_k=BLOCK_K, num_stages=stages, a_box_rows=a_box_rows,
                      num_multicast=num_multicast, multicast_on_a=multicast_on_a,
                      swizzle_d_bytes=swizzle_d_bytes(block_n, out_bytes), num_sms=grid,
                      smem_size=bf16_smem_size(block_m, block_n, stages, out_bytes, splits),
                      num_threads=num_math_threads(block_m) + 128, cluster_k_splits=splits)


@functools.lru_cache(maxsize=4096)
def get_bf16_config(m: int, n: int, num_sms: int, mn_major_b: bool, out_bytes: int,
                    kind: KernelType = KernelType.NORMAL, groups: int = 1, k: int = 0,
                    mn_major_a: bool = False) -> GemmConfig:
    """Configuration of a BF16 GEMM with m x n outputs of `out_bytes` (2: BF16, 4: FP32) each (m, n > 0). K does not
    enter: every tile runs the same K loop. Grouped kinds: contiguous counts m as all rows (a tile stays inside one
    128-row segment: BLOCK_M <= 128); masked and psum take m as the expected rows of each of `groups` groups, whose
    last blocks are partial (BLOCK_M <= 128 wastes less of them); batched takes m as the rows of each of `groups`
    heads. Dense calls of m <= 128 rows given their `k` are memory-bound: tile and cluster K splits from the decode
    model (`_pick_decode`); k = 0 (unknown) keeps the wave-count choice without splits. Past 128 rows, dense,
    contiguous and masked calls may share tile loads over 2-CTA clusters (_dense_multicast, _grouped_multicast).
    Dense calls of fewer rows than the tile with A K-major (not `mn_major_a`) load only their rows of A per stage
    (a_rows_per_stage)."""
    if min(m, n, num_sms, groups) <= 0 or out_bytes not in (2, 4):
        raise ValueError(f"m, n, num_sms and groups must be positive and out_bytes 2 or 4, got {m}, {n}, {num_sms}, "
                         f"{groups}, {out_bytes}")
    per_group = kind in (KernelType.M_GROUPED_MASKED, KernelType.M_GROUPED_PSUM, KernelType.BATCHED)
    tile_groups = groups if per_group else 1
    max_block_m = 256 if kind in (KernelType.NORMAL, KernelType.BATCHED) else 128
    splits, multicast, on_a = 1, 1, True
    if kind == KernelType.NORMAL and m <= 128 and k > 0:
        bm, bn, splits = _pick_decode(m, n, k, num_sms, mn_major_b, out_bytes)
    else:
        bm, bn = _pick_blocks(m, n, num_sms, mn_major_b, out_bytes, tile_groups, max_block_m,
                              BATCHED_COMPUTE_BLOCK_NS if kind == KernelType.BATCHED else COMPUTE_BLOCK_NS)
        if kind == KernelType.NORMAL:
            multicast, on_a = _dense_multicast(m, n, bm, bn, num_sms)
        else:
            multicast = _grouped_multicast(kind, m, tile_groups * ceil_div(m, bm) * ceil_div(n, bn), num_sms)
            on_a = multicast == 1
    a_box_rows = 0
    if kind == KernelType.NORMAL and not mn_major_a and multicast == 1:
        a_box_rows = a_rows_per_stage(m, bm)
    return build_bf16_config(m, n, bm, bn, num_sms, out_bytes, groups=tile_groups, cluster_k_splits=splits,
                             num_multicast=multicast, multicast_on_a=on_a, kind=kind, a_box_rows=a_box_rows)


# The sum over batches in one launch (einsum bmk,bnk->mn): clusters of CLUSTER_SUM_SPLITS CTAs cut the walk over
# (batch, K block) and add up in order, where the walk is short enough that the separate partial-sum pass costs more
# than the lost parallelism. NOTES: H100, s = 129 (k = 128, 256, 384): 20.9 -> 15.5, 31.8 -> 27.2, 40.1 -> 34.2 us
# at 128x64 ks8 against K splits + sum; s = 4096, 128x384x128: 195 -> 210 us (a loss). The largest size whose
# clusters all run at once (max_clusters) is taken; 16 is sm_90's non-portable cluster size.
CLUSTER_SUM_SPLITS = (16, 8)
CLUSTER_SUM_MAX_K_BLOCKS = 2048


def sums_in_clusters(m: int, n: int, batches: int, k: int, num_sms: int) -> bool:
    """Whether an [m, n] FP32 sum over `batches` products of K = k runs in one launch over clusters
    (get_bf16_cluster_sum_config) rather than as K splits into partial sums plus a sum."""
    return 0 < batches * ceil_div(k, BLOCK_K) <= CLUSTER_SUM_MAX_K_BLOCKS and num_sms >= min(CLUSTER_SUM_SPLITS) and \
        min(m, n) > 0 and n % 4 == 0


def get_bf16_cluster_sum_config(m: int, n: int, num_sms: int) -> GemmConfig:
    """The sum over batches in clusters: 64-wide N tiles (more clusters streaming), 128 rows unless m fits 64."""
    block_m = 64 if m <= 64 else 128
    tiles = ceil_div(m, block_m) * ceil_div(n, 64)
    splits = next((s for s in CLUSTER_SUM_SPLITS if tiles <= max_clusters(num_sms, s)), min(CLUSTER_SUM_SPLITS))
    return build_bf16_config(m, n, block_m, 64, num_sms, 4, cluster_k_splits=splits)


@functools.lru_cache(maxsize=4096)
def get_bf16_ksplit_config(m: int, n: int, num_sms: int, splits: int) -> GemmConfig:
    """Configuration of the K-split sum over batches (FP32 partial sums, one [m, n] per split): the einsum
    `bmk,bnk->mn` has small m and n (hundreds) and a long K walk, so its parallelism comes from the splits, which the
    caller sizes to fill the SMs with one wave of tiles. It is memory-bound: the tile is the one whose split streams
    the fewest rows of A and B into shared memory per K block (tiles x (BLOCK_M + BLOCK_N); a split's tiles share
    its blocks through L2), then the fewest tiles, with at least two stages.
    NOTES: H100, s = 4096, 256 x 256 x 256: 128 x 128 tiles (1024 rows per K block) streamed 2.4 TB/s, where one
    pass over the 512 distinct rows would need 3 TB/s from L2 twice over."""
    if min(m, n, num_sms, splits) <= 0:
        raise ValueError(f"m, n, num_sms and splits must be positive, got {m}, {n}, {num_sms}, {splits}")
    best_key, best = None, None
    for bm in BLOCK_MS:
        if bm > 64 and m <= 64:
            continue
        for bn in BLOCK_NS:
            if not legal_block(bm, bn, False) or max_stages(bm, bn, 4) < 2:
                continue
            tiles = ceil_div(m, bm) * ceil_div(n, bn)
            key = (tiles * (bm + bn), tiles, bm)
            if best_key is None or key < best_key:
                best_key, best = key, (bm, bn)
    return build_bf16_config(m, n, best[0], best[1], num_sms, 4, groups=splits)
