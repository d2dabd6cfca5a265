"""Kernel family of include/deep_gemm/sm90/fp8_gemm_1d2d.cuh on sm_90a (the dense, contiguous, masked, psum and
batched GEMMs): the kernel configuration, the kernel's parameters (declared once, `PARAMS`), and the `_C` plan that
launches it. The variants' argument checks are shared with the sm100 family (fp8_gemm_1d2d_args.py)."""
import math
from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional, Tuple

from .. import jit, log
from ..envs import read_env
from ..heuristics import GemmConfig, GemmProblem, KernelType, SwiGLU
from ..heuristics.common import FP8Out, ceil_div, get_forced_config, has_group_row_ends
from ..heuristics.sm90 import get_sm90_config, sm90_kernel_variants, variant_row_counts
from ..jit.leader import is_compile_leader
from ..jit.runtime import ensure_context
from ..scale_layout import get_tma_aligned_size
from . import checks
from .fp8_gemm_1d2d_args import (BMM, CONTIGUOUS, CONTIGUOUS_FP8_OUT, CONTIGUOUS_SWIGLU, DENSE, DENSE_FP8_OUT,
                                  GEMM_TYPES, MASKED, MASKED_FP8_OUT, MASKED_SWIGLU, NO_HEAD_SPLITS, PSUM,
                                  SKIP_HEAD_MID, HeadSplits)
from .plan import POINTER, TENSOR_MAP, U32, ParamBuffer, make_plan
from .variant import Family

FAMILY_NAME = "sm90_fp8_gemm_1d2d"
HEADER = "deep_gemm/sm90/fp8_gemm_1d2d.cuh"
FUNCTION = "deep_gemm::sm90::fp8_gemm_1d2d_impl"
# The kernel's parameters, in its signature's order.
PARAMS = (("tensor_map_a", TENSOR_MAP), ("tensor_map_b", TENSOR_MAP), ("tensor_map_sa", TENSOR_MAP),
          ("tensor_map_d", TENSOR_MAP), ("sb", POINTER), ("shape_m", U32), ("grouped_layout", POINTER),
          ("num_groups", U32), ("d", POINTER), ("d_row_stride", U32), ("sa", POINTER), ("sa_group_stride", U32),
          ("sa_row_stride", U32), ("sa_k_stride", U32), ("d_sf", POINTER), ("d_sf_stride", U32))
_NAMES = {KernelType.NORMAL: "sm90_fp8_gemm_1d2d", KernelType.M_GROUPED_CONTIGUOUS: "sm90_fp8_gemm_1d2d_contiguous",
          KernelType.M_GROUPED_MASKED: "sm90_fp8_gemm_1d2d_masked",
          KernelType.M_GROUPED_PSUM: "sm90_fp8_gemm_1d2d_psum",
          KernelType.BATCHED: "sm90_fp8_gemm_1d2d_batched"}


def kernel_source(n: int, k: int, config: GemmConfig, kind: KernelType = KernelType.NORMAL,
                  psum_alignment: int = 0, head_splits: HeadSplits = NO_HEAD_SPLITS,
                  fp8_out: FP8Out = False) -> jit.KernelSource:
    """The template instantiation for (kind, n, k, config); m (and the groups) stay run-time arguments.
    `psum_alignment`: the psum layout's row alignment of the experts' starts (that kind only). The batched GEMM
    gathers its scales per stage (kGatherScales: SA at the caller's strides, SB's values of the K block); the other
    kinds load SA MN-major by TMA and SB per tile. `head_splits` (left, mid, right): a dense GEMM whose every head
    of left + right columns is stored as left | mid skipped columns | right (fp8_gemm_nt_skip_head_mid).
    `fp8_out`: a dense GEMM whose D is e4m3 with per-row 1 x 128 scales computed in the epilogue
    (fp8_gemm_nt_fp8_out); a SwiGLU instance: the contiguous or masked gate/up GEMM whose epilogue applies SwiGLU
    before that quantisation (kSwiGLU, kActivationClampBits)."""
    if (kind == KernelType.M_GROUPED_PSUM) != (psum_alignment > 0):
        raise ValueError(f"psum_alignment must be > 0 exactly for the psum layout, got {psum_alignment} for {kind}")
    left, mid, right = head_splits
    named = dict(kGemmType=GEMM_TYPES[kind], SHAPE_N=n, SHAPE_K=k, BLOCK_M=config.block_m, BLOCK_N=config.block_n,
                 kNumStages=config.num_stages, kNumMulticast=config.num_multicast,
                 kMulticastOnA=config.multicast_on_a, kSwizzleDBytes=config.swizzle_d_bytes,
                 kSmemSize=config.smem_size, kPsumAlignment=psum_alignment,
                 kGatherScales=kind == KernelType.BATCHED, kLoadRowsA=config.a_box_rows or config.block_m,
                 kSmemRowsA=config.a_box_rows or config.block_m,
                 kOneMBlock=config.a_box_rows > 0 and kind == KernelType.BATCHED,
                 kClusterSplitsK=config.cluster_k_splits, kHeadSplitLeft=left, kHeadSplitMid=mid,
                 kHeadSplitRight=right, kFP8Out=bool(fp8_out), kSwiGLU=isinstance(fp8_out, SwiGLU),
                 kActivationClampBits=fp8_out.clamp_bits if isinstance(fp8_out, SwiGLU) else 0)
    name = _NAMES[kind] + ("_skip_head_mid" if left + right else "") + \
        ("_swiglu" if isinstance(fp8_out, SwiGLU) else "_fp8_out" if fp8_out else "")
    return jit.KernelSource(name=name, header=HEADER, function=FUNCTION, config=named)


