"""Arch-neutral problem/config types and wave arithmetic."""
import enum
from dataclasses import dataclass
from typing import Optional, Union


def ceil_div(a: int, b: int) -> int:
    """a / b rounded up, for non-negative a and positive b (e.g. the 128-wide K blocks of k elements)."""
    return (a + b - 1) // b


def align(a: int, b: int) -> int:
    """a rounded up to a multiple of b (positive b), e.g. a row count padded to the block size."""
    return ceil_div(a, b) * b


class KernelType(enum.Enum):
    """The 1d2d kernels' GemmType (include/deep_gemm/common/scheduler.cuh); each value is the name of the variant that
    runs it (deep_gemm.runtime.VARIANTS)."""
    NORMAL = "dense"                     # dense D = A B^T
    M_GROUPED_CONTIGUOUS = "contiguous"  # MoE: experts' rows stacked along M, 128-row aligned
    M_GROUPED_MASKED = "masked"          # MoE: [G, m_max] rows, the first masked_m[g] computed
    M_GROUPED_PSUM = "psum"              # MoE: experts' rows stacked along M, ends given as running sums
    BATCHED = "bmm"                      # BMM: B independent [m, n, k] GEMMs, rows stacked per batch


def walks_groups(kind: KernelType) -> bool:
    """Kernels whose tiles are found by walking the groups (masked, psum): the heuristic sees expected rows per
    group and the group count, and a multicast pair must share its M block (A multicast only)."""
    return kind in (KernelType.M_GROUPED_MASKED, KernelType.M_GROUPED_PSUM)


def has_group_row_ends(kind: KernelType) -> bool:
    """Kernels whose M blocks stop at their group's last row (masked, psum, batched): the heuristic sees rows per
    group and the group count, the kernel depends on both, and a multicast pair must share its M block."""
    return walks_groups(kind) or kind == KernelType.BATCHED


# Rows of one expert's segment in the contiguous layout: every BLOCK_M-row tile lies inside one segment.
M_ALIGNMENT_CONTIGUOUS = 128


# The float32 bits of +inf: a SwiGLU epilogue without activation clamp.
NO_CLAMP_BITS = 0x7F800000


@dataclass(frozen=True)
class SwiGLU:
    """An FP8-output grouped GEMM whose epilogue applies SwiGLU (the MoE gate/up projection; B's gate and up rows
    interleaved in runs of 64 by deep_gemm.utils.interleave_swiglu_weights): its D has n / 2 columns, act =
    SiLU(min(gate, clamp)) * clamp(up, -clamp, clamp), quantised per row and 128 output columns. `clamp_bits`: the
    clamp's float32 bits (NO_CLAMP_BITS: none), a compile-time constant of the kernel."""
    clamp_bits: int = NO_CLAMP_BITS


# A GEMM's output epilogue beyond BF16: False (none), True (e4m3 with per-row 1 x 128 scales) or SwiGLU (that, after
# the activation).
FP8Out = Union[bool, SwiGLU]


@dataclass(frozen=True)
class GemmProblem:
    """What the heuristics see: the shape, the SM budget and the target.

    Grouped problems: m is the total row count (contiguous: rows of all experts incl. padding) or the expected
    rows per group (masked, psum), or every batch's rows (batched); num_groups is the number of experts / batches.
    """
    m: int
    n: int
    k: int
    num_sms: int
    arch: str = "sm_90a"
    kernel_type: KernelType = KernelType.NORMAL
    num_groups: int = 1
    # > 0: every tile's columns must lie inside one run of this many (BLOCK_N divides it): a dense GEMM whose
    # output columns are remapped in runs (fp8_gemm_nt_skip_head_mid's head parts).
    n_segment: int = 0
    # A dense, contiguous or masked GEMM whose epilogue writes e4m3 with one scale per row and 128 columns (FP8
    # output): every tile holds whole 128-column groups (BLOCK_N a multiple of 128). A SwiGLU instance: the
    # contiguous or masked gate/up GEMM whose epilogue applies SwiGLU first (n a multiple of 256).
    fp8_out: FP8Out = False

    def __post_init__(self):
        for name in ("m", "n", "k"):
            if getattr(self, name) <= 0:
                raise ValueError(f"GemmProblem.{name} must be positive, got {getattr(self, name)}")
        if self.num_sms <= 0:
            raise ValueError(f"GemmProblem.num_sms must be positive, got {self.num_sms}")
        if self.num_groups <= 0 or (self.kernel_type == KernelType.NORMAL and self.num_groups != 1):
            raise ValueError(f"GemmProblem.num_groups must be positive (1 for a dense GEMM), got {self.num_groups}")
        if self.n_segment < 0 or (self.n_segment and (self.kernel_type != KernelType.NORMAL or self.n_segment % 16)):
            raise ValueError(f"GemmProblem.n_segment must be 0 or a multiple of 16 (dense), got {self.n_segment}")
        if self.fp8_out and (self.kernel_type not in (KernelType.NORMAL, KernelType.M_GROUPED_CONTIGUOUS,
                                                      KernelType.M_GROUPED_MASKED) or self.n_segment):
            raise ValueError("GemmProblem.fp8_out is a dense, contiguous or masked GEMM's, without head splits")
        if isinstance(self.fp8_out, SwiGLU) and (self.kernel_type == KernelType.NORMAL or self.n % 256):
            raise ValueError("GemmProblem.fp8_out = SwiGLU(...) is a contiguous or masked GEMM's with n % 256 == 0")


