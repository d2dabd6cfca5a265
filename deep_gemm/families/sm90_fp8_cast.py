"""Kernel family of include/deep_gemm/sm90/fp8_cast.cuh: the FP8 (e4m3) casts with float32 scales behind
`deep_gemm.utils.per_token_cast_to_fp8` (1 x 128 groups), `per_block_cast_to_fp8` (128 x 128) and
`per_channel_cast_to_fp8` (128 x 1), each one kernel bitwise equal to the torch definition on the GPU: validation of
a call's tensors into a layout, the kernel choice, and the `_C` plan."""
import numbers
from dataclasses import dataclass, field
from typing import Dict, Optional, Tuple

import torch

from .. import jit
from ..device import get_device_arch, get_num_sms
from ..heuristics.common import ceil_div
from ..heuristics.sm90_cast import GRAN, CastConfig, get_cast_config, vector_width
from ..jit.runtime import ensure_context
from . import checks
from .plan import POINTER, U32, U64, ParamBuffer, launch, make_plan, noop_plan
from .variant import INT, TENSOR, Family, Variant

HEADER = "deep_gemm/sm90/fp8_cast.cuh"
FUNCTION = "deep_gemm::sm90::fp8_cast_impl"
PARAMS = (("x", POINTER), ("out", POINTER), ("sf", POINTER), ("rows", U32), ("cols", U32), ("x_stride", U64),
          ("out_stride", U64), ("sf_stride_0", U32), ("sf_stride_1", U32))
_NAMES = ("x", "out", "sf")
_KIND_CPP = {"per_token": "PerToken", "per_block": "PerBlock", "per_channel": "PerChannel"}
_U32_LIMIT = 1 << 31  # sizes and strides the kernel takes as 32-bit values (grid and unit counts stay below 2^31)


def kernel_source(kind: str, bf16: bool, ue8m0: bool, config: CastConfig) -> jit.KernelSource:
    named = dict(kKind=jit.CppName(f"deep_gemm::sm90::CastKind::{_KIND_CPP[kind]}"), kInputBF16=bf16, kVec=config.vec,
                 kUE8M0=ue8m0, kGran=GRAN, kNumThreads=config.num_threads, kMinBlocks=config.min_blocks,
                 kRounds=config.rounds, kLanesPerRow=config.lanes_per_row)
    return jit.KernelSource(name=f"sm90_fp8_cast_{kind}", header=HEADER, function=FUNCTION, config=named)


_functions: Dict[Tuple, object] = {}


def clear_kernels() -> None:
    _functions.clear()


def _function(source: jit.KernelSource, num_threads: int, device_index: int, arch: str):
    key = (source.instantiation(), device_index, arch)
    function = _functions.get(key)
    if function is None:
        ensure_context(device_index)
        function = _functions[key] = jit.load(source, arch, num_threads, 0).function(device_index)
    return function


@dataclass
class CastLayout:
    """One validated geometry of a cast: x [rows, cols] (BF16 or FP32, unit column stride) into out (e4m3, same
    shape) and sf (float32 scales, row-major or MN-major). `max_vec`: the widest vector its strides and columns
    allow; each call's pointers may allow less, so plans are kept per vector width."""
    kind: str
    device: torch.device
    rows: int
    cols: int
    bf16: bool
    ue8m0: bool
    x_stride: int
    out_stride: int
    sf_strides: Tuple[int, int]
    max_vec: int
    extents: Tuple[int, ...]
    num_sms: int
    arch: str
    plans: dict = field(default_factory=dict)
    family: Optional[Family] = None  # bound by the runtime for a layout that launches

    @property
    def needs_kernel(self) -> bool:
        return self.rows > 0 and self.cols > 0

    def vec_for(self, x_ptr: int, out_ptr: int) -> int:
        """The widest vector this call's pointers allow within `max_vec`."""
        es = 2 if self.bf16 else 4
        vec = self.max_vec
        while vec > 1 and (x_ptr % (vec * es) or out_ptr % vec):
            vec //= 2
        return vec

    def run(self, x, out, sf, use_ue8m0):
        tensors = (x, out, sf)
        if not self.needs_kernel:
            return noop_plan(self.device.index, 3, self.extents, (1, 2))
        ptrs = [t.data_ptr() for t in tensors]
        if ptrs[0] % x.element_size() or ptrs[2] % 4:
            name = "x" if ptrs[0] % x.element_size() else "sf"
            raise ValueError(f"{name}'s data pointer must be aligned to its element size")
        for out_index in (1, 2):
            checks.check_no_overlap_ptrs(_NAMES[out_index], ptrs[out_index], self.extents[out_index],
                                         [(_NAMES[i], ptrs[i], self.extents[i]) for i in range(3) if i != out_index])
        vec = self.vec_for(ptrs[0], ptrs[1])
        plan = self.plans.get(vec)
        if plan is None:
            plan = self.plans[vec] = self.family.build_plan(self, vec)
        launch(plan, tuple(ptrs))
        return plan


def build_plan(layout: CastLayout, vec: int):
    """The `_C` plan of a layout with vectors of `vec` elements (the pointers' alignment is part of the plan)."""
    config = get_cast_config(layout.kind, layout.rows, layout.cols, vec, 2 if layout.bf16 else 4, layout.num_sms)
    source = kernel_source(layout.kind, layout.bf16, layout.ue8m0, config)
    function = _function(source, config.num_threads, layout.device.index, layout.arch)
    params = ParamBuffer(PARAMS)
    for i, name in enumerate(_NAMES):
        params.pointer(name, i)
    params.u32("rows", layout.rows)
    params.u32("cols", layout.cols)
    params.u64("x_stride", layout.x_stride)
    params.u64("out_stride", layout.out_stride)
    params.u32("sf_stride_0", layout.sf_strides[0])
    params.u32("sf_stride_1", layout.sf_strides[1])
    es = 2 if layout.bf16 else 4
    aligns = (vec * es - 1, vec - 1, 3)
    return make_plan(function, layout.device.index, aligns, layout.extents, (1, 2),
                     (params.launch(config.grid, config.num_threads, 0, 1),))


