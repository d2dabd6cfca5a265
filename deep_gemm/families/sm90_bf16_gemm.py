"""Kernel family of include/deep_gemm/sm90/bf16_gemm.cuh (BF16 GEMMs: dense D = A B^T or D += A B^T with each operand
K-major or MN-major and a BF16 or FP32 D; the MoE contiguous, psum and masked layouts with BF16 D; the batched forms
of the einsums: per-head GEMMs and K splits of a sum over batches): validation of a call's arguments into a layout,
the kernel configuration, and the `_C` plan.

An operand's layout comes from its strides, as in DeepGEMM: A [m, k] with unit stride along k is K-major, with unit
stride along m MN-major (a transposed view: the nn / tn / tt forms only transpose views); likewise B [n, k]."""
from dataclasses import dataclass, field
from typing import Dict, Optional, Tuple

import torch

from .. import jit, log
from ..device import get_device_arch, get_num_sms
from ..envs import read_env
from ..heuristics.common import GemmConfig, KernelType, ceil_div, get_forced_config
from ..heuristics.sm90_bf16 import (BLOCK_K, get_bf16_cluster_sum_config, get_bf16_config, get_bf16_ksplit_config,
                                    sums_in_clusters)
from ..jit.runtime import ensure_context
from . import checks
from .fp8_gemm_1d2d_args import GEMM_TYPES
from .plan import POINTER, TENSOR_MAP, U32, ParamBuffer, launch, make_plan, noop_plan
from .variant import INT, TENSOR, Family, Variant

HEADER = "deep_gemm/sm90/bf16_gemm.cuh"
# NOTES: DeepGEMM's tests profile kernels by the substring "gemm_"; the name keeps it.
FUNCTION = "deep_gemm::sm90::bf16_gemm_impl"
# The batched K splits run the same kernel under DeepGEMM's name for its `bmk,bnk->mn` kernel (profile filters).
FUNCTION_K_SPLITS = "deep_gemm::sm90::bmn_bnk_mn_gemm_impl"
# The kernel's parameters, in its signature's order.
PARAMS = (("tensor_map_a", TENSOR_MAP), ("tensor_map_b", TENSOR_MAP), ("tensor_map_d", TENSOR_MAP),
          ("shape_m", U32), ("shape_k", U32), ("num_k_blocks", U32), ("grouped_layout", POINTER), ("num_groups", U32),
          ("d", POINTER), ("d_row_stride", U32))


@dataclass(frozen=True)
class KernelKind:
    """What selects an instantiation besides the shape: the GEMM type, the operands' layouts and D's type and mode."""
    mn_major_a: bool
    mn_major_b: bool
    out_fp32: bool
    accumulate: bool
    gemm_type: KernelType = KernelType.NORMAL
    psum_alignment: int = 0
    # K splits of a sum over batches: batched, into partial sums (else one GEMM per head); dense, cut over the
    # clusters of a launch with cluster K splits, into d itself (the sum in one kernel).
    batch_splits_k: bool = False

    @property
    def out_bytes(self) -> int:
        return 4 if self.out_fp32 else 2


def kernel_source(n: int, config: GemmConfig, kind: KernelKind) -> jit.KernelSource:
    """The template instantiation for (n, config, kind); m, K and the groups are run-time values."""
    named = dict(kGemmType=GEMM_TYPES[kind.gemm_type], SHAPE_N=n, BLOCK_M=config.block_m, BLOCK_N=config.block_n,
                 kNumStages=config.num_stages, kNumMulticast=config.num_multicast,
                 kMulticastOnA=config.multicast_on_a, kSwizzleDBytes=config.swizzle_d_bytes,
                 kSmemSize=config.smem_size, kPsumAlignment=kind.psum_alignment, kMNMajorA=kind.mn_major_a,
                 kMNMajorB=kind.mn_major_b, kOutputFP32=kind.out_fp32, kAccumulate=kind.accumulate,
                 kBatchSplitsK=kind.batch_splits_k, kClusterSplitsK=config.cluster_k_splits,
                 kLoadRowsA=config.a_box_rows or config.block_m)
    return jit.KernelSource(name="sm90_bf16_gemm", header=HEADER,
                            function=FUNCTION_K_SPLITS if kind.batch_splits_k else FUNCTION, config=named)


def heuristic_k(m: int, k: int, kind: KernelKind) -> int:
    """The k the configuration depends on: a dense call's of m <= 128 rows (its tile and cluster K splits come from
    the decode model), else none (0)."""
    return k if kind.gemm_type == KernelType.NORMAL and m <= 128 else 0


