"""Kernel family of include/deep_gemm/sm90/fp8_mqa_logits.cuh (the MQA logits of DeepSeek-V3.2's attention indexer:
logits[i, j] = sum_h w[i, h] ReLU(q[i, h] . kv[j]) kv_sf[j] for keys j in [ks[i], ke[i]), FP8 q and kv): validation
of a call's arguments into a layout, the kernel configuration, and the `_C` plan."""
from dataclasses import dataclass
from typing import Dict, Optional, Tuple

import torch

from .. import jit, log
from ..device import get_device_arch, get_num_sms
from ..envs import read_env
from ..heuristics.sm90_mqa import HEAD_COUNTS, HEAD_DIMS, MQAConfig, get_mqa_logits_config, mqa_grid
from ..jit.runtime import ensure_context
from . import checks
from .plan import POINTER, TENSOR_MAP, U32, OneOutputLayout, ParamBuffer, make_plan
from .variant import INT, TENSOR, Family, Variant

HEADER = "deep_gemm/sm90/fp8_mqa_logits.cuh"
# NOTES: DeepGEMM's test_attention profiles the kernel by the substring "mqa_logits".
FUNCTION = "deep_gemm::sm90::fp8_mqa_logits_impl"
PARAMS = (("tensor_map_q", TENSOR_MAP), ("tensor_map_kv", TENSOR_MAP), ("kv_sf", POINTER), ("weights", POINTER),
          ("ks", POINTER), ("ke", POINTER), ("logits", POINTER), ("seq_len", U32), ("seq_len_kv", U32),
          ("weights_stride", U32), ("logits_stride", U32), ("max_seqlen_k", U32))
_NAMES = ("q", "kv", "kv_sf", "weights", "cu_seq_len_k_start", "cu_seq_len_k_end", "logits")


@dataclass(frozen=True)
class MQAKind:
    """What a kernel instantiation depends on besides its configuration."""
    heads: int
    head_dim: int
    compressed: bool   # logits rows of max_seqlen_k columns, column j - ks[i]
    clean: bool        # the rest of each row written -inf
    bf16: bool         # BF16 logits (else FP32)
    padded: bool       # the op's own padded logits: every walked key written without range checks


def kernel_source(kind: MQAKind, config: MQAConfig) -> jit.KernelSource:
    named = dict(kNumHeads=kind.heads, kHeadDim=kind.head_dim, BLOCK_Q=config.block_q, BLOCK_KV=config.block_kv,
                 kNumStages=config.num_stages, kMathWarpgroups=config.math_warpgroups, kCompressed=kind.compressed,
                 kClean=kind.clean, kOutputBF16=kind.bf16, kPaddedLogits=kind.padded, kSmemSize=config.smem_size)
    return jit.KernelSource(name="sm90_fp8_mqa_logits", header=HEADER, function=FUNCTION, config=named)


@dataclass
class _Kernel:
    config: MQAConfig
    function: object


_kernels: Dict[Tuple, _Kernel] = {}


def clear_kernels() -> None:
    _kernels.clear()


def _kernel(kind: MQAKind, device_index: int, arch: str) -> _Kernel:
    key = (kind, device_index, arch)
    kernel = _kernels.get(key)
    if kernel is None:
        config = get_mqa_logits_config(kind.heads, kind.head_dim)
        log.apply_env(read_env())
        log.configs.debug("fp8 mqa logits %s: %s", kind, config)
        ensure_context(device_index)
        loaded = jit.load(kernel_source(kind, config), arch, config.num_threads, config.smem_size)
        kernel = _kernels[key] = _Kernel(config, loaded.function(device_index))
    return kernel


@dataclass(frozen=True)
class Operands:
    """Geometry of one call: queries, keys, the kind, kv's and weights' row strides, logits' row stride (elements)."""
    seq_len: int
    seq_len_kv: int
    kind: MQAKind
    kv_stride: int
    weights_stride: int
    logits_stride: int
    max_seqlen_k: int


