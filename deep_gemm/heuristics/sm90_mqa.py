"""Hopper (sm_90a) configuration of the MQA logits kernel (include/deep_gemm/sm90/fp8_mqa_logits.cuh): BLOCK_Q
queries per CTA so that their heads fill one 128-wide WGMMA N side, 64 keys per math warpgroup and stage, as many
stages as fit up to MAX_STAGES; one CTA per block of queries."""
import functools
from dataclasses import dataclass
from typing import Tuple

from .common import ceil_div
from .sm90 import SMEM_BUDGET

HEAD_COUNTS = (32, 64)
HEAD_DIMS = (32, 64, 128)
N_COLUMNS = 128      # BLOCK_Q x heads
MATH_WARPGROUPS = 4  # 64 keys each: BLOCK_KV = 64 x MATH_WARPGROUPS
MAX_STAGES = 8


@dataclass(frozen=True)
class MQAConfig:
    block_q: int
    block_kv: int
    num_stages: int
    smem_size: int
    num_threads: int       # the math warpgroups' and a producer warpgroup's
    math_warpgroups: int


def mqa_smem_size(heads: int, head_dim: int, block_q: int, block_kv: int, num_stages: int) -> int:
    """Mirror of `mqa_logits_smem_size` in the kernel header (the kernel asserts equality)."""
    return block_q * heads * head_dim + num_stages * block_kv * head_dim + (2 * num_stages + 1) * 8


@functools.lru_cache(maxsize=64)
def get_mqa_logits_config(heads: int, head_dim: int, math_warpgroups: int = MATH_WARPGROUPS) -> MQAConfig:
    """Configuration for `heads` query heads (HEAD_COUNTS) of `head_dim` (HEAD_DIMS) with `math_warpgroups` (2 or
    4), as many stages as fit the shared memory."""
    if heads not in HEAD_COUNTS or head_dim not in HEAD_DIMS:
        raise ValueError(f"MQA logits on SM90 take heads in {HEAD_COUNTS} and head_dim in {HEAD_DIMS}, got {heads}, "
                         f"{head_dim}")
    if math_warpgroups not in (2, 4):
        raise ValueError(f"math_warpgroups must be 2 or 4, got {math_warpgroups}")
    block_q, block_kv = N_COLUMNS // heads, 64 * math_warpgroups
    stages = next(s for s in range(MAX_STAGES, 1, -1)
                  if mqa_smem_size(heads, head_dim, block_q, block_kv, s) <= SMEM_BUDGET)
    return MQAConfig(block_q, block_kv, stages, mqa_smem_size(heads, head_dim, block_q, block_kv, stages),
                     128 * math_warpgroups + 128, math_warpgroups)


def mqa_logits_padding() -> Tuple[int, int]:
    """(rows, columns) that logits rows padded for the kernel's unchecked stores need: the row count rounded up to
    a multiple of the largest query block, and a key block past the last key (any head count and head dim)."""
    return N_COLUMNS // min(HEAD_COUNTS), 64 * MATH_WARPGROUPS


def mqa_grid(seq_len: int, config: MQAConfig) -> int:
    """CTAs of a call: one per block of queries."""
    return ceil_div(seq_len, config.block_q)


# ---- The paged form (include/deep_gemm/sm90/fp8_paged_mqa_logits.cuh): a cache block holds 64 tokens of 128 FP8
# values and their 64 FP32 scales; work items are PAGED_SPLIT_BLOCKS blocks of one batch (the metadata's unit).
PAGED_BLOCK_TOKENS = 64
PAGED_HEAD_DIM = 128
PAGED_NEXT_NS = (1, 2)
PAGED_SPLIT_BLOCKS = 4
PAGED_ITEM_TOKENS = PAGED_SPLIT_BLOCKS * PAGED_BLOCK_TOKENS


@dataclass(frozen=True)
class PagedMQAConfig:
    split_blocks: int
    num_stages: int
    smem_size: int
    num_threads: int


def paged_mqa_smem_size(heads: int, next_n: int, num_stages: int) -> int:
    """Mirror of `paged_mqa_logits_smem_size` in the kernel header (the kernel asserts equality)."""
    n = next_n * heads
    stage = 2 * PAGED_BLOCK_TOKENS * (PAGED_HEAD_DIM + 4)  # two cache blocks' values and scales
    return 2 * n * PAGED_HEAD_DIM + num_stages * stage + (2 * num_stages + 4) * 8


@functools.lru_cache(maxsize=64)
def get_paged_mqa_logits_config(heads: int, next_n: int) -> PagedMQAConfig:
    if heads not in HEAD_COUNTS or next_n not in PAGED_NEXT_NS:
        raise ValueError(f"paged MQA logits on SM90 take heads in {HEAD_COUNTS} and next_n in {PAGED_NEXT_NS}, got "
                         f"{heads}, {next_n}")
    stages = next(s for s in range(MAX_STAGES, 0, -1) if paged_mqa_smem_size(heads, next_n, s) <= SMEM_BUDGET)
    return PagedMQAConfig(PAGED_SPLIT_BLOCKS, stages, paged_mqa_smem_size(heads, next_n, stages), 256 + 128)