@dataclass(frozen=True)
class GemmConfig:
    """One kernel instantiation plus its launch shape."""
    block_m: int
    block_n: int
    block_k: int
    num_stages: int
    num_multicast: int      # CTAs per cluster sharing one TMA load (1 or 2)
    multicast_on_a: bool    # True: the pair shares the A tile (same M block); False: shares B
    swizzle_d_bytes: int    # 0, 32, 64 or 128
    num_sms: int            # persistent grid size
    smem_size: int
    num_threads: int
    # The rows of A each stage loads when the call has fewer than block_m (the rest of the stage's A tile is never
    # loaded and only feeds rows the epilogue does not write): the FP8 batched GEMM with m <= block_m (m rounded up
    # to 8; its tile walk then knows there is one M block: kOneMBlock), dense calls (a_rows_per_stage); 0: block_m.
    a_box_rows: int = 0
    # CTAs of a cluster that take one output tile together, each one contiguous range of K, and add their partial
    # tiles up in shared memory (the BF16 GEMM's dense decode sizes); 1: none.
    cluster_k_splits: int = 1

    @property
    def cluster_size(self) -> int:
        """CTAs per cluster of the launch."""
        return self.num_multicast * self.cluster_k_splits

    def __post_init__(self):
        # (Above 8: sm_90's non-portable cluster sizes, which only the BF16 kernel's sum over batches takes.)
        if not 1 <= self.cluster_k_splits <= 16 or (self.cluster_k_splits > 1 and self.num_multicast > 1):
            raise ValueError(f"cluster_k_splits must be 1-16 without multicast, got {self.cluster_k_splits}")
        if self.num_sms % self.cluster_size != 0:
            raise ValueError("the grid must be a multiple of the cluster size")
        if self.a_box_rows and (self.a_box_rows % 8 or self.a_box_rows > self.block_m):
            raise ValueError(f"a_box_rows must be a multiple of 8 up to block_m, got {self.a_box_rows}")


def num_waves(num_tiles: int, num_sms: int) -> int:
    return ceil_div(num_tiles, num_sms)


def last_wave_util(num_tiles: int, num_sms: int) -> int:
    """Busy SMs in the last wave."""
    rem = num_tiles % num_sms
    return num_sms if rem == 0 else rem


def max_clusters(num_sms: int, splits: int) -> int:
    """Clusters of `splits` CTAs (cluster K splits) that run at once, assuming GPCs of 16 SMs (a cluster never spans
    two; H100 and H200 have 16-18 SMs per GPC, an even count, so pairs fill every SM). NOTES: on an H100, grids of
    132 CTAs in clusters of 3, 4 or 6 ran 20-40% slower than grids within this bound (the last clusters waited for a
    second wave); in clusters of 2 they did not (128 x 2112 x 7168 at 128 x 32 cut in 2: 22.0 us on 132 SMs, the
    sweep's best 128-row tile)."""
    if splits <= 2:
        return num_sms // splits
    return num_sms // 16 * (16 // splits)


def a_rows_per_stage(m: int, block_m: int) -> int:
    """A rows a dense call loads per stage when it has fewer than block_m (GemmConfig.a_box_rows): m rounded up to
    a power of two of at least 8 (the swizzle's row group; powers of two keep the kernels per (n, k) few), else 0
    (block_m rows). NOTES: H100, BF16 1 x 2112 x 7168 at 64 x 16: 28.8 us with 64-row A boxes, 18.8 with 8-row ones."""
    rows = max(8, 1 << (m - 1).bit_length())
    return rows if rows < block_m else 0


def min_sms_for_waves(num_tiles: int, waves: int, multiple: int) -> int:
    """Fewest SMs (a multiple of `multiple`) that still finish `num_tiles` in `waves` waves."""
    return align(ceil_div(num_tiles, waves), multiple)


# A configuration forced by the test/tuning hook `deep_gemm.testing.forced_config` (None: the heuristics decide).
_forced_config: Optional[GemmConfig] = None


def get_forced_config() -> Optional[GemmConfig]:
    return _forced_config


def set_forced_config(config: Optional[GemmConfig]) -> Optional[GemmConfig]:
    """Set the forced configuration; returns the previous one."""
    global _forced_config
    previous, _forced_config = _forced_config, config
    return previous