@dataclass
class _Kernel:
    config: GemmConfig
    function: object  # CUfunction in the device's primary context


_kernels: Dict[Tuple, _Kernel] = {}
_seen_nk: set = set()


def clear_kernels() -> None:
    _kernels.clear()


def kernel_config(m: int, n: int, k: int, num_sms: int, arch: str, kind: KernelType, num_groups: int,
                  head_splits: HeadSplits = NO_HEAD_SPLITS, fp8_out: FP8Out = False) -> GemmConfig:
    """The configuration a call loads; m: rows (dense, contiguous), expected rows per group (masked, psum) or rows
    per batch (batched). With head splits every tile lies inside one head part (BLOCK_N divides left and right)."""
    left, _, right = head_splits
    return get_forced_config() or get_sm90_config(GemmProblem(m, n, k, num_sms, arch, kind, num_groups,
                                                              math.gcd(left, right), fp8_out))


def runtime_kernels(n: int, k: int, num_sms: int, arch: str, kind: KernelType = KernelType.NORMAL,
                    ms: Optional[Iterable[int]] = None, num_groups: int = 1, psum_alignment: int = 0,
                    head_splits: HeadSplits = NO_HEAD_SPLITS, fp8_out: FP8Out = False) -> List[jit.KernelSource]:
    """The distinct kernels calls of (kind, n, k) load, for heuristic m in `ms` (as `kernel_config`); `ms=None`:
    every kernel any m can pick, which is also what the first-sight precompile builds (dense and contiguous only:
    a masked, psum or batched kernel depends on the rows per group and the group count; head-split GEMMs walk the
    dense GEMM's row counts)."""
    if ms is None and (head_splits != NO_HEAD_SPLITS or fp8_out):
        ms = variant_row_counts()
    if ms is None:
        if has_group_row_ends(kind):
            raise ValueError(f"the {kind.value} kernels depend on expected_m: give the expected m values")
        configs = sm90_kernel_variants(n, k, num_sms, kind)
    else:
        configs = [kernel_config(m, n, k, num_sms, arch, kind, num_groups, head_splits, fp8_out) for m in ms]
    sources = {}
    for config in configs:
        source = kernel_source(n, k, config, kind, psum_alignment, head_splits, fp8_out)
        sources.setdefault(source.instantiation(), source)
    return list(sources.values())


def precompile_variants(n: int, k: int, num_sms: int, arch: str, kind: KernelType = KernelType.NORMAL) -> int:
    """Compile (into the disk cache) every kernel the heuristic can pick for (n, k) at any m, in parallel
    processes; returns how many were missing. Called on the first sight of (n, k) unless DG_JIT_PRECOMPILE=0,
    so that a later new m never waits for a compile (dense and contiguous grouped GEMMs). Only the node's compile
    leader (deep_gemm.jit.leader.is_compile_leader) spawns workers: other ranks build what they use, waiting on the
    cache's per-kernel locks for the leader's compiles."""
    if not is_compile_leader():
        return 0
    # NOTES: the group's marker, once the warm-up or an earlier first call completed it, skips enumerating the
    # variants (~50 ms of heuristics for a new (n, k)) and generating and hashing their sources.
    return jit.build_group((FAMILY_NAME, kind.value, n, k, num_sms),
                           lambda: runtime_kernels(n, k, num_sms, arch, kind), arch)


