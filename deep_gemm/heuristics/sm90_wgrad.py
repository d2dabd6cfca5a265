"""Hopper (sm_90a) configuration for the FP8 weight-gradient GEMM (1x128 scales on both operands, FP32 D += A B^T),
dense and k-grouped: block shape, stages, multicast, grid and the per-launch group capacity."""
import functools
from typing import Tuple

from .common import GemmConfig, align, ceil_div, min_sms_for_waves, num_waves
from .sm90 import BLOCK_K, FP8_FLOPS_PER_CLK, SMEM_BUDGET, SMEM_BYTES_PER_CLK, num_math_threads

MAX_STAGES = 8
BLOCK_MS = (64, 128, 256)
# NOTES: wider tiles spill registers (ptxas: 32+ bytes from 224 on), see tests/jit/test_compile_wgrad.py. 136 and 152
# (= 8 mod 16) are the widest 128-row tiles whose column scales stay in registers (128x152 is DeepGEMM's pick).
BLOCK_NS = tuple(sorted(set(range(16, 209, 16)) | {136, 152}))
# Groups one launch carries: the per-group operands (two tensor maps and two integers each, 264 bytes) are kernel
# parameters, limited to 32764 bytes in all. Capacities are bucketed so that few kernels are compiled.
GROUP_CAPACITIES = (1, 8, 32, 96)
MAX_GROUPS_PER_LAUNCH = GROUP_CAPACITIES[-1]
# Modelled efficiency of a pipeline of this many stages (the 1D2D kernel on the H200: 2 -> 3 stages +23% at
# 256x128; for this kernel 3-stage 256x112 tiles were the fastest measured).
_STAGE_EFFICIENCY = {1: 0.5, 2: 0.75}
# Measured cost factors of the tile structures the model above does not see (H200, uniform WGMMA descriptors,
# benchmarks/NOTES.md issue 14): column scales read inside the promotion (not preloaded) put shared-memory latency on
# the path the other warpgroup's WGMMAs must cover (128x192 ran 2-11% behind 128x152); two 64-row sub-tiles per
# warpgroup serialise each warpgroup's two promotions (256x112 ran level with 128x152 where the model gives it 7%).
_NOT_PRELOADED_FACTOR = 1.12
_TWO_SUB_TILES_FACTOR = 1.07


def group_capacity(num_groups: int) -> int:
    """The smallest compiled group capacity that holds `num_groups` (at most MAX_GROUPS_PER_LAUNCH)."""
    return next(c for c in GROUP_CAPACITIES if c >= min(num_groups, MAX_GROUPS_PER_LAUNCH))


def swizzle_d_bytes(block_n: int) -> int:
    """Widest TMA swizzle that divides one FP32 row of the tile (BLOCK_N is a multiple of 8, so 32 always does)."""
    return next(s for s in (128, 64, 32) if (block_n * 4) % s == 0)