def _sf_shape(kind: str, rows: int, cols: int) -> Tuple[int, int]:
    if kind == "per_token":
        return rows, ceil_div(cols, GRAN)
    if kind == "per_block":
        return ceil_div(rows, GRAN), ceil_div(cols, GRAN)
    return rows // GRAN, cols


def _distinct_positions(t: torch.Tensor) -> bool:
    """Whether the elements of 2-D `t` lie at distinct addresses, as in a row-major or a column-major layout (with
    padding) - the scale layouts the GEMMs read."""
    (a, b), (s0, s1) = t.shape, t.stride()
    if a <= 1 or b <= 1:
        return (a <= 1 or s0 > 0) and (b <= 1 or s1 > 0)
    return (s1 == 1 and s0 >= b) or (s0 == 1 and s1 >= a)


def _normalise(kind: str, x, out, sf, use_ue8m0) -> CastLayout:
    """Every check of one cast: x [rows, cols] BF16 or FP32 with unit column stride; out e4m3 of x's shape with unit
    column stride and rows that do not overlap; sf float32 of the kind's scale shape, row-major or MN-major;
    use_ue8m0 0 or 1; all on one CUDA device (checked last, so that CPU tensors reach every other check)."""
    checks.check_tensor(x, "x", (torch.bfloat16, torch.float32), 2)
    rows, cols = x.shape
    if kind == "per_channel" and rows % GRAN:
        raise ValueError(f"x must have a multiple of {GRAN} rows (the per-channel groups run down the columns), got "
                         f"shape {tuple(x.shape)}")
    checks.check_tensor(out, "out", torch.float8_e4m3fn, 2)
    checks.check_shape(out, "out", (rows, cols), "x's shape")
    checks.check_tensor(sf, "sf", torch.float32, 2)
    checks.check_shape(sf, "sf", _sf_shape(kind, rows, cols), f"the {kind.replace('_', '-')} scales of x")
    if isinstance(use_ue8m0, bool) or not isinstance(use_ue8m0, numbers.Integral) or use_ue8m0 not in (0, 1):
        raise ValueError(f"use_ue8m0 must be 0 or 1, got {use_ue8m0!r}")
    if rows >= _U32_LIMIT or cols >= _U32_LIMIT or rows * ceil_div(cols, GRAN) >= _U32_LIMIT:
        raise ValueError(f"x of shape {tuple(x.shape)} is too large for one cast (2^31 groups at most)")
    if cols > 1 and x.stride(1) != 1:
        raise ValueError(f"x must have unit stride along its columns, got strides {x.stride()}")
    if cols > 1 and out.stride(1) != 1:
        raise ValueError(f"out must have unit stride along its columns, got strides {out.stride()}")
    if rows > 1 and out.stride(0) < cols:
        raise ValueError(f"out has overlapping rows (stride(0) = {out.stride(0)} < {cols} columns)")
    if not _distinct_positions(sf) or max(sf.stride()) >= _U32_LIMIT:
        raise ValueError(f"sf must be row-major or MN-major (one address per scale), got strides {sf.stride()}")
    named = list(zip(_NAMES, (x, out, sf)))
    device = checks.check_same_cuda_device(named)
    x_stride = x.stride(0) if rows > 1 else cols
    out_stride = out.stride(0) if rows > 1 else cols
    es = x.element_size()
    max_vec = vector_width(es, cols, x_stride, out_stride)
    return CastLayout(kind, device, rows, cols, x.dtype == torch.bfloat16, bool(use_ue8m0), x_stride, out_stride,
                      tuple(sf.stride()), max_vec, tuple(checks.extent_bytes(t) for _, t in named),
                      get_num_sms(device.index), get_device_arch(device.index))


def normalise_per_token(x, out, sf, use_ue8m0) -> CastLayout:
    """per_token_cast_to_fp8: sf [rows, ceil(cols / 128)]."""
    return _normalise("per_token", x, out, sf, use_ue8m0)


def normalise_per_block(x, out, sf, use_ue8m0) -> CastLayout:
    """per_block_cast_to_fp8: sf [ceil(rows / 128), ceil(cols / 128)]."""
    return _normalise("per_block", x, out, sf, use_ue8m0)


def normalise_per_channel(x, out, sf, use_ue8m0) -> CastLayout:
    """per_channel_cast_to_fp8: rows % 128 == 0, sf [rows / 128, cols]."""
    return _normalise("per_channel", x, out, sf, use_ue8m0)


_SIGNATURE = (TENSOR, TENSOR, TENSOR, INT)
CAST_PER_TOKEN = Variant("fp8_cast_per_token", "per_token_cast_to_fp8", _SIGNATURE, normalise_per_token, gemm=False)
CAST_PER_BLOCK = Variant("fp8_cast_per_block", "per_block_cast_to_fp8", _SIGNATURE, normalise_per_block, gemm=False)
CAST_PER_CHANNEL = Variant("fp8_cast_per_channel", "per_channel_cast_to_fp8", _SIGNATURE, normalise_per_channel,
                           gemm=False)
# NOTES: not GEMMs (`gemm=False`): compile mode and the warm-up leave them alone; their kernels build on first use.
FAMILY = Family("sm90_fp8_cast", HEADER, FUNCTION, PARAMS, ("sm_90a",),
                (CAST_PER_TOKEN, CAST_PER_BLOCK, CAST_PER_CHANNEL), build_plan, clear_kernels)