def kernel_choice(m: int, n: int, num_sms: int, kind: KernelKind, groups: int = 1, k: int = 0) -> GemmConfig:
    """The configuration a call loads (m: the rows of a dense or contiguous call, the expected rows per group of a
    masked or psum one, the rows of one batch); its source is `kernel_source(n, config, kind)`. `groups`: the groups
    of a masked or psum call, the heads of a batched one or its K splits; `k`: see heuristic_k."""
    if kind.batch_splits_k:
        forced = get_forced_config()
        if kind.gemm_type == KernelType.NORMAL:  # the sum in one launch, over clusters (k_split_count 0)
            if forced is not None and forced.cluster_k_splits < 2:
                raise ValueError("the sum over batches in clusters needs a forced configuration with "
                                 "cluster_k_splits > 1")
            return forced or get_bf16_cluster_sum_config(m, n, num_sms)
        if forced is not None and forced.cluster_k_splits > 1:
            raise ValueError("cluster K splits sum over batches only in clusters (einsum bmk,bnk->mn into a float32 "
                             "row-major d)")
        return forced or get_bf16_ksplit_config(m, n, num_sms, groups)
    return get_forced_config() or get_bf16_config(m, n, num_sms, kind.mn_major_b, kind.out_bytes, kind.gemm_type,
                                                  groups, heuristic_k(m, k, kind), kind.mn_major_a)


@dataclass
class _Kernel:
    config: GemmConfig
    function: object  # CUfunction in the device's primary context


_kernels: Dict[Tuple, _Kernel] = {}


def clear_kernels() -> None:
    _kernels.clear()


def _kernel(m: int, n: int, kind: KernelKind, num_sms: int, device_index: int, arch: str, groups: int = 1,
            k: int = 0) -> _Kernel:
    forced = get_forced_config()
    k = heuristic_k(m, k, kind)
    key = (m, n, k, kind, groups, num_sms, device_index, arch, forced)
    kernel = _kernels.get(key)
    if kernel is None:
        config = kernel_choice(m, n, num_sms, kind, groups, k)
        log.apply_env(read_env())
        log.configs.debug("bf16 m=%d n=%d %s: %s", m, n, kind, config)
        ensure_context(device_index)
        loaded = jit.load(kernel_source(n, config, kind), arch, config.num_threads, config.smem_size)
        kernel = _kernels[key] = _Kernel(config, loaded.function(device_index))
    return kernel


@dataclass(frozen=True)
class Operands:
    """Geometry of one call's operands, tensors numbered (A, B, D[, grouped_layout]) as `_C` reads them: A's and B's
    outer stride (elements; the row stride of a K-major operand, the K stride of an MN-major one), D's row stride,
    the rows of A / D (`rows`: m, the stacked rows of every expert, or G * m_max), the rows of B's 2-D view
    (`b_rows`: n or k, G * n or G * k for grouped B, K- or MN-major), the groups, and `m`: the kernel's shape_m
    (m_max for masked) / `hint_m` its heuristic's."""
    m: int
    n: int
    k: int
    kind: KernelKind
    a_stride: int
    b_stride: int
    d_stride: int
    rows: int
    b_rows: int
    num_groups: int = 1
    hint_m: int = 0
    a_cols: int = 0           # batched: the columns of A's 2-D view (heads x k; else k)
    d_outer_stride: int = 0   # batched: D's stride (elements) between heads / splits
    num_k_blocks: int = 0     # the kernel's K walk (0: ceil(k / 64); K splits: every batch's blocks)