def wgrad_smem_size(block_m: int, block_n: int, num_stages: int) -> int:
    """Mirror of `fp8_wgrad_smem_size` in include/deep_gemm/sm90/fp8_wgrad_1d1d.cuh (the kernel asserts equality)."""
    d = align(num_math_threads(block_m) // 128 * 64 * block_n * 4, 1024)  # one 64-row FP32 tile per warpgroup
    # Scale vectors are padded to 128 bytes per stage (TMA destination alignment).
    stage = block_m * BLOCK_K + block_n * BLOCK_K + align(block_m * 4, 128) + align(block_n * 4, 128)
    return d + num_stages * stage + num_stages * 2 * 8


def max_stages(block_m: int, block_n: int) -> int:
    return next((s for s in range(MAX_STAGES, 0, -1) if wgrad_smem_size(block_m, block_n, s) <= SMEM_BUDGET), 0)


def preloads_column_scales(block_m: int, block_n: int) -> bool:
    """Mirror of the kernel's kPreloadSB: a K block's column scales are read once and kept in registers for all
    64-row sub-tiles of the warpgroup (else once per sub-tile)."""
    sub_tiles = block_m // (64 * (num_math_threads(block_m) // 128))
    accum = block_n // 2
    return (sub_tiles + 1) * accum + accum // 2 <= 200


def legal_block(block_m: int, block_n: int) -> bool:
    # 256-row tiles keep two final accumulators per thread: wider than 144 columns they spill (ptxas).
    return block_m < 256 or block_n <= 144


def kblock_cycles(block_m: int, block_n: int, stages: int) -> float:
    """Modelled SM cycles per 128-wide K block of one tile: the larger of tensor-core time, shared-memory traffic
    (TMA writes of A, B and scales, WGMMA reads, and the promotion's scale reads: every warp reads all BLOCK_N
    column scales, 8 per shared-memory wavefront) and the promotion (two FP32 operations per accumulator, on 128
    lanes per clock), divided by the pipeline's modelled efficiency."""
    mma = 2 * block_m * block_n * BLOCK_K / FP8_FLOPS_PER_CLK
    warps = num_math_threads(block_m) // 32
    reads = 1 if preloads_column_scales(block_m, block_n) else block_m // (64 * warps // 4)
    scale_wavefronts = warps * (block_n // 8) * reads
    smem = ((block_m + block_n) * BLOCK_K + (block_m // 64) * (64 + block_n) * BLOCK_K) / SMEM_BYTES_PER_CLK
    promotion = 2 * block_m * block_n / 128
    structure = 1.0 if preloads_column_scales(block_m, block_n) else _NOT_PRELOADED_FACTOR
    if block_m == 256:
        structure *= _TWO_SUB_TILES_FACTOR
    return max(mma, smem + scale_wavefronts, promotion) * structure / _STAGE_EFFICIENCY.get(stages, 1.0)


def _pick_blocks(m: int, n: int, groups: int, sms: int) -> Tuple[int, int]:
    """Least modelled time: waves (over the tiles of all groups) x per-tile cycles; ties go to fewer tiles."""
    best_key, best = None, None
    for bm in BLOCK_MS:
        if bm == 64 and m > 64 and ceil_div(m, 128) * 128 - m < 64:
            continue  # 128-row tiles waste under 64 rows: 64-row ones only add B re-reads
        for bn in BLOCK_NS:
            if not legal_block(bm, bn):
                continue
            stages = max_stages(bm, bn)
            if stages < 2:
                continue
            tiles = groups * ceil_div(m, bm) * ceil_div(n, bn)
            key = (num_waves(tiles, sms) * kblock_cycles(bm, bn, stages), tiles)
            if best_key is None or key < best_key:
                best_key, best = key, (bm, bn)
    return best


def build_wgrad_config(m: int, n: int, groups: int, block_m: int, block_n: int, num_sms: int,
                       num_multicast: int = 1, multicast_on_a: bool = True, num_stages: int = 0) -> GemmConfig:
    """The full configuration for chosen blocks (deepest pipeline that fits unless `num_stages` is given, smallest
    grid that keeps the number of waves). Also used by tools/ to time configurations the heuristic did not pick."""
    stages = num_stages or max_stages(block_m, block_n)
    if stages < 1 or wgrad_smem_size(block_m, block_n, stages) > SMEM_BUDGET:
        raise ValueError(f"block {block_m}x{block_n} with {stages} stages does not fit in shared memory")
    tiles = groups * ceil_div(m, block_m) * ceil_div(n, block_n)
    if num_multicast > 1:
        pairs = ceil_div(n, block_n) if multicast_on_a else ceil_div(m, block_m)
        if pairs % 2 != 0 or num_sms % 2 != 0:
            raise ValueError("multicast needs an even block count along the pair's fast dimension and an even grid")
    grid = min(num_sms // num_multicast * num_multicast,
               min_sms_for_waves(tiles, num_waves(tiles, num_sms), num_multicast))
    return GemmConfig(block_m=block_m, block_n=block_n, block_k=BLOCK_K, num_stages=stages,
                      num_multicast=num_multicast, multicast_on_a=multicast_on_a,
                      swizzle_d_bytes=swizzle_d_bytes(block_n), num_sms=grid,
                      smem_size=wgrad_smem_size(block_m, block_n, stages),
                      num_threads=num_math_threads(block_m) + 128)


@functools.lru_cache(maxsize=1024)
def get_wgrad_config(m: int, n: int, groups: int, num_sms: int) -> GemmConfig:
    """Configuration of a weight-gradient launch over `groups` groups of [m, n] outputs (m, n, groups > 0).

    K does not enter: every tile of a group runs the same K loop, so K scales all candidates alike (k-grouped
    launches with unequal K are modelled by their tile count)."""
    if min(m, n, groups, num_sms) <= 0:
        raise ValueError(f"m, n, groups and num_sms must be positive, got {m}, {n}, {groups}, {num_sms}")
    bm, bn = _pick_blocks(m, n, groups, num_sms)
    # NOTES: no TMA multicast: on the H200 it lost 1-2% (256x112 at 7168x4096x4096: 836 vs 848 TFLOPS; 128x144 at
    # 16384x7168x4096 with B multicast 820 vs 932 for 256x112 without). The kernel supports it (tools/sweep_wgrad.py).
    return build_wgrad_config(m, n, groups, bm, bn, num_sms)