def warmup_precompile(variant: str, shape: dict, num_sms: int, arch: str) -> None:
    """The first-sight precompile of a dense or contiguous warm-up shape (`Family.precompile`); the kernels of the
    other variants depend on their rows per group, not on (n, k) alone (and head-split and FP8-output GEMMs have
    no first-sight precompile)."""
    if variant in (SKIP_HEAD_MID.name, DENSE_FP8_OUT.name, CONTIGUOUS_FP8_OUT.name, MASKED_FP8_OUT.name,
                   CONTIGUOUS_SWIGLU.name, MASKED_SWIGLU.name):
        return
    kind = KernelType(variant)
    if not has_group_row_ends(kind):
        precompile_variants(shape["n"], shape["k"], num_sms, arch, kind)


def _kernel(m: int, n: int, k: int, num_sms: int, device_index: int, arch: str, kind: KernelType,
            num_groups: int, psum_alignment: int = 0, head_splits: HeadSplits = NO_HEAD_SPLITS,
            fp8_out: FP8Out = False) -> _Kernel:
    """The configured, loaded kernel; m: rows (dense, contiguous) or expected rows per group (masked, psum)."""
    forced = get_forced_config()
    key = (m, n, k, num_sms, device_index, arch, forced, kind, num_groups, psum_alignment, head_splits, fp8_out)
    kernel = _kernels.get(key)
    if kernel is None:
        config = kernel_config(m, n, k, num_sms, arch, kind, num_groups, head_splits, fp8_out)
        env = read_env()
        log.apply_env(env)
        heads = ("" if head_splits == NO_HEAD_SPLITS else f" head splits {head_splits}") + \
            (" fp8 out" if fp8_out else "")
        log.configs.debug("%s m=%d n=%d k=%d groups=%d%s: %s", kind.value, m, n, k, num_groups, heads, config)
        # (Head-split GEMMs are an attention layer's few shapes: compiled as they come.)
        if env.jit_precompile and forced is None and not has_group_row_ends(kind) \
                and head_splits == NO_HEAD_SPLITS and not fp8_out and (n, k, num_sms, arch, kind) not in _seen_nk:
            _seen_nk.add((n, k, num_sms, arch, kind))
            precompile_variants(n, k, num_sms, arch, kind)
        ensure_context(device_index)
        loaded = jit.load(kernel_source(n, k, config, kind, psum_alignment, head_splits, fp8_out), arch,
                          config.num_threads, config.smem_size)
        kernel = _kernels[key] = _Kernel(config, loaded.function(device_index))
    return kernel


def call_kernel(kind: KernelType, a, b, num_sms: int, arch: str, expected_m: int, psum_alignment: int = 0,
                head_splits: HeadSplits = NO_HEAD_SPLITS, fp8_out: FP8Out = False) -> _Kernel:
    """The kernel of a call with A and B (as in `build_plan`): the heuristic sees A's rows, expected_m for the
    kernels that walk groups, or the rows of one batch. Compile mode loads it without launching."""
    num_groups, n = (1, b.shape[0]) if kind == KernelType.NORMAL else b.shape[:2]
    m = expected_m if has_group_row_ends(kind) else a.shape[0]
    return _kernel(m, n, a.shape[-1], num_sms, a.device.index, arch, kind, num_groups, psum_alignment, head_splits,
                   fp8_out)


