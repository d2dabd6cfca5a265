"""Kernel family of include/deep_gemm/sm90/fp8_paged_mqa_logits.cuh (the paged MQA logits of DeepSeek-V3.2's
attention indexer at decode: FP8 q against an FP8 KV cache of 64-token blocks with in-block scales, through a block
table, scheduled by `get_paged_mqa_logits_metadata`): validation of a call's arguments into a layout, the kernel
configuration, and the `_C` plan."""
from dataclasses import dataclass
from typing import Dict, Tuple

import torch

from .. import jit, log
from ..device import get_device_arch, get_num_sms
from ..envs import read_env
from ..heuristics.sm90_mqa import (HEAD_COUNTS, PAGED_BLOCK_TOKENS, PAGED_HEAD_DIM, PAGED_ITEM_TOKENS, PAGED_NEXT_NS,
                                   PagedMQAConfig, get_paged_mqa_logits_config)
from ..jit.runtime import ensure_context
from . import checks
from .plan import POINTER, TENSOR_MAP, U32, OneOutputLayout, ParamBuffer, make_plan
from .variant import TENSOR, Family, Variant

HEADER = "deep_gemm/sm90/fp8_paged_mqa_logits.cuh"
# NOTES: DeepGEMM's test_attention profiles the kernel by the substring "paged_mqa_logits".
FUNCTION = "deep_gemm::sm90::fp8_paged_mqa_logits_impl"
PARAMS = (("tensor_map_q", TENSOR_MAP), ("tensor_map_kv", TENSOR_MAP), ("tensor_map_sf", TENSOR_MAP),
          ("weights", POINTER), ("context_lens", POINTER), ("block_table", POINTER), ("schedule_meta", POINTER),
          ("logits", POINTER),
          ("batch_size", U32), ("max_context_len", U32), ("block_table_stride", U32), ("logits_stride", U32))
_NAMES = ("q", "kv_cache", "weights", "context_lens", "block_table", "schedule_meta", "logits")
BLOCK_BYTES = PAGED_BLOCK_TOKENS * (PAGED_HEAD_DIM + 4)  # 64 tokens of 128 FP8 values, then their FP32 scales


@dataclass(frozen=True)
class PagedKind:
    heads: int
    next_n: int
    bf16: bool


def kernel_source(kind: PagedKind, config: PagedMQAConfig) -> jit.KernelSource:
    named = dict(kNumHeads=kind.heads, kNextN=kind.next_n, kSplitBlocks=config.split_blocks,
                 kNumStages=config.num_stages, kOutputBF16=kind.bf16, kSmemSize=config.smem_size)
    return jit.KernelSource(name="sm90_fp8_paged_mqa_logits", header=HEADER, function=FUNCTION, config=named)


@dataclass
class _Kernel:
    config: PagedMQAConfig
    function: object


_kernels: Dict[Tuple, _Kernel] = {}


def clear_kernels() -> None:
    _kernels.clear()


def _kernel(kind: PagedKind, device_index: int, arch: str) -> _Kernel:
    key = (kind, device_index, arch)
    kernel = _kernels.get(key)
    if kernel is None:
        config = get_paged_mqa_logits_config(kind.heads, kind.next_n)
        log.apply_env(read_env())
        log.configs.debug("fp8 paged mqa logits %s: %s", kind, config)
        ensure_context(device_index)
        loaded = jit.load(kernel_source(kind, config), arch, config.num_threads, config.smem_size)
        kernel = _kernels[key] = _Kernel(config, loaded.function(device_index))
    return kernel


@dataclass(frozen=True)
class Operands:
    kind: PagedKind
    batch_size: int
    num_blocks: int
    num_ctas: int
    max_context_len: int
    block_table_stride: int
    logits_stride: int


def schedule_metadata(context_lens: torch.Tensor, num_ctas: int) -> torch.Tensor:
    """int32 [num_ctas + 1, 2]: row c = (batch, item) where CTA c starts, items being PAGED_ITEM_TOKENS tokens of one
    batch's longest context (context_lens[:, -1]) split evenly over the CTAs; the last row (B, 0). Device-side
    PyTorch ops only (no host synchronisation)."""
    items = (context_lens[:, -1].clamp(min=0).long() + PAGED_ITEM_TOKENS - 1) // PAGED_ITEM_TOKENS
    ends = torch.cumsum(items, 0)
    total = ends[-1:] if ends.numel() else torch.zeros(1, dtype=torch.long, device=context_lens.device)
    starts = torch.arange(num_ctas + 1, device=context_lens.device) * total // num_ctas
    batch = torch.searchsorted(ends, starts, right=True)
    first = torch.cat([torch.zeros(1, dtype=torch.long, device=ends.device), ends])[batch]
    return torch.stack([batch, starts - first], dim=1).int()


