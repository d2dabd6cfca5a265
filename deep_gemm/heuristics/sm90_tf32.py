"""Hopper (sm_90a) configuration for the hyper-connection pre-norm GEMM (include/deep_gemm/sm90/tf32_hc_prenorm_gemm.cuh):
one 64-row math warpgroup, the whole n (<= 32) in one tile, as many stages as fit (the kernel streams A: n is
too narrow for the tensor cores to matter), one tile per (64-row block, K split)."""
import functools

from .common import GemmConfig, ceil_div
from .sm90 import SMEM_BUDGET

BLOCK_M = 64
BLOCK_K = 64           # BF16 elements of A per stage (one 128-byte row); B's FP32 rows are 256 bytes
MAX_N = 32
MAX_STAGES = 16


def tf32_smem_size(block_n: int, num_stages: int) -> int:
    """Mirror of `tf32_hc_prenorm_smem_size` in the kernel header (the kernel asserts equality)."""
    return 64 * block_n * 4 + num_stages * (BLOCK_M * 128 + block_n * BLOCK_K * 4) + num_stages * 2 * 8


def swizzle_d_bytes(block_n: int) -> int:
    return next(s for s in (128, 64, 32) if (block_n * 4) % s == 0)


@functools.lru_cache(maxsize=1024)
def get_tf32_hc_config(m: int, n: int, num_sms: int, num_splits: int) -> GemmConfig:
    """Configuration for m rows, n <= 32 columns and `num_splits` K splits (m, n, num_sms, num_splits > 0)."""
    if min(m, n, num_sms, num_splits) <= 0 or n > MAX_N:
        raise ValueError(f"m, n, num_sms and num_splits must be positive and n <= {MAX_N}, got {m}, {n}, {num_sms}, "
                         f"{num_splits}")
    block_n = ceil_div(n, 8) * 8
    stages = next(s for s in range(MAX_STAGES, 0, -1) if tf32_smem_size(block_n, s) <= SMEM_BUDGET)
    tiles = ceil_div(m, BLOCK_M) * num_splits
    return GemmConfig(block_m=BLOCK_M, block_n=block_n, block_k=BLOCK_K, num_stages=stages, num_multicast=1,
                      multicast_on_a=True, swizzle_d_bytes=swizzle_d_bytes(block_n), num_sms=min(num_sms, tiles),
                      smem_size=tf32_smem_size(block_n, stages), num_threads=128 + 128)
