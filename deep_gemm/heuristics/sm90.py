"""Hopper (sm_90a) configuration for the FP8 1D2D GEMM: block shape, stages, multicast and grid size."""
import functools
import math
from typing import Optional, Tuple

from .common import (M_ALIGNMENT_CONTIGUOUS, FP8Out, GemmConfig, GemmProblem, KernelType, SwiGLU, a_rows_per_stage,
                     align, ceil_div, has_group_row_ends, walks_groups, last_wave_util, min_sms_for_waves, num_waves)

SMEM_BUDGET = 232448        # opt-in shared memory per block (H100/H200)
BLOCK_K = 128               # = the scale granularity along K
# NOTES: only narrow tiles reach this cap (128x128 fits 6 stages); at m <= 128 the kernel streams B with little
# work per stage, and 16 stages kept 64x4096x7168 at 13.5 us against 14.7 with 8 (H200, benchmarks/NOTES.md).
MAX_STAGES = 16
BLOCK_NS = tuple(range(16, 129, 8)) + (144, 160, 192)
MULTICAST_MIN_M = 512
# Shared-memory bytes per clock of one SM, and dense FP8 FLOPs per clock of one SM (Hopper).
SMEM_BYTES_PER_CLK = 128
FP8_FLOPS_PER_CLK = 8192


def num_math_threads(block_m: int) -> int:
    return 128 if block_m == 64 else 256


def may_straddle(block_n: int) -> bool:
    """A tile of this width can span two 128-wide RHS scale blocks."""
    return 128 % block_n != 0


def straddle_cases(block_n: int) -> int:
    """Distinct ways a tile can split across two 128-wide RHS scale blocks (1 = never straddles)."""
    return 128 // math.gcd(block_n, 128) if may_straddle(block_n) else 1


# Kernels with at most this many straddle cases pick the per-column RHS scale at compile time (the kernel's
# kMaxStaticStraddleCases); wider-case widths choose per column at run time, which cost 15-20% on the H200.
MAX_STATIC_STRADDLE_CASES = 4


def swizzle_d_bytes(block_n: int) -> int:
    row_bytes = block_n * 2
    for s in (128, 64, 32):
        if row_bytes % s == 0:
            return s
    return 0