def reference(q, kv_cache, weights, context_lens, block_table) -> Tuple[torch.Tensor, torch.Tensor]:
    """benchmarks.attention's check: (FP32 logits [B x next_n, max_blocks x 64] of the FP8 values, the mask of the columns a call writes)."""
    batch, next_n, heads, _ = q.shape
    blocks = kv_cache.view(kv_cache.shape[0], -1)
    values = blocks[:, :PAGED_BLOCK_TOKENS * PAGED_HEAD_DIM].contiguous().view(torch.float8_e4m3fn).float()
    scales = blocks[:, PAGED_BLOCK_TOKENS * PAGED_HEAD_DIM:].contiguous().view(torch.float32)
    table = block_table.clamp(min=0).long()
    kv = values.view(-1, PAGED_BLOCK_TOKENS, PAGED_HEAD_DIM)[table].view(batch, -1, PAGED_HEAD_DIM)
    sf = scales.view(-1, PAGED_BLOCK_TOKENS)[table].view(batch, -1)
    score = torch.einsum("bjhd,btd->bjht", q.float(), kv).relu()
    logits = torch.einsum("bjht,bjh->bjt", score, weights.view(batch, next_n, heads)) * sf[:, None, :]
    written = torch.arange(kv.shape[1], device=q.device)[None, None, :] < context_lens[:, :, None]
    return logits.reshape(batch * next_n, -1), written.reshape(batch * next_n, -1)


