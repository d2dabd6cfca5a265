"""Blackwell (sm_100a, B200: 148 SMs, 227 KiB shared memory per block, 512 tensor-memory columns) configuration for
the FP8 1D2D GEMM family of include/deep_gemm/sm100/fp8_gemm_1d2d.cuh: block shape, pipeline stages, 2-CTA mode,
scale path, grid size.

The budgets below mirror the kernel's own (`fp8_gemm_smem_size`, `fp8_gemm_tmem_cols`); the kernel static-asserts
that the host's numbers match, and `Sm100Config` asserts the budgets on the host."""
import functools
from dataclasses import dataclass
from typing import Optional, Tuple

from .common import GemmProblem, KernelType, align, ceil_div, min_sms_for_waves, num_waves, walks_groups

ARCHS = ("sm_100a", "sm_100f")
SMEM_BUDGET = 232448        # opt-in shared memory per block (B200)
TMEM_COLS = 512             # tensor-memory columns per SM
NUM_SMS_B200 = 148
BLOCK_K = 128               # = the scale granularity along K
CTA_ROWS = 128              # rows of A / D per CTA (M of a cta_group::1 MMA, half of a cta_group::2 one)
NUM_THREADS = 384           # TMA warp, MMA warp, 2 idle warps, 2 epilogue warpgroups
MAX_STAGES = 16
# Path (a) keeps BLOCK_N / 2 FP32 final accumulators per epilogue thread; at 384 threads ptxas caps a thread at 168
# registers: BLOCK_N = 256 spilled (32 bytes spill stores, NVRTC 13.0), 240 sat at exactly 168, 224 used 160.
MAX_BLOCK_N_FP32 = 224
BLOCK_NS = tuple(range(16, 257, 16))
MULTICAST_MIN_M = 512
# Per SM and clock (B200): dense FP8 tensor-core FLOPs and shared-memory bytes.
FP8_FLOPS_PER_CLK = 16384
SMEM_BYTES_PER_CLK = 128

SCALES_FP32 = "fp32"     # path (a): exact FP32 scales, promotion per 128-wide K block (the Hopper numerics)
SCALES_UE8M0 = "ue8m0"   # path (b): power-of-two scales applied by the block-scaled MMA
SCALE_PATHS = (SCALES_FP32, SCALES_UE8M0)


def check_scales(scales: str) -> str:
    if scales not in SCALE_PATHS:
        raise ValueError(f"scales must be one of {SCALE_PATHS}, got {scales!r}")
    return scales


def sm100_smem_size(block_m: int, block_n: int, num_stages: int, ue8m0: bool) -> int:
    """Mirror of `fp8_gemm_smem_size` in include/deep_gemm/sm100/fp8_gemm_1d2d.cuh (the kernel asserts equality)."""
    load_n = block_n // 2 if block_m == 2 * CTA_ROWS else block_n
    sf = (CTA_ROWS + align(block_n, 128)) * 4 if ue8m0 else 0
    return num_stages * (CTA_ROWS * BLOCK_K + load_n * BLOCK_K + sf) + (2 * num_stages + 4) * 8 + 8