def sm90_smem_size(k: int, block_m: int, block_n: int, num_stages: int, gather_scales: bool = False,
                   cluster_k_splits: int = 1, paired_scales: bool = False, a_box_rows: int = 0) -> int:
    """Mirror of `fp8_gemm_smem_size` in include/deep_gemm/sm90/fp8_gemm_1d2d.cuh (the kernel asserts equality);
    `gather_scales`: the kernel's kGatherScales (the batched GEMM); `cluster_k_splits` > 1: the D region holds the
    FP32 partial tile and two barriers; `paired_scales`: the SwiGLU GEMM, two RHS scale blocks per tile;
    `a_box_rows` (GemmConfig's): a stage's A slot holds that many rows, not block_m."""
    num_k_blocks = ceil_div(k, BLOCK_K)
    d = align(block_m * block_n * 4 + 16, 1024) if cluster_k_splits > 1 else align(block_m * block_n * 2, 1024)
    if paired_scales:  # SwiGLUFP8Epilogue: [block_m][64 B] e4m3, a float2 per quad and sub-tile, 2 barriers per WG
        wgs = num_math_threads(block_m) // 128
        d = align(block_m * 64 + block_m // (64 * wgs) * (wgs * 32) * 8 + 2 * wgs * 8, 1024)
    stage = (a_box_rows or block_m) * BLOCK_K + block_n * BLOCK_K + block_m * 4
    # RHS scales: per tile [math warpgroups][2 buffers][1 or 2 scale blocks][k blocks] fp32, or per stage [2] fp32
    sb = align(num_stages * 2 * 4, 8) if gather_scales else \
        align(num_math_threads(block_m) // 128 * 2 * num_k_blocks *
              (2 if may_straddle(block_n) or paired_scales else 1) * 4, 8)
    return d + num_stages * stage + sb + num_stages * 2 * 8


def _legal_block(block_m: int, block_n: int) -> bool:
    # Two 64-row sub-tiles per math warpgroup keep 2 x BLOCK_N / 2 final FP32 accumulators per thread.
    if block_m == 256 and block_n > 128:
        return False
    # A tile may touch at most two 128-wide RHS scale blocks (the kernel static-asserts the same).
    return block_n <= 128 + math.gcd(block_n, 128)


def kblock_cycles(block_m: int, block_n: int) -> float:
    """Modelled SM cycles per 128-wide K block of one tile: the larger of tensor-core time and shared-memory time.

    Shared memory carries the TMA writes of A and B plus the WGMMA reads (each 64-row sub-tile reads its A rows and
    all of B); at BLOCK_M = 128, BLOCK_N = 128 that traffic, not the tensor core, is the limit (measured with ncu).
    """
    mma = 2 * block_m * block_n * BLOCK_K / FP8_FLOPS_PER_CLK
    smem_bytes = (block_m + block_n) * BLOCK_K + (block_m // 64) * (64 + block_n) * BLOCK_K
    return max(mma, smem_bytes / SMEM_BYTES_PER_CLK)


def _better(cand: Tuple[int, int, int, int], best: Optional[Tuple[int, int, int, int]]) -> bool:
    """cand/best = (waves, last-wave util, block_m, block_n)."""
    if best is None:
        return True
    waves, util, bm, bn = cand
    b_waves, b_util, b_bm, b_bn = best
    if waves != b_waves:
        return waves < b_waves
    if util != b_util:
        return util > b_util
    # Same waves and same busy SMs: less padding wasted on a shared dimension, else wider N (fewer A re-reads).
    if bm == b_bm:
        return bn < b_bn
    if bn == b_bn:
        return bm < b_bm
    return bn > b_bn


def _multicast(problem: GemmProblem, block_m: int, block_n: int, num_sms: int) -> Tuple[int, bool]:
    # NOTES: on the H200 multicast only paid off on large problems (+1-3% at 4096x7168x16384 and 8192^3; -1 to
    # -3% at 4096x2112x7168 and 4096x7168x2048): it cuts L2 traffic, which is not the limit for smaller ones.
    # Grouped problems are judged by their total rows.
    total_m = problem.m * (problem.num_groups if has_group_row_ends(problem.kernel_type) else 1)
    legal_a = ceil_div(problem.n, block_n) % 2 == 0   # pairs share an M block: N blocks come in pairs
    # Pairs that share an N block (multicast of B): dense M blocks come in pairs. A contiguous pair whose two blocks
    # belong to two experts loads B per CTA (checked on the device), and an odd M block count gets a phantom block
    # (TileScheduler); masked pairs are formed on the device (below).
    legal_b = not has_group_row_ends(problem.kernel_type) and ceil_div(problem.m, block_m) % 2 == 0
    # NOTES: contiguous grouped GEMMs gain from B multicast at every bench size (H200, 128x192: +1.3% at n x k =
    # 4096 x 7168, +2.8-3.1% at 7168 x 2048, where A multicast or none lost), the dense GEMM does not at k < 4096.
    contiguous_b = problem.kernel_type == KernelType.M_GROUPED_CONTIGUOUS and block_m < block_n
    # Masked: the device pairs tiles of one group and N block and loads B per CTA for the others (TileScheduler), so
    # any group sizes are legal; DeepGEMM multicasts B there too (its choice at 128x192 and 64x192).
    masked_b = problem.kernel_type == KernelType.M_GROUPED_MASKED and block_m < block_n
    if total_m < MULTICAST_MIN_M or num_sms % 2 != 0:
        return 1, True
    if contiguous_b or masked_b:
        return 2, False
    if min(total_m, problem.n, problem.k) < 4096:
        return 1, True
    order = ((True, legal_a), (False, legal_b)) if block_m >= block_n else ((False, legal_b), (True, legal_a))
    for on_a, legal in order:
        if legal:
            return 2, on_a
    return 1, True


def _fewest_waves(candidates, tiles_of, sms: int) -> Tuple[int, int, int]:
    """(block_m, block_n, waves) of the candidate with the fewest waves, then the fullest last wave (`_better`);
    `tiles_of(bm, bn)` counts the tiles."""
    best = None
    for bm, bn in candidates:
        tiles = tiles_of(bm, bn)
        cand = (num_waves(tiles, sms), last_wave_util(tiles, sms), bm, bn)
        if _better(cand, best):
            best = cand
    return best[2], best[3], best[0]


def _block_ms(m: int, kind: KernelType) -> Tuple[int, ...]:
    if m <= 64:
        return (64,)
    if kind == KernelType.M_GROUPED_CONTIGUOUS:  # a tile must stay inside one expert's 128-row segment
        return tuple(bm for bm in (64, 128) if M_ALIGNMENT_CONTIGUOUS % bm == 0)
    return (64, 128, 256)


# NOTES: H100, FP8 with m-row A boxes, 16- beside 32-wide tiles: 1x2112x7168 11.9 vs 11.4 us, 1x4096x7168 20.0 vs
# 16.8, 32x7168x2048 10.9 vs 9.4, 16x24576x1536 25.0 vs 20.2 (benchmarks/NOTES.md): below 32 columns the per-K-block
# work of a tile, not the number of CTAs streaming, sets the time (66 CTAs still stream 2112x7168 faster than 132).
DECODE_MIN_BLOCK_N = 32
# Dense calls with m-row A boxes (a_rows_per_stage): A slots of those rows leave room for deeper pipelines, which a
# decode call's few CTAs need to keep enough weight bytes in flight. NOTES: H100, 1x2112x7168 at 64x32: 8 stages
# 12.1 us, 11 11.8, 16 11.4 (benchmarks/NOTES.md "Dense decode").
DECODE_MAX_STAGES = 32
# Dense decode with few weight columns: a CTA's time is a chain of ~DECODE_CHAIN_US per K block (wait, WGMMAs,
# promote), whatever its tile's width, so at m = 1, k = 7168 every n from 256 to 1536 took 10.0-10.4 us (H100,
# benchmarks/NOTES.md "Dense decode"). Cutting K over a cluster of S CTAs (ClusterSplitEpilogue) shortens the chain
# S-fold for a fixed ~DECODE_SPLIT_US, and pays where the clusters fit at once: at most DECODE_SPLIT_MAX_CTAS CTAs
# (1 x 2112 x 7168 on 132 CTAs in 2-CTA clusters ran 13.3 us against 11.4 unsplit). Measured per K block of a split
# CTA by tile width (DECODE_SPLIT_KBLOCK_US); m above DECODE_SPLIT_MAX_M was not measured. NOTES: H100, 1 x 576 x
# 7168 10.1 -> 8.0 us (64 x 32, 4 splits), 16 x 576 x 7168 10.3 -> 7.8, 1 x 256 x 7168 10.0 -> 6.5 (64 x 16, 4);
# m = 32 as modelled: 32 x 576 x 7168 9.0 -> 8.0 (64 x 32, 4; model 8.0), 32 x 256 9.0 -> 6.7 (64 x 16, 4; model 6.5).
DECODE_SPLIT_MAX_M = 32
DECODE_SPLIT_MAX_CTAS = 72
DECODE_FIXED_US = 2.2
DECODE_CHAIN_US = 0.14
DECODE_SPLIT_US = 2.5
DECODE_SPLIT_KBLOCK_US = {16: 0.13, 32: 0.236}
DECODE_SPLITS = (2, 4, 8)
# A split is taken only when modelled at least this much faster than the unsplit call.
DECODE_SPLIT_GAIN = 0.9


def decode_split(m: int, n: int, k: int, num_sms: int) -> Tuple[int, int]:
    """(block_n, cluster K splits) of a dense m x n x k call of at most DECODE_SPLIT_MAX_M rows (64-row tiles), or
    (0, 1) to leave it unsplit: the fastest by the chain model above among the widths of DECODE_SPLIT_KBLOCK_US and
    the split counts dividing the K blocks whose CTAs all fit at once."""
    if m > DECODE_SPLIT_MAX_M:
        return 0, 1
    k_blocks = ceil_div(k, BLOCK_K)
    best, best_us = (0, 1), (DECODE_FIXED_US + k_blocks * DECODE_CHAIN_US) * DECODE_SPLIT_GAIN
    for block_n, kblock_us in DECODE_SPLIT_KBLOCK_US.items():
        tiles = ceil_div(n, block_n)
        for splits in DECODE_SPLITS:
            if k_blocks % splits or tiles * splits > min(DECODE_SPLIT_MAX_CTAS, num_sms):
                continue
            us = DECODE_FIXED_US + DECODE_SPLIT_US + k_blocks // splits * kblock_us
            if us < best_us:
                best, best_us = (block_n, splits), us
    return best


# FP8 output (GemmProblem.fp8_out): the epilogue's scale groups, whole in every tile.
FP8_OUT_GROUP = 128


def _pick_blocks(m: int, n: int, k: int, sms: int, kind: KernelType = KernelType.NORMAL,
                 n_segment: int = 0, fp8_out: FP8Out = False) -> Tuple[int, int, int]:
    """(block_m, block_n, waves) for a dense or contiguous grouped GEMM of m rows (block_n dividing `n_segment`
    where it is set: GemmProblem.n_segment; a multiple of FP8_OUT_GROUP with `fp8_out`)."""
    # Dense calls with an m-row A box skip tiles narrower than DECODE_MIN_BLOCK_N while tiles of that width still
    # keep half the SMs streaming. NOTES: at m = 64 (no box) 64x16 stayed ahead: 64x2112x7168 11.3 vs 11.7 us.
    narrow_ok = kind != KernelType.NORMAL or a_rows_per_stage(m, 64) == 0 or \
        ceil_div(n, DECODE_MIN_BLOCK_N) < sms // 2
    candidates = [(bm, bn) for bm in _block_ms(m, kind) for bn in BLOCK_NS
                  if _legal_block(bm, bn) and (n_segment == 0 or n_segment % bn == 0)
                  and (bn >= DECODE_MIN_BLOCK_N or narrow_ok) and (not fp8_out or bn % FP8_OUT_GROUP == 0)]
    if m <= 128:
        # Memory-bound regime: spread the weights over as many SMs as possible (fewest waves, fullest last wave).
        bm, bn, waves = _fewest_waves(candidates, lambda bm_, bn_: ceil_div(m, bm_) * ceil_div(n, bn_), sms)
        # NOTES: with two 64-row blocks, one 128-row block per tile is faster where 64-wide tiles still cover most
        # SMs (H200: 128x7168x16384 40.0 us at 128x64 vs 48.2 at 64x112, 128x7168x2048 8.1 vs 8.9; no gain at
        # 128x4096x7168 and 100x4096x7168, a loss at 128x2112x7168).
        if bm == 64 and m > 64 and kind == KernelType.NORMAL and ceil_div(n, 64) >= 0.75 * sms and \
                n_segment % 64 == 0 and not fp8_out:
            bn = 64
            waves = num_waves(ceil_div(n, bn), sms)
            bm = 128
        return bm, bn, waves
    # Compute-bound regime: least modelled time = waves x per-tile cycles; ties go to fewer tiles. Widths whose
    # scale choice stays a run-time select are too slow here.
    best_key, best = None, None
    for bm, bn in candidates:
        if straddle_cases(bn) > MAX_STATIC_STRADDLE_CASES:
            continue
        tiles = ceil_div(m, bm) * ceil_div(n, bn)
        waves = num_waves(tiles, sms)
        key = (waves * kblock_cycles(bm, bn), tiles)
        if best_key is None or key < best_key:
            best_key, best = key, (bm, bn, waves)
    return best


# Masked grouped GEMMs only know expected_m, a typical masked_m; real counts vary per group and per step. The
# heuristic averages its cost over masked_m = expected_m * U(MASKED_SPREAD) instead of trusting one value.
# NOTES: measured on the H200 (benchmarks/NOTES.md, v13): with the point estimate, 1 x ~1100 rows x 4096 x 7168
# picked 256x128 (one wave at exactly 1024 rows, two at 1129: 87.5 us); the averaged cost picks 128x160 (57.8 us).
MASKED_SPREAD = (0.7, 1.3)
_MASKED_SAMPLES = 8


def _masked_samples(expected_m: int) -> Tuple[int, ...]:
    lo, hi = MASKED_SPREAD
    return tuple(max(1, round(expected_m * (lo + (hi - lo) * (i + 0.5) / _MASKED_SAMPLES)))
                 for i in range(_MASKED_SAMPLES))


def _pick_masked_blocks(m: int, n: int, k: int, sms: int, groups: int,
                        fp8_out: FP8Out = False) -> Tuple[int, int, int]:
    """(block_m, block_n, waves) for a masked GEMM with expected_m = m rows per group (block_n a multiple of
    FP8_OUT_GROUP with `fp8_out`)."""
    samples = _masked_samples(m)
    m_hi = max(samples)
    if m <= 128:
        # Memory-bound: one M block per group whenever a group fits one (a second block re-reads the expert's
        # weights: 32 x ~64 rows at 4096 x 7168 ran 259 us with 128-row blocks, 315 us with 64-row ones; 8 x ~128
        # rows: 84-91 us with 128-row blocks, 100-120 us with 64-row ones). BLOCK_N: least waves x bytes per tile
        # (A and B rows of a K block), ties to the narrower tile (deeper pipeline), among widths whose tiles never
        # straddle two RHS scale blocks.
        # NOTES: H200, 16 groups x 16-48 rows x 4096 x 7168: 64x128 (4 waves) 123.5-125.3 us, 64x192 (3 waves, the
        # old fewest-waves pick) 127.9-129.1 us, 64x64 127.6-129.1 us. Straddling widths lost everywhere they were
        # timed (H200, tools.tune, 2026-11-27f): 64x128 beat the 64x192 / 64x160 picks by 1-3% at 32-256 experts and
        # by 5-16% at 8 experts with skewed loads, where the active experts' tile count is unknown to the host
        # (8 x 1 rows x 7168 x 2048: 64x160 23.8 us, 64x128 20.0 us).
        bm = 64 if m_hi <= 64 else 128
        best_key, best = None, None
        for bn in BLOCK_NS:
            if not _legal_block(bm, bn) or straddle_cases(bn) != 1 or (fp8_out and bn % FP8_OUT_GROUP):
                continue
            waves = num_waves(groups * ceil_div(n, bn), sms)
            key = (waves * (bm + bn), bn)
            if best_key is None or key < best_key:
                best_key, best = key, (bm, bn, waves)
        return best
    # Compute-bound: the dense model (waves x per-K-block cycles), averaged over the spread of masked_m: one
    # group takes each sampled count while the other groups sit at their mean block count (their sum
    # concentrates), so a single group sees the whole spread and many groups see little of it.
    # NOTES: no 64-row tiles here: the groups' real counts may be far from expected_m, and every extra M block
    # re-reads the expert's weights. H200, 64 experts, expected_m 149, skewed loads (a fifth empty, a tenth at 4x):
    # 128x192 592/374 us against 891/473 us for the 64x192 this model picked with them (n x k = 4096 x 7168 /
    # 7168 x 2048).
    best_key, best = None, None
    for bm in (128, 256):
        blocks = [ceil_div(s, bm) for s in samples]
        others = (groups - 1) * sum(blocks) / len(blocks)
        for bn in BLOCK_NS:
            if not _legal_block(bm, bn) or straddle_cases(bn) > MAX_STATIC_STRADDLE_CASES or \
                    (fp8_out and bn % FP8_OUT_GROUP):
                continue
            waves = [num_waves(math.ceil((b + others) * ceil_div(n, bn)), sms) for b in blocks]
            key = (sum(waves) * kblock_cycles(bm, bn), groups * ceil_div(m, bm) * ceil_div(n, bn))
            if best_key is None or key < best_key:
                best_key, best = key, (bm, bn, max(waves))
    return best


def _pick_batched_blocks(m: int, n: int, k: int, sms: int, batches: int) -> Tuple[int, int, int]:
    """(block_m, block_n, waves) for a batched GEMM (BMM) of `batches` x [m, n, k]: every batch has the same tiles,
    so the tile count is exact."""
    def tiles_of(bm: int, bn: int) -> int:
        return batches * ceil_div(m, bm) * ceil_div(n, bn)

    if m <= 128:
        # Memory-bound (MLA decode: the weights, B x n x k, are nearly all the traffic): least waves x bytes per tile
        # (A rows loaded and B rows of a K block), ties to the narrower tile, as the masked decode choice.
        # NOTES: with a single K block (k <= 128) a 64x256 tile needs no second accumulator set and compiles without
        # spills (64x256 at k = 512 spills), and halves the tiles (each with its own epilogue) at n = 512.
        bm = 64 if m <= 64 else 128
        a_rows = min(bm, align(m, 8))
        best_key, best = None, None
        for bn in BLOCK_NS + ((256,) if k <= BLOCK_K and bm == 64 else ()):
            if not _legal_block(bm, bn) or straddle_cases(bn) > MAX_STATIC_STRADDLE_CASES:
                continue
            waves = num_waves(tiles_of(bm, bn), sms)
            key = (waves * (a_rows + bn), bn)
            if best_key is None or key < best_key:
                best_key, best = key, (bm, bn, waves)
        return best
    # Compute-bound: the dense model over all batches' tiles.
    # NOTES: with few K blocks a CTA that owns a single large tile cannot overlap its loads with its epilogue's
    # stores (nothing comes after it), so a one-wave grid of tiles of >= 128x128 is charged a second wave. H200:
    # 16 x 2048x128x512 ran 12.1 us at 256x128 (128 tiles) and 10.7 at 128x128 (256 tiles); 16 x 512x512x128 6.0
    # vs 5.6 us; but 16 x 512x128x512 5.2 us at 64x128 (128 tiles) and 5.4 at 64x64 (small tiles: no penalty).
    single_tile_penalty = ceil_div(k, BLOCK_K) <= 4
    best_key, best = None, None
    for bm in _block_ms(m, KernelType.BATCHED):
        for bn in BLOCK_NS:
            if not _legal_block(bm, bn) or straddle_cases(bn) > MAX_STATIC_STRADDLE_CASES:
                continue
            tiles = tiles_of(bm, bn)
            waves = num_waves(tiles, sms)
            if single_tile_penalty and tiles <= sms and bm * bn >= 128 * 128:
                waves += 1
            key = (waves * kblock_cycles(bm, bn), tiles)
            if best_key is None or key < best_key:
                best_key, best = key, (bm, bn, waves)
    return best


def batched_a_box_rows(m: int, block_m: int) -> int:
    """A batched GEMM's A rows per stage (GemmConfig.a_box_rows): every batch's m rows rounded up to 8 (the 128-byte
    swizzle's row group) when they fit one M block. NOTES: at m = 1 a 64-row box moved 8x the A bytes the tile
    uses; one M block also spares the tile walk its run-time divisions (TileScheduler kOneMBlock)."""
    rows = align(m, 8)
    return rows if rows <= block_m else 0


def build_sm90_config(m: int, n: int, k: int, block_m: int, block_n: int, num_sms: int, num_multicast: int = 1,
                      multicast_on_a: bool = True, max_stages: int = MAX_STAGES,
                      full_grid: bool = False, num_groups: int = 1, a_box_rows: int = 0,
                      gather_scales: bool = False, cluster_k_splits: int = 1,
                      paired_scales: bool = False) -> GemmConfig:
    """The full configuration for chosen blocks and multicast: deepest pipeline that fits, smallest grid that keeps
    the number of waves (or every SM with `full_grid`, for masked launches whose tile count only the device
    knows). `num_groups`: batches of a batched GEMM, whose tiles repeat per batch; `a_box_rows`: see GemmConfig;
    `gather_scales`: the kernel gathers its scales per stage (the batched GEMM); `cluster_k_splits` CTAs of a
    cluster per dense tile, each K blocks / splits of them (a divisor; see decode_split). Also used by tools/ to
    time configurations the heuristic did not pick. `paired_scales`: the SwiGLU GEMM (sm90_smem_size)."""
    if a_box_rows and num_multicast > 1 and not gather_scales:
        raise ValueError("a dense GEMM loads fewer A rows per stage only without multicast")
    splits = cluster_k_splits
    if splits > 1 and (num_multicast > 1 or num_groups > 1 or gather_scales or full_grid or num_sms < splits or
                       ceil_div(k, BLOCK_K) % splits):
        raise ValueError(f"cluster K splits ({splits}) are for dense GEMMs without multicast whose "
                         f"{ceil_div(k, BLOCK_K)} K blocks they divide")
    stages = next((s for s in range(max_stages, 0, -1)
                   if sm90_smem_size(k, block_m, block_n, s, gather_scales, splits, paired_scales, a_box_rows)
                   <= SMEM_BUDGET), 0)
    if stages == 0:
        raise ValueError(f"k={k} is too large: the RHS scales of one N block do not fit in shared memory")
    m_blocks = ceil_div(m, block_m)
    if num_multicast == 2 and not multicast_on_a:  # B multicast pairs M blocks: an odd count runs a phantom block
        m_blocks += m_blocks % 2
    tiles = num_groups * m_blocks * ceil_div(n, block_n)
    waves = num_waves(tiles, num_sms)
    grid = num_sms // num_multicast * num_multicast if full_grid else \
        min(num_sms, min_sms_for_waves(tiles, waves, num_multicast))
    if splits > 1:  # clusters of `splits` CTAs, each cluster one tile at a time
        clusters = num_sms // splits
        grid = min(clusters, min_sms_for_waves(tiles, num_waves(tiles, clusters), 1)) * splits
    if grid % num_multicast != 0:  # cannot happen with an even SM count, kept as a guard
        if paired_scales:
            raise ValueError(f"the SwiGLU GEMM needs clusters of two CTAs: {num_sms} SMs give an odd grid")
        num_multicast, multicast_on_a, grid = 1, True, min(num_sms, min_sms_for_waves(tiles, waves, 1))
    return GemmConfig(block_m=block_m, block_n=block_n, block_k=BLOCK_K, num_stages=stages,
                      num_multicast=num_multicast, multicast_on_a=multicast_on_a,
                      swizzle_d_bytes=swizzle_d_bytes(block_n), num_sms=grid,
                      smem_size=sm90_smem_size(k, block_m, block_n, stages, gather_scales, splits, paired_scales,
                                               a_box_rows),
                      num_threads=num_math_threads(block_m) + 128, a_box_rows=a_box_rows, cluster_k_splits=splits)


def _swiglu_config(m: int, n: int, k: int, sms: int, kind: KernelType) -> GemmConfig:
    """The SwiGLU GEMM's configuration: 128-wide tiles (64 gate and 64 up columns) in clusters of two CTAs
    multicasting A, whose N blocks 2p and 2p + 1 are the two halves of output scale group p (SwiGLUFP8Epilogue
    exchanges their rows' amax); 64-row tiles for at most 64 rows (per group, masked), else 128."""
    bm = 64 if m <= 64 else 128
    return build_sm90_config(m, n, k, bm, 128, sms, 2, True, full_grid=walks_groups(kind), paired_scales=True)


def _heuristic(m: int, n: int, k: int, sms: int, kind: KernelType = KernelType.NORMAL,
               groups: int = 1, n_segment: int = 0, fp8_out: FP8Out = False) -> GemmConfig:
    if isinstance(fp8_out, SwiGLU):
        return _swiglu_config(m, n, k, sms, kind)
    masked = walks_groups(kind)
    if kind == KernelType.BATCHED:
        bm, bn, _ = _pick_batched_blocks(m, n, k, sms, groups)
    elif masked:
        bm, bn, _ = _pick_masked_blocks(m, n, k, sms, groups, fp8_out)
    else:
        bm, bn, _ = _pick_blocks(m, n, k, sms, kind, n_segment, fp8_out)
    num_multicast, on_a = _multicast(GemmProblem(m, n, k, sms, kernel_type=kind, num_groups=groups), bm, bn, sms)
    if kind == KernelType.NORMAL and num_multicast == 1:
        # A dense call of fewer rows than the tile loads only its rows (rounded up: a_rows_per_stage). NOTES: H100,
        # 1x2112x7168 at 64x16: 17.1 us with 64-row A boxes, 11.9 with 8-row ones; 1x4096x7168 at 64x32 20.1 -> 16.8.
        # Few weight columns: K cut over a cluster (decode_split; not with head splits or an FP8 d, whose epilogues
        # the split's does not replace).
        split_bn, splits = decode_split(m, n, k, sms) if n_segment == 0 and not fp8_out and bm == 64 else (0, 1)
        a_rows = a_rows_per_stage(m, bm)
        return build_sm90_config(m, n, k, bm, split_bn if splits > 1 else bn, sms,
                                 max_stages=DECODE_MAX_STAGES if a_rows else MAX_STAGES, a_box_rows=a_rows,
                                 cluster_k_splits=splits)
    if kind != KernelType.BATCHED:
        return build_sm90_config(m, n, k, bm, bn, sms, num_multicast, on_a, full_grid=masked)
    return build_sm90_config(m, n, k, bm, bn, sms, num_multicast, on_a, num_groups=groups,
                             a_box_rows=batched_a_box_rows(m, bm), gather_scales=True)


# Kernels are compiled per (n, k, template arguments); m and the grid size are run-time values. The variants of
# one (n, k) are enumerated exactly up to this m; above it the choice is restricted to them (see get_sm90_config),
# so a new m never needs a kernel outside the set.
VARIANT_M_CAP = 1 << 16


def kernel_key(config: GemmConfig) -> Tuple:
    """What makes two configs the same compiled kernel (everything but the grid size)."""
    return (config.block_m, config.block_n, config.num_stages, config.num_multicast,
            config.multicast_on_a if config.num_multicast > 1 else True, config.swizzle_d_bytes, config.smem_size,
            config.a_box_rows, config.cluster_k_splits)


@functools.lru_cache(maxsize=1024)
def sm90_kernel_variants(n: int, k: int, num_sms: int,
                         kind: KernelType = KernelType.NORMAL) -> Tuple[GemmConfig, ...]:
    """One config per distinct kernel the heuristic picks for (n, k) at any m, in order of first use (dense and
    contiguous grouped GEMMs; a masked GEMM's kernel depends on expected_m and the group count instead).

    NOTES: the choice depends on m only through ceil(m / 64) (every BLOCK_M is a multiple of 64) and the two
    multicast thresholds (m >= 512 and m >= 4096, multiples of 64), so m = 64q for every q, plus the first m of
    the two blocks that straddle a threshold, covers every m <= VARIANT_M_CAP; below 64 rows the A box adds
    m = 8, 16 and 32 (a_rows_per_stage).
    """
    seen = {}
    for m in variant_row_counts():
        config = _heuristic(m, n, k, num_sms, kind)
        seen.setdefault(kernel_key(config), config)
    return tuple(seen.values())


def variant_row_counts() -> Tuple[int, ...]:
    """Row counts that reach every choice the dense heuristic makes for m <= VARIANT_M_CAP (sm90_kernel_variants):
    the m-row A boxes of calls below one 64-row block (a_rows_per_stage: 8, 16, 32), then every 64 rows."""
    return (8, 16, 32) + tuple(m for q in range(1, VARIANT_M_CAP // 64 + 1)
                               for m in ((64 * q - 63, 64 * q) if 64 * q in (MULTICAST_MIN_M, 4096) else (64 * q,)))


@functools.lru_cache(maxsize=4096)
def get_sm90_config(problem: GemmProblem) -> GemmConfig:
    m, n, k, sms, kind = problem.m, problem.n, problem.k, problem.num_sms, problem.kernel_type
    config = _heuristic(m, n, k, sms, kind, problem.num_groups, problem.n_segment, problem.fp8_out)
    if m <= VARIANT_M_CAP or has_group_row_ends(kind) or problem.n_segment or problem.fp8_out:
        return config
    variants = sm90_kernel_variants(n, k, sms, kind)
    if kernel_key(config) in {kernel_key(v) for v in variants}:
        return config
    # Beyond the enumerated range: the variant with the least modelled time at this m (legal multicast only).
    best_key, best = None, None
    for v in variants:
        if v.num_multicast > 1:
            pairs = ceil_div(n, v.block_n) if v.multicast_on_a else ceil_div(m, v.block_m)
            if pairs % 2 != 0 and not (kind == KernelType.M_GROUPED_CONTIGUOUS and not v.multicast_on_a):
                continue
        cand = build_sm90_config(m, n, k, v.block_m, v.block_n, sms, v.num_multicast, v.multicast_on_a)
        if kernel_key(cand) != kernel_key(v):
            continue
        tiles = ceil_div(m, v.block_m) * ceil_div(n, v.block_n)
        key = (num_waves(tiles, sms) * kblock_cycles(v.block_m, v.block_n), tiles)
        if best_key is None or key < best_key:
            best_key, best = key, cand
    return best if best is not None else config