def build_plan(ops: Operands, extents, device_index: int, num_sms: int, arch: str):
    kernel = _kernel(ops.kind, device_index, arch)
    cfg, h, d = kernel.config, ops.kind.heads, ops.kind.head_dim
    params = ParamBuffer(PARAMS)
    # q as [S x H, D] rows and kv as [Skv, D]: one swizzled row of D bytes per (query, head) and per key.
    params.tensor_map("tensor_map_q", 0, 1, (d, ops.seq_len * h), (d,), (d, cfg.block_q * h), d)
    params.tensor_map("tensor_map_kv", 1, 1, (d, ops.seq_len_kv), (ops.kv_stride,), (d, cfg.block_kv), d)
    for i, name in enumerate(("kv_sf", "weights", "ks", "ke", "logits"), start=2):
        params.pointer(name, i)
    params.u32("seq_len", ops.seq_len)
    params.u32("seq_len_kv", ops.seq_len_kv)
    params.u32("weights_stride", ops.weights_stride)
    params.u32("logits_stride", ops.logits_stride)
    params.u32("max_seqlen_k", ops.max_seqlen_k)
    launches = [params.launch(mqa_grid(ops.seq_len, cfg), cfg.num_threads, cfg.smem_size, 1)]
    logits_align = 1 if ops.kind.bf16 else 3
    return make_plan(kernel.function, device_index, (15, 15, 3, 3, 3, 3, logits_align), extents, (6,), launches)