def sm100_tmem_cols(block_n: int, ue8m0: bool) -> int:
    """Mirror of `fp8_gemm_tmem_cols`: two accumulator buffers, plus the UE8M0 scale factors of path (b)."""
    return 2 * block_n + ((CTA_ROWS // 32 + align(block_n, 128) // 32) if ue8m0 else 0)


def tmem_alloc_cols(used: int) -> int:
    """Columns tcgen05.alloc takes for `used`: a power of two in [32, 512]."""
    for cols in (32, 64, 128, 256, 512):
        if used <= cols:
            return cols
    raise ValueError(f"{used} tensor-memory columns exceed the {TMEM_COLS} of an SM")


@dataclass(frozen=True)
class Sm100Config:
    """One sm100 kernel instantiation plus its launch shape. block_m: 128 (one CTA per tile) or 256 (a CTA pair per
    tile, cta_group::2); num_multicast: the cluster size (2 for a pair, or two CTAs sharing A / B by TMA multicast)."""
    block_m: int
    block_n: int
    num_stages: int
    num_multicast: int
    multicast_on_a: bool
    scales: str
    num_sms: int            # persistent grid size
    smem_size: int
    tmem_cols: int          # allocated tensor-memory columns
    block_k: int = BLOCK_K
    num_threads: int = NUM_THREADS

    def __post_init__(self):
        check_scales(self.scales)
        if self.block_m not in (CTA_ROWS, 2 * CTA_ROWS):
            raise ValueError(f"block_m must be 128 or 256, got {self.block_m}")
        if self.block_n % 16 or not 16 <= self.block_n <= 256:
            raise ValueError(f"block_n must be a multiple of 16 in [16, 256], got {self.block_n}")
        if self.pair and (self.num_multicast != 2 or self.ue8m0):
            raise ValueError("256-row tiles run on a 2-CTA cluster, FP32-scale path only")
        if self.num_sms % self.num_multicast != 0:
            raise ValueError("the grid must be a multiple of the cluster size")
        if self.smem_size != sm100_smem_size(self.block_m, self.block_n, self.num_stages, self.ue8m0) \
                or self.smem_size > SMEM_BUDGET:
            raise ValueError(f"shared memory {self.smem_size} B is not this layout's or exceeds {SMEM_BUDGET} B")
        used = sm100_tmem_cols(self.block_n, self.ue8m0)
        if used > TMEM_COLS or self.tmem_cols != tmem_alloc_cols(used):
            raise ValueError(f"tensor memory: {used} columns used, {self.tmem_cols} allocated (at most {TMEM_COLS})")
        if not self.ue8m0 and self.block_n > MAX_BLOCK_N_FP32:
            raise ValueError(f"the FP32-scale path keeps block_n / 2 accumulators per thread: block_n <= "
                             f"{MAX_BLOCK_N_FP32}, got {self.block_n}")

    @property
    def pair(self) -> bool:
        return self.block_m == 2 * CTA_ROWS

    @property
    def ue8m0(self) -> bool:
        return self.scales == SCALES_UE8M0


def legal_block(kind: KernelType, block_m: int, block_n: int, scales: str) -> bool:
    ue8m0 = scales == SCALES_UE8M0
    if sm100_tmem_cols(block_n, ue8m0) > TMEM_COLS or (not ue8m0 and block_n > MAX_BLOCK_N_FP32):
        return False
    if block_m == 2 * CTA_ROWS:
        # A 256-row tile would span two 128-row expert segments; the UE8M0 path runs one CTA per tile.
        return kind != KernelType.M_GROUPED_CONTIGUOUS and not ue8m0
    return True


def kblock_cycles(block_m: int, block_n: int) -> float:
    """Modelled cycles of one SM per 128-wide K block of a tile: tensor core vs shared memory (TMA writes plus MMA
    reads of this CTA's A rows and B rows). A pair's tile keeps two SMs busy for that long."""
    load_n = block_n // 2 if block_m == 2 * CTA_ROWS else block_n
    mma = 2 * CTA_ROWS * block_n * BLOCK_K / FP8_FLOPS_PER_CLK
    smem = 2 * (CTA_ROWS + load_n) * BLOCK_K / SMEM_BYTES_PER_CLK
    return max(mma, smem)


def _stages(block_m: int, block_n: int, ue8m0: bool, max_stages: int = MAX_STAGES) -> int:
    return next((s for s in range(max_stages, 0, -1) if sm100_smem_size(block_m, block_n, s, ue8m0) <= SMEM_BUDGET),
                0)


def build_sm100_config(m: int, n: int, block_m: int, block_n: int, num_sms: int, scales: str = SCALES_FP32,
                       num_multicast: int = 1, multicast_on_a: bool = True, full_grid: bool = False,
                       max_stages: int = MAX_STAGES) -> Sm100Config:
    """The full configuration for chosen blocks: deepest pipeline that fits, smallest grid (a multiple of the cluster)
    that keeps the number of waves, or every SM with `full_grid` (masked launches, whose tile count only the device
    knows)."""
    ue8m0 = check_scales(scales) == SCALES_UE8M0
    pair = block_m == 2 * CTA_ROWS
    if pair:
        num_multicast = 2
    stages = _stages(block_m, block_n, ue8m0, max_stages)
    tiles = ceil_div(m, block_m) * ceil_div(n, block_n) * (2 if pair else 1)  # CTAs' tiles
    sms = num_sms // num_multicast * num_multicast
    if sms == 0:
        raise ValueError(f"a cluster of {num_multicast} CTAs needs at least {num_multicast} SMs, got {num_sms}")
    grid = sms if full_grid else min(sms, min_sms_for_waves(tiles, num_waves(tiles, sms), num_multicast))
    return Sm100Config(block_m=block_m, block_n=block_n, num_stages=stages, num_multicast=num_multicast,
                       multicast_on_a=multicast_on_a if num_multicast > 1 and not pair else True, scales=scales,
                       num_sms=grid, smem_size=sm100_smem_size(block_m, block_n, stages, ue8m0),
                       tmem_cols=tmem_alloc_cols(sm100_tmem_cols(block_n, ue8m0)))


def _multicast(kind: KernelType, m: int, n: int, total_m: int, block_m: int, block_n: int,
               num_sms: int) -> Tuple[int, bool]:
    """TMA multicast inside a 2-CTA cluster for one-CTA tiles: A (pairs share an M block; N blocks come in pairs) or
    B (dense only; M blocks come in pairs), on large problems only (it saves L2 traffic, which smaller ones do not
    lack)."""
    if block_m != CTA_ROWS or total_m < MULTICAST_MIN_M or num_sms % 2 != 0 or min(total_m, n) < 4096:
        return 1, True
    if ceil_div(n, block_n) % 2 == 0:
        return 2, True
    if kind == KernelType.NORMAL and ceil_div(m, block_m) % 2 == 0:
        return 2, False
    return 1, True


def _masked_samples(expected_m: int) -> Tuple[int, ...]:
    # Real per-group counts vary around expected_m (as in the sm90 heuristic): average the cost over a spread.
    return tuple(max(1, round(expected_m * (0.7 + 0.6 * (i + 0.5) / 8))) for i in range(8))


def _heuristic(m: int, n: int, k: int, num_sms: int, kind: KernelType, groups: int, scales: str) -> Sm100Config:
    del k  # the stage count depends on the blocks only; K is compile-time in the kernel, not a cost factor here
    masked = walks_groups(kind)
    best_key, best = None, None
    for bm in (CTA_ROWS, 2 * CTA_ROWS):
        if bm == 2 * CTA_ROWS and (m <= CTA_ROWS or num_sms < 2):
            continue
        for bn in BLOCK_NS:
            if not legal_block(kind, bm, bn, scales):
                continue
            per_tile = 2 if bm == 2 * CTA_ROWS else 1  # SMs per tile
            if masked:
                blocks = [ceil_div(s, bm) for s in _masked_samples(m)]
                waves = sum(num_waves(groups * b * ceil_div(n, bn) * per_tile, num_sms) for b in blocks) / len(blocks)
                tiles = groups * ceil_div(m, bm) * ceil_div(n, bn)
            else:
                tiles = ceil_div(m, bm) * ceil_div(n, bn)
                waves = num_waves(tiles * per_tile, num_sms)
            key = (waves * kblock_cycles(bm, bn), tiles * per_tile, -bn)
            if best_key is None or key < best_key:
                best_key, best = key, (bm, bn)
    bm, bn = best
    total_m = m * (groups if masked else 1)
    num_multicast, on_a = _multicast(kind, m, n, total_m, bm, bn, num_sms)
    return build_sm100_config(m, n, bm, bn, num_sms, scales, num_multicast, on_a, full_grid=masked)


@functools.lru_cache(maxsize=4096)
def get_sm100_config(problem: GemmProblem, scales: str = SCALES_FP32) -> Sm100Config:
    """The sm100 configuration of `problem` (its arch must be an sm_100 target) on scale path `scales`."""
    if problem.arch not in ARCHS:
        raise ValueError(f"get_sm100_config is for {ARCHS}, got arch {problem.arch!r}")
    if problem.kernel_type not in (KernelType.NORMAL, KernelType.M_GROUPED_CONTIGUOUS, KernelType.M_GROUPED_MASKED):
        raise ValueError(f"no sm100 kernel for {problem.kernel_type.value} GEMMs")
    return _heuristic(problem.m, problem.n, problem.k, problem.num_sms, problem.kernel_type, problem.num_groups,
                      check_scales(scales))


def kernel_key(config: Sm100Config) -> Tuple:
    """What makes two configs the same compiled kernel (everything but the grid size)."""
    return (config.block_m, config.block_n, config.num_stages, config.num_multicast,
            config.multicast_on_a, config.scales,
            config.smem_size, config.tmem_cols)


VARIANT_M_CAP = 1 << 16


@functools.lru_cache(maxsize=1024)
def sm100_kernel_variants(n: int, k: int, num_sms: int, kind: KernelType = KernelType.NORMAL,
                          scales: str = SCALES_FP32) -> Tuple[Sm100Config, ...]:
    """One config per distinct kernel the heuristic picks for (n, k) at any m <= VARIANT_M_CAP (dense and contiguous;
    the choice depends on m only through ceil(m / 128) and the multicast thresholds, multiples of 128)."""
    seen = {}
    for q in range(1, VARIANT_M_CAP // CTA_ROWS + 1):
        config = get_sm100_config(GemmProblem(CTA_ROWS * q, n, k, num_sms, "sm_100a", kind), scales)
        seen.setdefault(kernel_key(config), config)
    return tuple(seen.values())


def forced(config: Optional[object]) -> Optional[Sm100Config]:
    """The forced configuration (deep_gemm.testing.forced_config) when it is an sm100 one."""
    return config if isinstance(config, Sm100Config) else None