def build_plan(kind: KernelType, tensors, num_sms: int, arch: str, expected_m: int = 0, psum_alignment: int = 0,
               head_splits: HeadSplits = NO_HEAD_SPLITS, fp8_out: FP8Out = False):
    """The `_C` plan of one layout, from kernel-ready tensors (A, SA, B, SB, out[, index]) with m, n, k > 0:
    SA MN-major and TMA-aligned, SB contiguous, A / B / out TMA operands, out n % 8 == 0.

    Dense: A [m, k], SA [m, kb], B [n, k], SB [ceil(n/128), kb], out [m, n].
    Contiguous: A [M, k], SA [M, kb], B [G, n, k], SB [G, ceil(n/128), kb], out [M, n], index m_indices [M].
    Masked: A [G, m_max, k], SA [G, m_max, kb], B / SB as above, out [G, m_max, n], index masked_m [G].
    Psum: as contiguous, index = the running row counts [G]; expected_m = expected rows per group.
    Batched: A [B, m, k], SA [B, m, kb] at any strides (gathered by the kernel), B / SB as grouped, out [B, m, n];
    expected_m = m.
    Dense with `head_splits` (left, mid, right): out [m, n + n / (left + right) * mid] (its mid columns untouched).
    Dense or contiguous with `fp8_out`: out [m, n] e4m3 (n % 16 == 0) and a sixth tensor, its scales SD [m,
    ceil(n/128)] float32 MN-major (stride(0) == 1), then (contiguous) m_indices; masked with `fp8_out`: out [G, m_max,
    n] e4m3, SD [G, m_max, ceil(n/128)] MN-major and TMA-aligned per group, then masked_m."""
    a, sa, b, sb, out = tensors[:5]
    k = a.shape[-1]
    kb = ceil_div(k, 128)
    num_groups, n = (1, b.shape[0]) if kind == KernelType.NORMAL else b.shape[:2]
    if kind == KernelType.BATCHED:
        shape_m = a.shape[1]
        rows = num_groups * shape_m
        a2, out2 = checks.rows_view(a, "lhs[0] (A)"), checks.rows_view(out, "out")
    elif kind == KernelType.M_GROUPED_MASKED:
        m_max = a.shape[1]
        rows = num_groups * m_max
        a2, out2 = a.view(rows, k), out.view(rows, out.shape[-1])
        sa_inner, sa_outer, sa_stride = m_max, num_groups * kb, sa.stride(2) if kb > 1 else \
            get_tma_aligned_size(m_max, 4)
        shape_m = m_max
    else:
        rows = a.shape[0]
        a2, out2 = a, out
        sa_inner, sa_outer, sa_stride = rows, kb, sa.stride(1) if kb > 1 else get_tma_aligned_size(rows, 4)
        shape_m = rows
    b2 = b.view(num_groups * n, k)
    device_index = a.device.index
    kernel = call_kernel(kind, a, b, num_sms, arch, expected_m, psum_alignment, head_splits, fp8_out)
    cfg = kernel.config
    if cfg.a_box_rows and shape_m > cfg.a_box_rows:  # a forced config of fewer rows: the rest would be stale
        raise ValueError(f"the configuration loads {cfg.a_box_rows} rows of A per stage, the call has {shape_m}")
    out_row_stride = checks.tma_row_stride(out2)
    params = ParamBuffer(PARAMS)
    a_map = ((k, rows), (checks.tma_row_stride(a2),), (128, cfg.a_box_rows or cfg.block_m), 128)
    params.tensor_map("tensor_map_a", 0, 1, *a_map)
    params.tensor_map("tensor_map_b", 2, 1, (k, num_groups * n), (checks.tma_row_stride(b2),), (128, cfg.block_n),
                      128)
    if kind == KernelType.BATCHED:  # SA is gathered through its pointer: this map is never read, A's stands in
        params.tensor_map("tensor_map_sa", 0, 1, *a_map)
    else:
        params.tensor_map("tensor_map_sa", 1, 4, (sa_inner, sa_outer), (sa_stride,), (cfg.block_m, 1), 0,
                          l2_promotion=False)
    # NOTES: each math warpgroup stores its own 64-row stripes of the tile, hence a 64-row box.
    swiglu = isinstance(fp8_out, SwiGLU)
    if swiglu:  # D [rows, n / 2] e4m3: 64 bytes per tile row, 64-byte swizzle (SwiGLUFP8Epilogue)
        params.tensor_map("tensor_map_d", 4, 1, (n // 2, rows), (out_row_stride,), (64, 64), 64)
    elif fp8_out:  # e4m3 bytes in 128-byte column atoms, 128-byte swizzle (FP8RowScaleEpilogue)
        params.tensor_map("tensor_map_d", 4, 1, (n, rows), (out_row_stride,), (128, 64), 128)
    else:
        d_box = cfg.block_n if cfg.swizzle_d_bytes == 0 else cfg.swizzle_d_bytes // 2
        d_cols = out2.shape[-1] if head_splits != NO_HEAD_SPLITS else n
        params.tensor_map("tensor_map_d", 4, 2, (d_cols, rows), (out_row_stride,), (d_box, 64), cfg.swizzle_d_bytes)
    params.pointer("sb", 3)
    params.u32("shape_m", shape_m)
    dense = kind == KernelType.NORMAL  # grouped_layout, num_groups, d, d_row_stride: unused by the dense GEMM
    stores_rows = not dense or cfg.cluster_k_splits > 1  # (but its cluster K splits store D with plain stores)
    index_tensor = 6 if fp8_out else 5  # masked_m / m_indices / the psum ends follow D (and its scales)
    params.pointer("grouped_layout", index_tensor if len(tensors) > index_tensor else None)
    params.u32("num_groups", 0 if dense else num_groups)
    params.pointer("d", 4 if stores_rows else None)
    params.u32("d_row_stride", out_row_stride if stores_rows else 0)
    gathered = kind == KernelType.BATCHED  # sa and its group / row / k strides (elements; 0 along a size-1 dim)
    params.pointer("sa", 1 if gathered else None)
    strides = [stride if size > 1 else 0 for size, stride in zip(sa.shape, sa.stride())] if gathered else [0, 0, 0]
    for name, stride in zip(("sa_group_stride", "sa_row_stride", "sa_k_stride"), strides):
        params.u32(name, stride)
    params.pointer("d_sf", 5 if fp8_out else None)
    if fp8_out:  # SD's M stride (dense, contiguous: any >= m; masked: the TMA-aligned m_max of each group's block)
        masked = kind == KernelType.M_GROUPED_MASKED
        params.u32("d_sf_stride", get_tma_aligned_size(shape_m, 4) if masked else tensors[5].stride(1))
    else:
        params.u32("d_sf_stride", 0)
    launch = params.launch(cfg.num_sms, cfg.num_threads, cfg.smem_size, cfg.cluster_size)
    # TMA operands need 16-byte aligned addresses; SB, the index tensor and a gathered SA are read as plain arrays.
    align_masks = (15, 3 if kind == KernelType.BATCHED else 15, 15, 3, 15, 3, 3)[:len(tensors)]
    return make_plan(kernel.function, device_index, align_masks, [checks.extent_bytes(t) for t in tensors],
                     (4, 5) if fp8_out else (4,), (launch,))


def warmup_kernels(variant: str, shape: dict, ms: Optional[Iterable[int]], num_sms: int, arch: str,
                   psum_alignment: int) -> List[jit.KernelSource]:
    """The kernels calls of one warm-up shape of `variant` load (deep_gemm.warmup). skip_head_mid (n, k, left, mid,
    right): the kernels of the rows in `ms`, or of every row count (the dense GEMM's m enumeration)."""
    if variant == SKIP_HEAD_MID.name:
        return runtime_kernels(shape["n"], shape["k"], num_sms, arch, KernelType.NORMAL, ms,
                               head_splits=(shape["left"], shape["mid"], shape["right"]))
    if variant == DENSE_FP8_OUT.name:
        return runtime_kernels(shape["n"], shape["k"], num_sms, arch, KernelType.NORMAL, ms, fp8_out=True)
    if variant == CONTIGUOUS_FP8_OUT.name:
        return runtime_kernels(shape["n"], shape["k"], num_sms, arch, KernelType.M_GROUPED_CONTIGUOUS, ms,
                               fp8_out=True)
    if variant == MASKED_FP8_OUT.name:
        return runtime_kernels(shape["n"], shape["k"], num_sms, arch, KernelType.M_GROUPED_MASKED, ms,
                               shape["num_groups"], fp8_out=True)
    if variant == CONTIGUOUS_SWIGLU.name:
        return runtime_kernels(shape["n"], shape["k"], num_sms, arch, KernelType.M_GROUPED_CONTIGUOUS, ms,
                               fp8_out=SwiGLU())
    if variant == MASKED_SWIGLU.name:
        return runtime_kernels(shape["n"], shape["k"], num_sms, arch, KernelType.M_GROUPED_MASKED, ms,
                               shape["num_groups"], fp8_out=SwiGLU())
    kind = KernelType(variant)
    groups = shape.get("num_groups", shape.get("num_batches", 1))
    return runtime_kernels(shape["n"], shape["k"], num_sms, arch, kind, ms, groups,
                           psum_alignment if kind == KernelType.M_GROUPED_PSUM else 0)


FAMILY = Family(FAMILY_NAME, HEADER, FUNCTION, PARAMS, ("sm_90a",), (DENSE, CONTIGUOUS, MASKED, PSUM, BMM,
                                                                     SKIP_HEAD_MID, DENSE_FP8_OUT,
                                                                     CONTIGUOUS_FP8_OUT, MASKED_FP8_OUT,
                                                                     CONTIGUOUS_SWIGLU, MASKED_SWIGLU),
                build_plan, clear_kernels, call_kernel, warmup_kernels, warmup_precompile)
