"""Kernel family of include/deep_gemm/common/sf_layout.cuh: float32 scales -> packed UE8M0 (four exponents per
int32, MN-major), for a batch of [mn, k'] scale matrices (`Op.PACK_UE8M0`) or the K-grouped weight-gradient layout
(`Op.PACK_UE8M0_K_GROUPED`). Validation into a layout, and the `_C` plan that launches the kernel."""
import numbers
from dataclasses import dataclass, field

import torch

from .. import jit
from ..heuristics.common import ceil_div
from ..jit.runtime import ensure_context
from ..ops import checks
from ..utils import get_device_arch
from .plan import ParamBuffer, make_plan, noop_plan

HEADER = "deep_gemm/common/sf_layout.cuh"
FUNCTION = "deep_gemm::pack_fp32_into_ue8m0_impl"
NUM_THREADS = 256

_functions = {}


def kernel_source() -> jit.KernelSource:
    return jit.KernelSource(name="pack_fp32_into_ue8m0", header=HEADER, function=FUNCTION,
                            config=dict(kNumThreads=NUM_THREADS))


def _function(device_index: int, arch: str):
    key = (device_index, arch)
    if key not in _functions:
        ensure_context(device_index)
        _functions[key] = jit.load(kernel_source(), arch, NUM_THREADS, 0).function(device_index)
    return _functions[key]


def clear_kernels() -> None:
    _functions.clear()


@dataclass
class PackLayout:
    """One validated geometry: the kernel's scalar arguments (uniform batch or k-grouped) and the output rows."""
    device: torch.device
    k_grouped: bool
    num_groups: int
    mn: int
    sf_k: int             # uniform: scale rows (the k' of [mn, k']) per group
    gran_k: int           # k-grouped: K elements per scale row
    sf_rows: int          # scale rows the kernel may read: per group (uniform) or in all (k-grouped)
    in_group_stride: int
    in_stride_k: int
    in_stride_mn: int
    out_rows: int
    out_row_stride: int
    extents: tuple
    plans: dict = field(default_factory=dict)

    def run(self, sf, out, grouped_layout=None, *host_args):
        tensors = (sf, out) if grouped_layout is None else (sf, out, grouped_layout)
        ptrs = [t.data_ptr() for t in tensors]
        checks.check_no_overlap_ptrs("out", ptrs[1], self.extents[1],
                                     [(n, p, e) for n, p, e in zip(("sf", "out", "grouped_layout"), ptrs,
                                                                   self.extents) if n != "out"])
        if self.out_rows == 0 or self.mn == 0:
            return noop_plan(self.device.index, len(tensors), self.extents, (1,))
        plan = self.plans.get(None)
        if plan is None:
            params = ParamBuffer()
            params.pointer(0), params.pointer(1)
            params.pointer(2) if self.k_grouped else params.null_pointer()
            for v in (self.num_groups, self.mn, self.sf_k, self.gran_k, self.sf_rows):
                params.u32(v)
            for v in (self.in_group_stride, self.in_stride_k, self.in_stride_mn):
                params.u64(v)
            params.u32(self.out_row_stride)
            launch = params.launch(self.out_rows, NUM_THREADS, 0, 1)
            function = _function(self.device.index, get_device_arch(self.device.index))
            plan = self.plans[None] = make_plan(function, self.device.index, (3,) * len(tensors), self.extents,
                                                (1,), (launch,))
        from .. import _C
        _C.launch(plan, tuple(ptrs))
        return plan


def normalise_pack(sf, out) -> PackLayout:
    """sf [mn, k'] or [b, mn, k'] float32 (any strides) -> out [.., mn, ceil(k'/4)] int32 whose MN dimension is
    contiguous, rows of the packed K dimension `out.stride(-1)` apart, batches stacked (stride(0) == stride(-1) *
    ceil(k'/4))."""
    checks.check_tensor(sf, "sf", torch.float32, None)
    if sf.dim() not in (2, 3):
        raise ValueError(f"sf must be 2-D [mn, k] or 3-D [g, mn, k], got shape {tuple(sf.shape)}")
    batch = sf.shape[0] if sf.dim() == 3 else 1
    mn, sf_k = sf.shape[-2], sf.shape[-1]
    k4 = ceil_div(sf_k, 4)
    checks.check_tensor(out, "out", torch.int32, sf.dim())
    checks.check_shape(out, "out", sf.shape[:-1] + (k4,))
    if (mn > 1 and out.stride(-2) != 1) or (sf.dim() == 3 and batch > 1 and out.stride(0) != out.stride(-1) * k4):
        raise ValueError(f"out must be MN-major with stacked batches, got strides {out.stride()}")
    device = checks.check_same_cuda_device([("sf", sf), ("out", out)])
    return PackLayout(device, False, batch, mn, sf_k, 0, sf_k, sf.stride(0) if sf.dim() == 3 else 0, sf.stride(-1),
                      sf.stride(-2), batch * k4, out.stride(-1), (checks.extent_bytes(sf), checks.extent_bytes(out)))


def normalise_pack_k_grouped(sf, out, grouped_layout, ks, gran_k) -> PackLayout:
    """sf [sum_g ceil(k_g/gran_k), mn] float32 (groups' scale rows back to back), grouped_layout [G] int32 = k_g on
    the device, ks the same k_g as a host list -> out [sum_g ceil(k_g/(4 gran_k)), mn] int32, unit column stride."""
    checks.check_tensor(sf, "sf", torch.float32, 2)
    if isinstance(gran_k, bool) or not isinstance(gran_k, numbers.Integral) or gran_k not in (32, 128):
        raise ValueError(f"gran_k must be 32 or 128, got {gran_k!r}")
    if not all(isinstance(k, numbers.Integral) and not isinstance(k, bool) and k >= 0 for k in ks):
        raise ValueError(f"ks_cpu must be non-negative ints, got {ks!r}")
    checks.check_index_tensor(grouped_layout, "grouped_layout", (len(ks),), "G")
    sf_rows = sum(ceil_div(k, gran_k) for k in ks)
    mn = sf.shape[1]
    checks.check_shape(sf, "sf", (sf_rows, mn), "sum_g ceil(k_g/gran_k) x mn")
    out_rows = sum(ceil_div(k, 4 * gran_k) for k in ks)
    checks.check_tensor(out, "out", torch.int32, 2)
    checks.check_shape(out, "out", (out_rows, mn))
    if mn > 1 and out.stride(1) != 1:
        raise ValueError(f"out must have a unit column stride, got strides {out.stride()}")
    named = [("sf", sf), ("out", out), ("grouped_layout", grouped_layout)]
    device = checks.check_same_cuda_device(named)
    return PackLayout(device, True, len(ks), mn, 0, gran_k, sf_rows, 0, sf.stride(0), sf.stride(1), out_rows,
                      out.stride(0), tuple(checks.extent_bytes(t) for _, t in named))
