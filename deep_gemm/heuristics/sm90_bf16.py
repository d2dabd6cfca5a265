"""Hopper (sm_90a) configuration for the BF16 GEMM (include/deep_gemm/sm90/bf16_gemm.cuh): block shape, stages,
output swizzle and grid, for either operand layout and a BF16 or FP32 D."""
import functools
from typing import Tuple

from .common import GemmConfig, KernelType, ceil_div, min_sms_for_waves, num_waves
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
COMPUTE_BLOCK_NS = (64, 128, 192, 256)
# Modelled efficiency of a pipeline this shallow (the K loop waits for each K block before the next is issued).
_STAGE_EFFICIENCY = {1: 0.4, 2: 0.7, 3: 0.9}


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


def bf16_smem_size(block_m: int, block_n: int, num_stages: int, out_bytes: int) -> int:
    """Mirror of `bf16_gemm_smem_size` in include/deep_gemm/sm90/bf16_gemm.cuh (the kernel asserts equality)."""
    d = num_math_threads(block_m) // 128 * 64 * block_n * out_bytes  # one 64-row D tile per math warpgroup
    return d + num_stages * (block_m + block_n) * 128 + num_stages * 2 * 8


def max_stages(block_m: int, block_n: int, out_bytes: int) -> int:
    return next((s for s in range(MAX_STAGES, 0, -1)
                 if bf16_smem_size(block_m, block_n, s, out_bytes) <= SMEM_BUDGET), 0)


def kblock_cycles(block_m: int, block_n: int, stages: int) -> float:
    """Modelled SM cycles per 64-wide K block of one tile: tensor-core time or shared-memory traffic (TMA writes of
    A and B, WGMMA reads of each 64-row sub-tile's A rows and all of B), whichever is larger, over the modelled
    efficiency of the pipeline's depth."""
    mma = 2 * block_m * block_n * BLOCK_K / BF16_FLOPS_PER_CLK
    smem = ((block_m + block_n) * 128 + (block_m // 64) * (64 + block_n) * 128) / SMEM_BYTES_PER_CLK
    return max(mma, smem) / _STAGE_EFFICIENCY.get(stages, 1.0)


def _pick_blocks(m: int, n: int, sms: int, mn_major_b: bool, out_bytes: int, groups: int,
                 max_block_m: int) -> Tuple[int, int]:
    candidates = []
    for bm in BLOCK_MS:
        # NOTES: past m = 128 (compute-bound) no 64-row tiles: one math warpgroup does not keep the tensor cores
        # busy, which the cycle model does not see (H100, masked 32 groups x ~192 rows, n = 6144, k = 7168: 64 x 256
        # tiles ran 191 TFLOPS where DeepGEMM ran 516).
        if (bm > 64 and m <= 64) or bm > max_block_m or (bm == 64 and m > 128):
            continue
        for bn in (BLOCK_NS if m <= 128 else COMPUTE_BLOCK_NS):
            if legal_block(bm, bn, mn_major_b) and max_stages(bm, bn, out_bytes) >= 2:
                candidates.append((bm, bn))
    best_key, best = None, None
    for bm, bn in candidates:
        tiles = groups * ceil_div(m, bm) * ceil_div(n, bn)
        waves = num_waves(tiles, sms)
        if m <= 128:
            # Memory-bound: spread the weights over as many SMs as possible (fewest waves, then fullest last wave,
            # then fewer A re-reads: wider N).
            key = (waves, -(tiles - (waves - 1) * sms), -bn)
        else:
            key = (waves * kblock_cycles(bm, bn, max_stages(bm, bn, out_bytes)), tiles)
        if best_key is None or key < best_key:
            best_key, best = key, (bm, bn)
    return best


def build_bf16_config(m: int, n: int, block_m: int, block_n: int, num_sms: int, out_bytes: int,
                      num_stages: int = 0, groups: int = 1) -> GemmConfig:
    """The full configuration for chosen blocks (deepest pipeline that fits unless `num_stages` is given, smallest
    grid that keeps the number of waves; `groups` groups of m rows each)."""
    stages = num_stages or max_stages(block_m, block_n, out_bytes)
    if stages < 1 or bf16_smem_size(block_m, block_n, stages, out_bytes) > SMEM_BUDGET:
        raise ValueError(f"block {block_m}x{block_n} with {stages} stages does not fit in shared memory")
    tiles = groups * ceil_div(m, block_m) * ceil_div(n, block_n)
    grid = min(num_sms, min_sms_for_waves(tiles, num_waves(tiles, num_sms), 1))
    return GemmConfig(block_m=block_m, block_n=block_n, block_k=BLOCK_K, num_stages=stages, num_multicast=1,
                      multicast_on_a=True, swizzle_d_bytes=swizzle_d_bytes(block_n, out_bytes), num_sms=grid,
                      smem_size=bf16_smem_size(block_m, block_n, stages, out_bytes),
                      num_threads=num_math_threads(block_m) + 128)


@functools.lru_cache(maxsize=4096)
def get_bf16_config(m: int, n: int, num_sms: int, mn_major_b: bool, out_bytes: int,
                    kind: KernelType = KernelType.NORMAL, groups: int = 1) -> GemmConfig:
    """Configuration of a BF16 GEMM with m x n outputs of `out_bytes` (2: BF16, 4: FP32) each (m, n > 0). K does not
    enter: every tile runs the same K loop. Grouped kinds: contiguous counts m as all rows (a tile stays inside one
    128-row segment: BLOCK_M <= 128); masked and psum take m as the expected rows of each of `groups` groups, whose
    last blocks are partial (BLOCK_M <= 128 wastes less of them); batched takes m as the rows of each of `groups`
    heads."""
    if min(m, n, num_sms, groups) <= 0 or out_bytes not in (2, 4):
        raise ValueError(f"m, n, num_sms and groups must be positive and out_bytes 2 or 4, got {m}, {n}, {num_sms}, "
                         f"{groups}, {out_bytes}")
    per_group = kind in (KernelType.M_GROUPED_MASKED, KernelType.M_GROUPED_PSUM, KernelType.BATCHED)
    tile_groups = groups if per_group else 1
    max_block_m = 256 if kind in (KernelType.NORMAL, KernelType.BATCHED) else 128
    bm, bn = _pick_blocks(m, n, num_sms, mn_major_b, out_bytes, tile_groups, max_block_m)
    return build_bf16_config(m, n, bm, bn, num_sms, out_bytes, groups=tile_groups)


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
