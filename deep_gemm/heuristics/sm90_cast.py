"""Hopper (sm_90a) launch shape of the FP8 casts (include/deep_gemm/sm90/fp8_cast.cuh): the vector width a call's
pointers, strides and columns allow, threads per CTA, the groups a warp takes per token, and the grid. The kernels
are bound by memory traffic: the choices keep every load 16 bytes wide where it can be and enough loads in flight."""
import functools
from dataclasses import dataclass

from .common import ceil_div

GRAN = 128                   # elements per group along each grouped dimension (the kernels' kGran)
KINDS = ("per_token", "per_block", "per_channel")
VECTOR_BYTES = 16            # the widest load
# (threads per CTA, registers per thread the kernel must fit: __launch_bounds__' CTAs per SM).
# Per token, warps are independent: 128-thread CTAs, or 512-thread ones (one round) for problems of at most
# SMALL_TOKEN_UNITS warp units, where the CTA count, not the traffic, bounded the time.
# NOTES: H200, ours / floor (`.peer` sweep of these constants, 2026-11-27f): 512 x 4096 BF16 2.03 -> 1.24 with
# 512-thread CTAs, 512 x 2048 1.62 -> 1.15, 64 x 7168 1.44 -> 1.16; from 14336 units on (512 x 7168) 128-thread CTAs
# with 4 rounds won (1.18 against 1.30), and at 4096 rows 512-thread CTAs lost 7-11%.
# Per block, a CTA holds a 128 x 128 block, 32 elements per thread: two CTAs per SM, so that one's loads overlap the
# other's arithmetic (narrow vectors: a load per element, whose addresses need more registers; one CTA).
# Per channel, a CTA holds 128 rows of 16 vectors (16 lanes across a row, 8 rows per thread), or of 8 vectors where
# that leaves fewer than CHANNEL_MIN_CTAS_PER_SM CTAs per SM: two CTAs per SM. NOTES: H100, ours / floor
# (`.peer` sweep, 2026-11-27h): 32 lanes 1.04-1.07 from 32768 rows, 1.14-1.21 at 4096, 2.0-2.6 at 128-512 (8-32
# CTAs: a CTA's arithmetic runs on one SM); 16 lanes 0.98-1.03 / 1.02-1.25 / 1.3-1.85; 8 lanes 1.03-1.11 /
# 1.05-1.19 / 1.25-1.56 (best below 8 CTAs of 16 lanes per SM).
TOKEN_LAUNCH, SMALL_TOKEN_LAUNCH = (128, 64), (512, 64)
SMALL_TOKEN_UNITS = 8192
BLOCK_LAUNCH, BLOCK_NARROW_LAUNCH = (512, 64), (512, 128)
CHANNEL_LAUNCH = (256, 128)
CHANNEL_LANES = (16, 8)
CHANNEL_MIN_CTAS_PER_SM = 6
ROUNDS = (4, 2, 1)           # per token: loads of groups per lane a warp issues before its first reduction
MIN_WARPS_PER_SM = 16        # per token: fewer rounds when more would leave fewer warps than this per SM
# (512 x 7168 BF16: 4 rounds at 16 warps per SM 1.18x the floor, 2 rounds at 32 1.36x; H200, same sweep)
REGISTERS_PER_SM = 65536


@dataclass(frozen=True)
class CastConfig:
    vec: int           # elements per vector (a power of two, at most 16 bytes of input)
    num_threads: int
    min_blocks: int    # CTAs per SM the kernel's registers must allow (__launch_bounds__)
    rounds: int        # per token: rounds of groups per warp; 1 otherwise
    grid: int
    lanes_per_row: int = 32   # per channel: threads across a row (a CTA covers lanes_per_row * vec columns)


def vector_width(element_size: int, *multiples: int) -> int:
    """The widest vector (elements, a power of two, <= 16 bytes) dividing every one of `multiples` (elements: the
    columns, the row strides, the pointers' offsets in elements)."""
    vec = VECTOR_BYTES // element_size
    while vec > 1 and any(m % vec for m in multiples):
        vec //= 2
    return vec


def groups_per_round(vec: int) -> int:
    """Groups a warp's 32 lanes cover with one vector each (kernel: 32 / lanes per group)."""
    return max(1, 32 * vec // GRAN)


@functools.lru_cache(maxsize=1024)
def get_cast_config(kind: str, rows: int, cols: int, vec: int, element_size: int, num_sms: int) -> CastConfig:
    """The launch of one cast of a [rows, cols] tensor (rows, cols > 0) of `element_size`-byte elements (2: BF16, 4:
    FP32) with vectors of `vec` elements."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    if min(rows, cols, vec, num_sms) <= 0 or element_size not in (2, 4):
        raise ValueError(f"rows, cols, vec and num_sms must be positive and element_size 2 or 4, got {rows}, {cols}, "
                         f"{vec}, {num_sms}, {element_size}")
    if kind == "per_block":
        threads, registers = BLOCK_LAUNCH if vec * element_size == VECTOR_BYTES else BLOCK_NARROW_LAUNCH
        grid = ceil_div(rows, GRAN) * ceil_div(cols, GRAN)
        return CastConfig(vec, threads, REGISTERS_PER_SM // (threads * registers), 1, grid)
    if kind == "per_channel":
        threads, registers = CHANNEL_LAUNCH
        for lanes in CHANNEL_LANES:
            grid = ceil_div(rows, GRAN) * ceil_div(cols, lanes * vec)
            if grid >= CHANNEL_MIN_CTAS_PER_SM * num_sms:
                break
        return CastConfig(vec, threads, REGISTERS_PER_SM // (threads * registers), 1, grid, lanes)
    groups = ceil_div(cols, GRAN)
    single_round_units = rows * ceil_div(groups, groups_per_round(vec))
    if single_round_units <= SMALL_TOKEN_UNITS:
        threads, registers = SMALL_TOKEN_LAUNCH
        return CastConfig(vec, threads, REGISTERS_PER_SM // (threads * registers), 1,
                          ceil_div(single_round_units, threads // 32))
    threads, registers = TOKEN_LAUNCH
    for rounds in ROUNDS:
        units = rows * ceil_div(groups, groups_per_round(vec) * rounds)
        if units >= MIN_WARPS_PER_SM * num_sms or rounds == 1:
            return CastConfig(vec, threads, REGISTERS_PER_SM // (threads * registers), rounds,
                              ceil_div(units, threads // 32))
    raise AssertionError("unreachable")