def build_plan(ops: Operands, extents, device_index: int, num_sms: int, arch: str):
    kernel = _kernel(ops.kind, device_index, arch)
    cfg, n = kernel.config, ops.kind.next_n * ops.kind.heads
    params = ParamBuffer(PARAMS)
    d = PAGED_HEAD_DIM
    params.tensor_map("tensor_map_q", 0, 1, (d, ops.batch_size * n), (d,), (d, n), 128)
    # The cache as [blocks x 66, 128] bytes: a block's values are its first 64 rows, its scales the last 2.
    rows = ops.num_blocks * BLOCK_BYTES // d
    params.tensor_map("tensor_map_kv", 1, 1, (d, rows), (d,), (d, PAGED_BLOCK_TOKENS), 128)
    params.tensor_map("tensor_map_sf", 1, 1, (d, rows), (d,), (d, BLOCK_BYTES // d - PAGED_BLOCK_TOKENS), 0)
    for i, name in enumerate(("weights", "context_lens", "block_table", "schedule_meta", "logits"), start=2):
        params.pointer(name, i)
    params.u32("batch_size", ops.batch_size)
    params.u32("max_context_len", ops.max_context_len)
    params.u32("block_table_stride", ops.block_table_stride)
    params.u32("logits_stride", ops.logits_stride)
    launches = [params.launch(ops.num_ctas, cfg.num_threads, cfg.smem_size, 1)]
    return make_plan(kernel.function, device_index, (15, 15, 3, 3, 3, 3, 1 if ops.kind.bf16 else 3), extents, (6,),
                     launches)


def normalise(q, kv_cache, weights, context_lens, block_table, schedule_meta, logits) -> OneOutputLayout:
    """Every check of a paged MQA logits call (SM90): q [B, next_n, H, 128] float8_e4m3fn contiguous (next_n 1 or 2,
    H 32 or 64); kv_cache [blocks, 64, 1, 132] uint8 contiguous (each block 64 x 128 FP8 values, then 64 FP32
    scales); weights [B x next_n, H] float32 contiguous; context_lens [B, next_n] int32 contiguous; block_table [B,
    max_blocks] int32 with unit column stride; schedule_meta [CTAs + 1, 2] int32 contiguous (from
    get_paged_mqa_logits_metadata); logits [B x next_n, max_context_len] float32 or bfloat16 with unit column
    stride."""
    checks.check_tensor(q, "q", torch.float8_e4m3fn, 4)
    checks.check_tensor(kv_cache, "kv_cache", torch.uint8, 4)
    checks.check_tensor(weights, "weights", torch.float32, 2)
    checks.check_tensor(context_lens, "context_lens", torch.int32, None)
    checks.check_tensor(block_table, "block_table", torch.int32, 2)
    checks.check_tensor(schedule_meta, "schedule_meta", torch.int32, 2)
    if not isinstance(logits, torch.Tensor) or logits.dtype not in (torch.float32, torch.bfloat16):
        raise TypeError(f"logits must be a float32 or bfloat16 tensor, got "
                        f"{getattr(logits, 'dtype', type(logits).__name__)}")
    checks.check_tensor(logits, "logits", logits.dtype, 2)
    batch, next_n, heads, head_dim = q.shape
    if next_n not in PAGED_NEXT_NS:
        raise ValueError(f"q has next_n = {next_n}: SM90 takes {PAGED_NEXT_NS} (larger next_n is SM100-only)")
    if heads not in HEAD_COUNTS:
        raise ValueError(f"q has {heads} heads: SM90 takes {HEAD_COUNTS}")
    if head_dim != PAGED_HEAD_DIM:
        raise ValueError(f"q's head dim is {head_dim}: the paged form takes {PAGED_HEAD_DIM} on SM90")
    if tuple(kv_cache.shape[1:]) != (PAGED_BLOCK_TOKENS, 1, PAGED_HEAD_DIM + 4):
        raise ValueError(f"kv_cache must be [blocks, {PAGED_BLOCK_TOKENS}, 1, {PAGED_HEAD_DIM + 4}] (block_kv 64 on "
                         f"SM90), got {tuple(kv_cache.shape)}")
    checks.check_shape(weights, "weights", (batch * next_n, heads), "B*next_n x heads")
    if context_lens.dim() != 2:
        raise ValueError(f"context_lens must be 2-D [B, next_n] on SM90, got shape {tuple(context_lens.shape)}")
    checks.check_shape(context_lens, "context_lens", (batch, next_n), "B x next_n")
    if block_table.shape[0] != batch:
        raise ValueError(f"block_table must have {batch} rows (one per batch), got {tuple(block_table.shape)}")
    if schedule_meta.shape[1] != 2 or schedule_meta.shape[0] < 2:
        raise ValueError(f"schedule_meta must be [CTAs + 1, 2] (get_paged_mqa_logits_metadata), got "
                         f"{tuple(schedule_meta.shape)}")
    if logits.shape[0] != batch * next_n:
        raise ValueError(f"logits must have {batch * next_n} rows (B x next_n), got {tuple(logits.shape)}")
    named = list(zip(_NAMES, (q, kv_cache, weights, context_lens, block_table, schedule_meta, logits)))
    device = checks.check_same_cuda_device(named)
    checks.check_no_overlap(logits, "logits", named[:6])
    nothing = batch == 0 or logits.shape[1] == 0
    if not nothing:
        for t, name in ((q, "q"), (kv_cache, "kv_cache"), (weights, "weights"), (context_lens, "context_lens"),
                        (schedule_meta, "schedule_meta")):
            if not t.is_contiguous():
                raise ValueError(f"{name} must be contiguous, got strides {t.stride()}")
        if block_table.shape[1] > 1 and block_table.stride(1) != 1:
            raise ValueError(f"block_table must have unit stride along its columns, got {block_table.stride()}")
        if logits.shape[1] > 1 and logits.stride(1) != 1:
            raise ValueError(f"logits must have unit stride along its columns, got strides {logits.stride()}")
        if kv_cache.shape[0] == 0:
            raise ValueError("kv_cache has no blocks")
    kind = PagedKind(heads, next_n, logits.dtype == torch.bfloat16)
    ops = Operands(kind, batch, kv_cache.shape[0], schedule_meta.shape[0] - 1, logits.shape[1],
                   block_table.stride(0) if batch > 1 else block_table.shape[1],
                   logits.stride(0) if logits.shape[0] > 1 else logits.shape[1])
    # Pointers: q and kv by TMA (16 bytes), the rest 4-byte words, the logits elements.
    aligns = (16, 16, 4, 4, 4, 4, logits.element_size())
    return OneOutputLayout(nothing, device, ops, _NAMES, aligns, tuple(checks.extent_bytes(t) for _, t in named),
                           get_num_sms(device.index), get_device_arch(device.index))


def load(kind: PagedKind, device_index: int, arch: str) -> None:
    _kernel(kind, device_index, arch)


PAGED_MQA_LOGITS = Variant("paged_mqa_logits", "fp8_fp4_paged_mqa_logits", (TENSOR,) * 7, normalise, gemm=False)
FAMILY = Family("sm90_fp8_paged_mqa_logits", HEADER, FUNCTION, PARAMS, ("sm_90a",), (PAGED_MQA_LOGITS,), build_plan,
                clear_kernels, load)