def build_plan(ops: Operands, extents, device_index: int, num_sms: int, arch: str):
    """The `_C` plan of D (+)= A B^T: one launch."""
    groups_for_heuristic = ops.num_groups if ops.kind.gemm_type != KernelType.M_GROUPED_CONTIGUOUS else 1
    batched = ops.kind.gemm_type == KernelType.BATCHED or ops.kind.batch_splits_k  # D as [G, m, n]
    kernel = _kernel(ops.hint_m or ops.m, ops.n, ops.kind, num_sms, device_index, arch, groups_for_heuristic, ops.k)
    cfg, kind = kernel.config, ops.kind
    if cfg.a_box_rows and ops.rows > cfg.a_box_rows:  # a forced config of fewer rows: the rest would be stale
        raise ValueError(f"the configuration loads {cfg.a_box_rows} rows of A per stage, the call has {ops.rows}")
    params = ParamBuffer(PARAMS)
    # A: [rows, k] K-major, or [k, rows] MN-major; B: [b_rows, k] K-major, or [b_rows, n] MN-major (b_rows: G x k
    # for grouped B). An MN-major operand loads 64 x 64 boxes (block / 64 per stage), a K-major one 64 x block.
    if kind.mn_major_a:
        params.tensor_map("tensor_map_a", 0, 2, (ops.rows, ops.k), (ops.a_stride,), (64, BLOCK_K), 128)
    else:
        params.tensor_map("tensor_map_a", 0, 2, (ops.a_cols or ops.k, ops.rows), (ops.a_stride,),
                          (BLOCK_K, cfg.a_box_rows or cfg.block_m), 128)
    if kind.mn_major_b:
        params.tensor_map("tensor_map_b", 1, 2, (ops.n, ops.b_rows), (ops.b_stride,), (64, BLOCK_K), 128)
    else:
        params.tensor_map("tensor_map_b", 1, 2, (ops.k, ops.b_rows), (ops.b_stride,), (BLOCK_K, cfg.block_n), 128)
    out_bytes = kind.out_bytes
    # D [1, rows, n], or batched [G, m, n] at any head / split stride.
    d_dims = (ops.n, ops.m, ops.num_groups) if batched else (ops.n, ops.rows, 1)
    d_outer = ops.d_outer_stride if batched else ops.rows * ops.d_stride
    params.tensor_map("tensor_map_d", 2, out_bytes, d_dims, (ops.d_stride, d_outer),
                      (cfg.swizzle_d_bytes // out_bytes, 64, 1), cfg.swizzle_d_bytes)
    params.u32("shape_m", ops.m)
    params.u32("shape_k", ops.k)
    params.u32("num_k_blocks", ops.num_k_blocks or ceil_div(ops.k, BLOCK_K))
    grouped = kind.gemm_type not in (KernelType.NORMAL, KernelType.BATCHED)
    params.pointer("grouped_layout", 3 if grouped else None)
    params.u32("num_groups", ops.num_groups)
    params.pointer("d", 2)
    params.u32("d_row_stride", ops.d_stride)
    launches = [params.launch(cfg.num_sms, cfg.num_threads, cfg.smem_size, cfg.cluster_size)]
    num_tensors = 4 if grouped else 3
    return make_plan(kernel.function, device_index, (15, 15, 15, 3)[:num_tensors], extents, (2,), launches)


# ---- Validation ----

_NAMES = ("a", "b", "d")


def operand_layout(t: torch.Tensor, name: str, rows_name: str) -> Tuple[bool, int]:
    """(MN-major, outer stride in elements) of a 2-D BF16 operand [rows, k]: K-major when its stride along k is 1
    (the outer stride is then the row stride), else MN-major when its stride along the rows is 1 (the outer stride is
    the K stride). TMA needs the outer stride to be a multiple of 16 bytes."""
    rows, k = t.shape
    if k <= 1 or t.stride(1) == 1:
        mn_major, stride, extent = False, (t.stride(0) if rows > 1 else ceil_div(max(k, 1), 8) * 8), k
    elif rows <= 1 or t.stride(0) == 1:
        mn_major, stride, extent = True, (t.stride(1) if k > 1 else ceil_div(max(rows, 1), 8) * 8), rows
    else:
        raise ValueError(f"{name} must have unit stride along k (K-major) or along {rows_name} (MN-major), got "
                         f"shape {tuple(t.shape)} and strides {t.stride()}")
    if stride % 8 != 0 or stride < extent:
        what = "row" if not mn_major else "k"
        raise ValueError(f"{name}'s {what} stride is {stride} elements = {stride * 2} bytes; TMA needs a multiple of "
                         f"16 bytes at least as long as the {extent}-element {'row' if not mn_major else 'column'} "
                         f"(e.g. allocate it padded to 8 elements and pass a view)")
    return mn_major, stride


def _grouped_b_layout(b: torch.Tensor) -> Tuple[bool, int]:
    """(MN-major, outer stride) of a grouped B [G, n, k] whose groups are stacked uniformly: K-major ([G * n, k]
    rows) or MN-major ([G * k, n] rows, DeepGEMM's nn form given as its transposed view)."""
    g, n, k = b.shape
    if k <= 1 or b.stride(2) == 1:
        flat = checks.rows_view(b, "b")
    elif n <= 1 or b.stride(1) == 1:
        flat = checks.rows_view(b.transpose(1, 2), "b").t()
    else:
        raise ValueError(f"b must have unit stride along k (K-major) or along n (MN-major), got shape "
                         f"{tuple(b.shape)} and strides {b.stride()}")
    return operand_layout(flat, "b", "n")


@dataclass
class BF16Layout:
    """What the checks concluded for one layout of a BF16 GEMM call; plans are made once per geometry."""
    nothing_to_do: bool  # m or n (or the groups) is 0
    zero_k: bool         # k is 0: D = 0 (or D unchanged when accumulating)
    device: torch.device
    m: int               # the kernel's shape_m: rows (dense, contiguous, psum) or m_max (masked)
    n: int
    k: int
    kind: KernelKind
    extents: Tuple[int, ...]
    num_sms: int
    arch: str
    num_groups: int = 1
    rows: int = 0        # rows of A / D (0: m)
    hint_m: int = 0      # the heuristic's m (masked, psum: expected rows per group; 0: m)
    batches: int = 0     # batched K splits: the batches summed over
    plans: dict = field(default_factory=dict)
    family: Optional[Family] = None  # bound by the runtime for a layout that launches

    @property
    def needs_kernel(self) -> bool:
        return not (self.nothing_to_do or self.zero_k)

    @property
    def grouped(self) -> bool:
        """Whether a grouped_layout / masked_m tensor follows A, B and D."""
        return self.kind.gemm_type not in (KernelType.NORMAL, KernelType.BATCHED)

    def run(self, a, b, d, *rest):
        """The per-call part: pointer checks, the launch. Returns the plan (every call of a checked layout launches
        as it is), or None for k = 0, whose zero fill `_C` cannot replay."""
        tensors = (a, b, d, rest[0]) if self.grouped else (a, b, d)
        outputs = (2,)
        if self.nothing_to_do:
            return noop_plan(self.device.index, len(tensors), self.extents, outputs)
        if self.zero_k:
            if self.kind.gemm_type == KernelType.M_GROUPED_MASKED:
                checks.zero_masked_rows(d, rest[0])
            elif not self.kind.accumulate:
                d.zero_()
            return None
        ptrs = [t.data_ptr() for t in tensors]
        for name, ptr in zip(_NAMES, ptrs):
            if ptr % 16:
                raise ValueError(f"{name}'s data pointer must be 16-byte aligned, got offset {ptr % 16}")
        checks.check_no_overlap_ptrs("d", ptrs[2], self.extents[2],
                                     [(("a", "b", "d", "grouped_layout")[i], ptrs[i], self.extents[i])
                                      for i in range(len(tensors)) if i != 2])
        geometry = checks.tensor_geometry(tensors)
        plan = self.plans.get(geometry)
        if plan is None:
            plan = self.plans[geometry] = self.family.build_plan(self._operands(a, b, d), self.extents,
                                                                 self.device.index, self.num_sms, self.arch)
        launch(plan, tuple(ptrs))
        return plan

    def load_kernel(self, a, b, d, *rest) -> None:
        """Compile mode (deep_gemm.set_compile_mode): compile or load this layout's kernel; launch nothing."""
        if self.needs_kernel:
            self.family.load(self.hint_m or self.m, self.n, self.kind, self.num_sms, self.device.index, self.arch,
                             self._heuristic_groups(), self.k)

    def _heuristic_groups(self) -> int:
        return 1 if self.kind.gemm_type in (KernelType.NORMAL, KernelType.M_GROUPED_CONTIGUOUS) else self.num_groups

    def _operands(self, a, b, d) -> Operands:
        rows = self.rows or self.m
        if self.kind.gemm_type == KernelType.BATCHED or self.kind.batch_splits_k:
            return self._batched_operands(a, b, d)
        if self.grouped:
            _, a_stride = operand_layout(checks.rows_view(a, "a"), "a", "m")
            _, b_stride = _grouped_b_layout(b)
            d2 = checks.rows_view(d, "d")
            b_rows = self.num_groups * (self.k if self.kind.mn_major_b else self.n)
        else:
            _, a_stride = operand_layout(a, "a", "m")
            _, b_stride = operand_layout(b, "b", "n")
            d2, b_rows = d, (self.k if self.kind.mn_major_b else self.n)
        d_stride = d2.stride(0) if rows > 1 else ceil_div(self.n, 8) * 8
        return Operands(self.m, self.n, self.k, self.kind, a_stride, b_stride, d_stride, rows, b_rows,
                        self.num_groups, self.hint_m)

    def _batched_operands(self, a, b, d) -> Operands:
        """Heads: A [m, heads, k] as the 2-D [m, heads * k] view, B [heads, n, k] stacked like grouped B, D [m,
        heads, n]. K splits: A [S, m, k] / B [S, n, k] as their stacked rows, D the partial sums [splits, m, n]."""
        if self.kind.batch_splits_k:
            a2, b2 = checks.rows_view(a, "a"), checks.rows_view(b, "b")
            # The sum in clusters writes d [1, m, n] at its own row stride (one row: any 16-byte multiple will do).
            in_clusters = self.kind.gemm_type == KernelType.NORMAL
            d_stride = d.stride(1) if self.m > 1 or not in_clusters else ceil_div(self.n, 4) * 4
            return Operands(self.m, self.n, self.k, self.kind, checks.tma_row_stride(a2), checks.tma_row_stride(b2),
                            d_stride, a2.shape[0], b2.shape[0], self.num_groups, a_cols=self.k,
                            d_outer_stride=self.m * d_stride if in_clusters else d.stride(0),
                            num_k_blocks=self.batches * ceil_div(self.k, BLOCK_K))
        heads = self.num_groups
        a_stride = a.stride(0) if self.m > 1 else ceil_div(heads * self.k, 8) * 8
        _, b_stride = _grouped_b_layout(b)
        b_rows = heads * (self.k if self.kind.mn_major_b else self.n)
        d_stride = d.stride(0) if self.m > 1 else ceil_div(heads * self.n, 8) * 8
        return Operands(self.m, self.n, self.k, self.kind, a_stride, b_stride, d_stride, self.m, b_rows, heads,
                        a_cols=heads * self.k, d_outer_stride=d.stride(1) if heads > 1 else self.n)


def _check_d(d, n: int, name: str = "d") -> None:
    if n > 1 and d.stride(-1) != 1:
        raise ValueError(f"{name} must be row-major (stride(-1) == 1), got strides {d.stride()}")
    per_chunk = 16 // d.element_size()
    if n % per_chunk != 0:
        raise ValueError(f"n = {n}: a {d.dtype} {name} needs n to be a multiple of {per_chunk} (TMA writes whole "
                         f"16-byte chunks of a row)")
    if d.shape[-2] > 1 and d.stride(-2) % per_chunk != 0:
        raise ValueError(f"{name}'s row stride is {d.stride(-2)} elements; TMA needs a multiple of 16 bytes")


def _layout(device, m, n, k, kind, tensors, nothing, **extra) -> BF16Layout:
    return BF16Layout(nothing, not nothing and k == 0, device, m, n, k, kind,
                      tuple(checks.extent_bytes(t) for t in tensors), get_num_sms(device.index),
                      get_device_arch(device.index), **extra)


def normalise(a, b, d, accumulate) -> BF16Layout:
    """Every layout check of `bf16_gemm_nt` (D = A B^T, or D += A B^T with `accumulate`), errors naming the
    argument. The public wrapper (deep_gemm/ops/bf16.py) turns DeepGEMM's `c` into `accumulate`."""
    checks.check_tensor(a, "a", torch.bfloat16, 2)
    checks.check_tensor(b, "b", torch.bfloat16, 2)
    checks.check_tensor(d, "d", (torch.bfloat16, torch.float32), 2)
    if accumulate not in (0, 1):
        raise ValueError(f"accumulate must be 0 or 1, got {accumulate}")
    m, k = a.shape
    n = b.shape[0]
    if b.shape[1] != k:
        raise ValueError(f"b must have shape (n, {k}) to match a's k, got {tuple(b.shape)}")
    checks.check_shape(d, "d", (m, n), "m x n")
    tensors = (a, b, d)
    device = checks.check_same_cuda_device(list(zip(_NAMES, tensors)))
    checks.check_no_overlap(d, "d", list(zip(_NAMES[:2], tensors[:2])))
    nothing = m == 0 or n == 0
    mn_major_a = mn_major_b = False
    if not nothing and k > 0:
        mn_major_a, _ = operand_layout(a, "a", "m")
        mn_major_b, _ = operand_layout(b, "b", "n")
        _check_d(d, n)
    kind = KernelKind(mn_major_a, mn_major_b, d.dtype == torch.float32, bool(accumulate))
    return _layout(device, m, n, k, kind, tensors, nothing)


def _grouped_operands(a, b, d, a_dim: int):
    checks.check_tensor(a, "a", torch.bfloat16, a_dim)
    checks.check_tensor(b, "b", torch.bfloat16, 3)
    checks.check_tensor(d, "d", torch.bfloat16, a_dim)
    num_groups, n, k = b.shape
    if a.shape[-1] != k:
        raise ValueError(f"b must have shape (G, n, {k}) to match a's k, got {tuple(b.shape)}")
    return num_groups, n, k


def _grouped_kind(a, b, d, index, index_name: str, rows: int, n: int, k: int, num_groups: int, gemm_type,
                  psum_alignment: int = 0):
    """The checks every grouped call shares once its shapes are known: one CUDA device, d overlapping no input, and
    for a call that launches, the operands' layouts. Returns (device, nothing to do, KernelKind)."""
    named = list(zip(("a", "b", "d", index_name), (a, b, d, index)))
    device = checks.check_same_cuda_device(named)
    checks.check_no_overlap(d, "d", [named[0], named[1], named[3]])
    nothing = rows == 0 or n == 0 or num_groups == 0
    mn_major_b = False if nothing or k == 0 else _check_grouped_launch(a, b, d, n, k)
    return device, nothing, KernelKind(False, mn_major_b, False, False, gemm_type, psum_alignment)


def _check_grouped_launch(a, b, d, n: int, k: int) -> bool:
    """Layout checks of a grouped launch; returns whether B is MN-major."""
    operand_layout(checks.rows_view(a, "a"), "a", "m")
    if checks.rows_view(a, "a").stride(-1) != 1 and k > 1:
        raise ValueError(f"a must be K-major (stride(-1) == 1) in the grouped GEMMs, got strides {a.stride()}")
    mn_major_b, _ = _grouped_b_layout(b)
    if mn_major_b and k % BLOCK_K != 0:
        raise ValueError(f"k = {k}: an MN-major b (the nn form) stacks its groups along k, which needs k % "
                         f"{BLOCK_K} == 0 (as DeepGEMM on SM90)")
    _check_d(checks.rows_view(d, "d"), n)
    return mn_major_b


def normalise_contiguous(a, b, d, grouped_layout, use_psum_layout, expected_m, alignment) -> BF16Layout:
    """Every layout check of `m_grouped_bf16_gemm_nt_contiguous`: per-row group ids (grouped_layout [M] int32, -1 =
    padding; each group's rows in segments aligned to 128) or, with `use_psum_layout`, DeepGEMM's psum layout."""
    if use_psum_layout not in (0, 1):
        raise ValueError(f"use_psum_layout must be a bool, got {use_psum_layout}")
    if use_psum_layout:
        return normalise_psum(a, b, d, grouped_layout, expected_m, alignment)
    if expected_m:
        raise ValueError("expected_m_for_psum_layout is only taken with use_psum_layout=True (as DeepGEMM)")
    num_groups, n, k = _grouped_operands(a, b, d, 2)
    m = a.shape[0]
    checks.check_shape(d, "d", (m, n), "M x n")
    checks.check_index_tensor(grouped_layout, "grouped_layout", (m,), "M (one group id per row)")
    device, nothing, kind = _grouped_kind(a, b, d, grouped_layout, "grouped_layout", m, n, k, num_groups,
                                          KernelType.M_GROUPED_CONTIGUOUS)
    return _layout(device, m, n, k, kind, (a, b, d, grouped_layout), nothing, num_groups=num_groups)


def normalise_psum(a, b, d, grouped_layout, expected_m, alignment) -> BF16Layout:
    """Every layout check of `m_grouped_bf16_gemm_nt_contiguous(..., use_psum_layout=True)`: grouped_layout [G] int32
    holds the running row count at the end of each group; group g's rows are [align(end[g - 1], alignment),
    end[g])."""
    num_groups, n, k = _grouped_operands(a, b, d, 2)
    m = a.shape[0]
    checks.check_shape(d, "d", (m, n), "M x n")
    checks.check_index_tensor(grouped_layout, "grouped_layout", (num_groups,), "G (psum layout)")
    expected_m = checks.host_int(expected_m, "expected_m_for_psum_layout")
    if checks.host_int(alignment, "the mk alignment") == 0:
        raise ValueError("the mk alignment for the contiguous layout must be > 0")
    if k == 0:
        raise ValueError("a: the psum layout needs k > 0 (as DeepGEMM)")
    device, nothing, kind = _grouped_kind(a, b, d, grouped_layout, "grouped_layout", m, n, k, num_groups,
                                          KernelType.M_GROUPED_PSUM, int(alignment))
    hint = min(max(expected_m or ceil_div(m, max(num_groups, 1)), 1), max(m, 1))
    return _layout(device, m, n, k, kind, (a, b, d, grouped_layout), nothing, num_groups=num_groups, hint_m=hint)


def normalise_masked(a, b, d, masked_m, expected_m) -> BF16Layout:
    """Every layout check of `m_grouped_bf16_gemm_nt_masked`: a [G, m_max, k], b [G, n, k], d [G, m_max, n]; rows
    < masked_m[g] of group g are computed, the others left untouched."""
    num_groups, n, k = _grouped_operands(a, b, d, 3)
    g_a, m_max, _ = a.shape
    if g_a != num_groups:
        raise ValueError(f"a has {g_a} groups but b has {num_groups}")
    checks.check_shape(d, "d", (num_groups, m_max, n), "G x m_max x n")
    checks.check_index_tensor(masked_m, "masked_m", (num_groups,), "G")
    expected_m = checks.host_int(expected_m, "expected_m")
    device, nothing, kind = _grouped_kind(a, b, d, masked_m, "masked_m", m_max, n, k, num_groups,
                                          KernelType.M_GROUPED_MASKED)
    hint = min(max(expected_m, 1), max(m_max, 1))
    return _layout(device, m_max, n, k, kind, (a, b, d, masked_m), nothing, num_groups=num_groups,
                   rows=num_groups * m_max, hint_m=hint)


def _batched_operands(a, b, d, d_dtype, d_shape, what: str) -> torch.device:
    """The checks both batched forms share, once a's and b's outer dimensions agree: dtypes, d's shape (`d_shape`,
    with `what` naming its dimensions), one CUDA device, d overlapping neither input. Returns the device."""
    checks.check_tensor(d, "d", d_dtype, 3)
    checks.check_shape(d, "d", d_shape, what)
    named = list(zip(_NAMES, (a, b, d)))
    device = checks.check_same_cuda_device(named)
    checks.check_no_overlap(d, "d", named[:2])
    return device


def _batched_inputs(a, b, what: str) -> None:
    """a [X, *, k] and b [X, n, k] BF16 with the same X (`what`: its name) and k."""
    checks.check_tensor(a, "a", torch.bfloat16, 3)
    checks.check_tensor(b, "b", torch.bfloat16, 3)
    if b.shape[0] != a.shape[0 if what == "batches" else 1] or b.shape[2] != a.shape[2]:
        x = a.shape[0 if what == "batches" else 1]
        raise ValueError(f"b must have shape ({x}, n, {a.shape[2]}) to match a's {what} and k, got {tuple(b.shape)}")


def normalise_heads(a, b, d) -> BF16Layout:
    """Every layout check of the per-head batched GEMM (einsum `bhr,hdr->bhd` and `bhd,hdr->bhr`): d[m, h, n] =
    a[m, h, k] @ b[h, n, k]^T for every head h. a's heads lie side by side in its rows (stride(1) == k, stride(2) ==
    1); b [h, n, k] K-major or MN-major with its heads stacked uniformly; d [m, h, n] with stride(2) == 1, BF16."""
    _batched_inputs(a, b, "heads")
    m, heads, k = a.shape
    n = b.shape[1]
    device = _batched_operands(a, b, d, torch.bfloat16, (m, heads, n), "m x heads x n")
    nothing = m == 0 or n == 0 or heads == 0
    mn_major_b = False
    if not nothing and k > 0:
        if k % BLOCK_K != 0:
            raise ValueError(f"k = {k}: the per-head GEMMs read each head's k columns in whole {BLOCK_K}-wide blocks, "
                             f"so k must be a multiple of {BLOCK_K}")
        if (k > 1 and a.stride(2) != 1) or (heads > 1 and a.stride(1) != k):
            raise ValueError(f"a must hold each row's heads side by side (stride(2) == 1, stride(1) == k = {k}), "
                             f"got strides {a.stride()}; pass a.contiguous()")
        if m > 1 and (a.stride(0) % 8 or a.stride(0) < heads * k):
            raise ValueError(f"a's row stride must be a multiple of 8 elements covering its {heads} x {k} values, "
                             f"got {a.stride(0)}")
        mn_major_b, _ = _grouped_b_layout(b)
        if n > 1 and d.stride(2) != 1:
            raise ValueError(f"d must have unit stride along n, got strides {d.stride()}")
        if n % 8:
            raise ValueError(f"n = {n}: a bfloat16 d needs n to be a multiple of 8 (TMA writes whole 16-byte chunks)")
        if (m > 1 and d.stride(0) % 8) or (heads > 1 and d.stride(1) % 8):
            raise ValueError(f"d's strides must be multiples of 8 elements (16 bytes) for TMA, got {d.stride()}")
    kind = KernelKind(False, mn_major_b, False, False, KernelType.BATCHED)
    return _layout(device, m, n, k, kind, (a, b, d), nothing, num_groups=heads)


def normalise_k_splits(a, b, d, in_clusters: bool = False, accumulate: bool = False) -> BF16Layout:
    """Every layout check of the K-split sum over batches (einsum `bmk,bnk->mn`): d[g] = the FP32 sum of
    a[s] @ b[s]^T over split g of the walk over (s, K block) in order (contiguous ranges, the first ones a block
    longer), for d [splits, m, n] FP32 contiguous; a [S, m, k], b [S, n, k] K-major with their batches stacked
    uniformly. Every split gets at least one K block (splits <= the blocks); the caller adds the splits up.
    `in_clusters`: d [1, m, n] receives the whole sum from one launch whose clusters cut the walk (added to d with
    `accumulate`); a forced configuration only, so far (kernel_choice)."""
    _batched_inputs(a, b, "batches")
    batches, m, k = a.shape
    n = b.shape[1]
    checks.check_tensor(d, "d", torch.float32, 3)
    splits = d.shape[0]
    device = _batched_operands(a, b, d, torch.float32, (splits, m, n), "splits x m x n")
    nothing = m == 0 or n == 0
    if not nothing and batches * k > 0:
        total = batches * ceil_div(k, BLOCK_K)
        if not 1 <= splits <= total:
            raise ValueError(f"d has {splits} splits for {total} K blocks: every split needs at least one "
                             f"(use k_split_count)")
        for t, name in ((a, "a"), (b, "b")):
            operand_layout(checks.rows_view(t, name), name, "rows")
            if t.shape[1] > 1 and t.stride(2) != 1:
                raise ValueError(f"{name} must be K-major (stride(2) == 1), got strides {t.stride()}")
        if in_clusters:  # d itself: row-major at any 16-byte row stride
            _check_d(d, n)
        else:
            if not d.is_contiguous():
                raise ValueError("d (the split partial sums) must be contiguous")
            if n % 4:
                raise ValueError(f"n = {n}: a float32 d needs n to be a multiple of 4 (TMA writes whole 16-byte "
                                 f"chunks)")
    if in_clusters and splits != 1:
        raise ValueError(f"d must be [1, m, n] for the sum in clusters, got {splits} splits")
    kind = KernelKind(False, False, True, accumulate, KernelType.NORMAL if in_clusters else KernelType.BATCHED,
                      batch_splits_k=True)
    # No batches sums nothing: like k = 0, the partial sums are zeros (or d is left as it is, accumulating).
    return _layout(device, m, n, k if batches else 0, kind, (a, b, d), nothing, num_groups=max(splits, 1),
                   batches=batches, rows=batches * m)


def k_split_count(m: int, n: int, batches: int, k: int, device_index: int, clusters_fit: bool = False) -> int:
    """How the einsum variant sums over batches for this shape: 0 = in one launch over clusters (k_splits 2 / 3;
    sums_in_clusters, where `clusters_fit`: d is FP32 row-major, written or accumulated in place), else the number
    of K splits into partial sums: enough for one wave of tiles over the SMs, each split at least one K block."""
    total = batches * ceil_div(k, BLOCK_K)
    if min(m, n, total) <= 0:
        return 1
    if clusters_fit and sums_in_clusters(m, n, batches, k, get_num_sms(device_index)):
        return 0
    config = kernel_choice(m, n, get_num_sms(device_index), KernelKind(False, False, True, False, KernelType.BATCHED,
                                                                       batch_splits_k=True), 1)
    tiles = ceil_div(m, config.block_m) * ceil_div(n, config.block_n)
    return max(1, min(get_num_sms(device_index) // tiles, total))


# The dense forms a warm-up shape compiles: a layer's forward (nt, BF16 d), its input gradient (nn: B MN-major) and its
# weight gradient (tn: both MN-major, FP32 d accumulated), as DeepGEMM's test_bf16 runs them.
WARMUP_DENSE_KINDS = (KernelKind(False, False, False, False), KernelKind(False, True, False, False),
                      KernelKind(True, True, True, True))


def warmup_kernels(variant: str, shape: dict, ms, num_sms: int, arch: str, psum_alignment: int):
    """The kernels calls of one warm-up shape load: dense (m, n, k): WARMUP_DENSE_KINDS (k: a dense call's tile and
    cluster K splits at m <= 128 depend on it); contiguous (m = all rows, n):
    K-major B with per-row group ids; masked (m = expected rows per group, n, num_groups): K-major B; einsum (m, n,
    heads): the per-head GEMMs of m rows and n columns with each head's B K-major (bhr,hdr->bhd) and MN-major
    (bhd,hdr->bhr), and an [m, n] sum over batches (bmk,bnk->mn) both ways: K splits (the split count only sizes
    the grid) and in clusters, written and accumulated (which one runs depends on the batches and k)."""
    m, n = shape["m"], shape["n"]
    if variant == "einsum":
        heads = [KernelKind(False, mn_major_b, False, False, KernelType.BATCHED) for mn_major_b in (False, True)]
        splits = KernelKind(False, False, True, False, KernelType.BATCHED, batch_splits_k=True)
        clusters = [KernelKind(False, False, True, acc, KernelType.NORMAL, batch_splits_k=True) for acc in (False, True)]
        return [kernel_source(n, kernel_choice(m, n, num_sms, kind, shape["heads"]), kind) for kind in heads] + \
            [kernel_source(n, kernel_choice(m, n, num_sms, splits, 1), splits)] + \
            [kernel_source(n, kernel_choice(m, n, num_sms, kind), kind) for kind in clusters]
    if variant == "bf16":
        kinds, groups = WARMUP_DENSE_KINDS, 1
    else:
        gemm_type = KernelType.M_GROUPED_CONTIGUOUS if variant == "bf16_contiguous" else KernelType.M_GROUPED_MASKED
        kinds = (KernelKind(False, False, False, False, gemm_type),)
        groups = shape.get("num_groups", 1) if gemm_type == KernelType.M_GROUPED_MASKED else 1
    return [kernel_source(n, kernel_choice(m, n, num_sms, kind, groups, shape.get("k", 0)), kind) for kind in kinds]


BF16 = Variant("bf16", "bf16_gemm_nt", (TENSOR, TENSOR, TENSOR, INT), normalise, warmup_fields=("m", "n", "k"))
# One variant for both contiguous layouts, as DeepGEMM's one name with its use_psum_layout flag: (a, b, d,
# grouped_layout, use_psum_layout, expected_m_for_psum_layout, the mk alignment).
BF16_CONTIGUOUS = Variant("bf16_contiguous", "m_grouped_bf16_gemm_nt_contiguous",
                          (TENSOR, TENSOR, TENSOR, TENSOR, INT, INT, INT), normalise_contiguous, warmup_fields=("m", "n"))
BF16_MASKED = Variant("bf16_masked", "m_grouped_bf16_gemm_nt_masked", (TENSOR, TENSOR, TENSOR, TENSOR, INT),
                      normalise_masked, warmup_fields=("m", "n", "num_groups"))
def normalise_einsum(a, b, d, k_splits) -> BF16Layout:
    """The einsums' batched forms (deep_gemm/ops/einsum.py): `k_splits` 0 is one GEMM per head
    (`normalise_heads`), 1 the K splits of a sum over batches into partial sums (`normalise_k_splits`), 2 / 3 that
    sum in one launch over clusters into d [1, m, n] (3: added to d)."""
    if k_splits not in (0, 1, 2, 3):
        raise ValueError(f"k_splits must be 0 (per-head GEMMs), 1 (K splits) or 2 / 3 (in clusters), got {k_splits}")
    if k_splits >= 2:
        return normalise_k_splits(a, b, d, in_clusters=True, accumulate=k_splits == 3)
    return normalise_k_splits(a, b, d) if k_splits else normalise_heads(a, b, d)


# The einsums' batched forms (a, b, d, k_splits): one GEMM per head, or the K splits of a sum over batches.
EINSUM = Variant("einsum", "einsum", (TENSOR, TENSOR, TENSOR, INT), normalise_einsum, warmup_fields=("m", "n", "heads"))
FAMILY = Family("sm90_bf16_gemm", HEADER, FUNCTION, PARAMS, ("sm_90a",), (BF16, BF16_CONTIGUOUS, BF16_MASKED, EINSUM),
                build_plan, clear_kernels, _kernel, warmup_kernels)