def _padding_fits(logits: torch.Tensor, seq_len: int, seq_len_kv: int, config: MQAConfig) -> bool:
    """Whether logits' storage holds rows up to the next block_q multiple and block_kv columns past the last key
    (what the kernel writes when it skips range checks)."""
    rows = -(-seq_len // config.block_q) * config.block_q
    stride = logits.stride(0)
    return (logits.storage_offset() == 0 and stride >= seq_len_kv + config.block_kv and
            logits.untyped_storage().nbytes() >= rows * stride * logits.element_size())


def normalise(q, kv, kv_sf, weights, ks, ke, logits, clean, max_seqlen_k, padded) -> OneOutputLayout:
    """Every check of an MQA logits call (SM90): q [S, H, D] float8_e4m3fn contiguous with H in HEAD_COUNTS and D in
    HEAD_DIMS; kv [Skv, D] float8_e4m3fn with unit stride along D and 16-byte rows; kv_sf [Skv] float32 contiguous;
    weights [S, H] float32 with unit stride along H; the key ranges [S] int32 contiguous; logits [S, Skv] (or [S,
    max_seqlen_k] with max_seqlen_k > 0) float32 or bfloat16 with unit column stride; clean 0 or 1, and 0 when
    compressed; padded 1 when the caller owns logits' storage and padded it (`_padding_fits`; not with compressed
    rows), so that the kernel may write past the view."""
    checks.check_tensor(q, "q", torch.float8_e4m3fn, 3)
    checks.check_tensor(kv, "kv", torch.float8_e4m3fn, 2)
    checks.check_tensor(kv_sf, "kv_sf", torch.float32, 1)
    checks.check_tensor(weights, "weights", torch.float32, 2)
    checks.check_tensor(ks, "cu_seq_len_k_start", torch.int32, 1)
    checks.check_tensor(ke, "cu_seq_len_k_end", torch.int32, 1)
    if not isinstance(logits, torch.Tensor) or logits.dtype not in (torch.float32, torch.bfloat16):
        raise TypeError(f"logits must be a float32 or bfloat16 tensor, got "
                        f"{getattr(logits, 'dtype', type(logits).__name__)}")
    checks.check_tensor(logits, "logits", logits.dtype, 2)
    clean = checks.host_int(clean, "clean_logits")
    max_seqlen_k = checks.host_int(max_seqlen_k, "max_seqlen_k")
    padded = checks.host_int(padded, "logits_padded")
    seq_len, heads, head_dim = q.shape
    seq_len_kv = kv.shape[0]
    if heads not in HEAD_COUNTS:
        raise ValueError(f"q has {heads} heads: SM90 takes {HEAD_COUNTS} (DeepGEMM's 8 and 16 are SM100-only)")
    if head_dim not in HEAD_DIMS:
        raise ValueError(f"q's head dim is {head_dim}: SM90 takes {HEAD_DIMS}")
    if kv.shape[1] != head_dim:
        raise ValueError(f"kv must have shape (seq_len_kv, {head_dim}) to match q's head dim, got {tuple(kv.shape)}")
    checks.check_shape(kv_sf, "kv_sf", (seq_len_kv,), "seq_len_kv")
    checks.check_shape(weights, "weights", (seq_len, heads), "seq_len x heads")
    checks.check_shape(ks, "cu_seq_len_k_start", (seq_len,), "seq_len")
    checks.check_shape(ke, "cu_seq_len_k_end", (seq_len,), "seq_len")
    if clean not in (0, 1):
        raise ValueError(f"clean_logits must be a bool, got {clean}")
    if max_seqlen_k < 0:
        raise ValueError(f"max_seqlen_k must be >= 0, got {max_seqlen_k}")
    if padded not in (0, 1) or (padded and max_seqlen_k):
        raise ValueError(f"logits_padded must be 0 or 1, and 0 with compressed logits, got {padded}")
    if max_seqlen_k and clean:
        raise ValueError("clean_logits must be False with max_seqlen_k > 0 (compressed logits, as DeepGEMM)")
    checks.check_shape(logits, "logits", (seq_len, max_seqlen_k or seq_len_kv),
                       "seq_len x " + ("max_seqlen_k" if max_seqlen_k else "seq_len_kv"))
    nothing = seq_len == 0 or logits.shape[1] == 0
    if padded and not nothing and not _padding_fits(logits, seq_len, seq_len_kv,
                                                    get_mqa_logits_config(heads, head_dim)):
        raise ValueError(f"logits_padded: logits' storage must hold rows up to a multiple of the query block and "
                         f"a block of keys past seq_len_kv, got strides {logits.stride()}")
    named = list(zip(_NAMES, (q, kv, kv_sf, weights, ks, ke, logits)))
    device = checks.check_same_cuda_device(named)
    checks.check_no_overlap(logits, "logits", named[:6])
    if not nothing:
        if not q.is_contiguous():
            raise ValueError(f"q must be contiguous, got strides {q.stride()}")
        if seq_len_kv > 1 and (kv.stride(1) != 1 or kv.stride(0) % 16):
            raise ValueError(f"kv must have unit stride along D and a row stride that is a multiple of 16 bytes, got "
                             f"strides {kv.stride()}")
        for t, name in ((kv_sf, "kv_sf"), (ks, "cu_seq_len_k_start"), (ke, "cu_seq_len_k_end")):
            if not t.is_contiguous():
                raise ValueError(f"{name} must be contiguous, got strides {t.stride()}")
        if weights.stride(1) != 1:
            raise ValueError(f"weights must have unit stride along the heads, got strides {weights.stride()}")
        if logits.shape[1] > 1 and logits.stride(1) != 1:
            raise ValueError(f"logits must have unit stride along its columns, got strides {logits.stride()}")
    kind = MQAKind(heads, head_dim, max_seqlen_k > 0, bool(clean), logits.dtype == torch.bfloat16, bool(padded))
    logits_stride = logits.stride(0) if seq_len > 1 or padded else logits.shape[1]
    ops = Operands(seq_len, seq_len_kv, kind, kv.stride(0) if seq_len_kv > 1 else head_dim,
                   weights.stride(0) if seq_len > 1 else heads, logits_stride, max_seqlen_k)
    # Pointers: q and kv by TMA (16 bytes), the rest 4-byte words, the logits elements.
    aligns = (16, 16, 4, 4, 4, 4, logits.element_size())
    return OneOutputLayout(nothing, device, ops, _NAMES, aligns, tuple(checks.extent_bytes(t) for _, t in named),
                           get_num_sms(device.index), get_device_arch(device.index))


def load(kind: MQAKind, device_index: int, arch: str) -> None:
    """Compile mode: load the kernel of this kind."""
    _kernel(kind, device_index, arch)


MQA_LOGITS = Variant("mqa_logits", "fp8_fp4_mqa_logits", (TENSOR,) * 7 + (INT, INT, INT), normalise, gemm=False)
FAMILY = Family("sm90_fp8_mqa_logits", HEADER, FUNCTION, PARAMS, ("sm_90a",), (MQA_LOGITS,), build_plan,
                clear_kernels, load)
