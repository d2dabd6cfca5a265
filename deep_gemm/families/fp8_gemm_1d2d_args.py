"""The arguments of the 1d2d GEMM variants (dense, contiguous, masked, psum, bmm), validated into a `GemmLayout`:
shared by the kernel families of the 1d2d kernels (sm90_fp8_gemm_1d2d, sm100_fp8_gemm_1d2d), which take the same
arguments, so that a call gets the same errors on every architecture. Not a family itself: a layout runs through the
family the runtime bound to it (`GemmLayout.family`, a `deep_gemm.families.variant.Family`)."""
import numbers
import struct
from dataclasses import dataclass, field
from typing import Optional, Tuple

import torch

from ..device import get_device_arch, get_num_sms
from ..heuristics import KernelType, SwiGLU
from ..heuristics.common import FP8Out
from ..heuristics.common import ceil_div
from ..jit.codegen import CppName
from ..scale_layout import is_col_major_tma_aligned
from . import checks
from .plan import launch, noop_plan
from .variant import INT, PAIR, TENSOR, Family, Variant

_NAMES_1D2D = ("lhs[0] (A)", "lhs[1] (SA)", "rhs[0] (B)", "rhs[1] (SB)", "out")
# (left, mid, right) of fp8_gemm_nt_skip_head_mid: each head of left + right GEMM columns is stored as left | mid
# columns left unwritten | right; (0, 0, 0): a plain dense GEMM.
HeadSplits = Tuple[int, int, int]
NO_HEAD_SPLITS: HeadSplits = (0, 0, 0)
_NAMES_SKIP_HEAD_MID = ("a[0] (A)", "a[1] (SA)", "b[0] (B)", "b[1] (SB)", "d")  # DeepGEMM's argument names
_NAMES_FP8_OUT = ("a[0] (A)", "a[1] (SFA)", "b[0] (B)", "b[1] (SFB)", "d[0] (D)", "d[1] (SFD)")
# The 1d2d kernels' template parameter of each kind (deep_gemm::GemmType, include/deep_gemm/common/scheduler.cuh).
GEMM_TYPES = {
    KernelType.NORMAL: CppName("deep_gemm::GemmType::Normal"),
    KernelType.M_GROUPED_CONTIGUOUS: CppName("deep_gemm::GemmType::MGroupedContiguous"),
    KernelType.M_GROUPED_MASKED: CppName("deep_gemm::GemmType::MGroupedMasked"),
    KernelType.M_GROUPED_PSUM: CppName("deep_gemm::GemmType::MGroupedPsum"),
    KernelType.BATCHED: CppName("deep_gemm::GemmType::Batched"),
}


@dataclass
class GemmLayout:
    """What the full checks concluded for one layout of a dense / contiguous / masked call (dtypes, shapes,
    strides, devices, SM cap, expected_m); `action` is "none" (nothing to compute), "zero" (zero out),
    "zero_masked" (k = 0, masked) or "launch". Plans are made once per kernel-ready tensor geometry."""
    kind: KernelType
    action: str
    device: torch.device
    ragged_n: bool               # n % 8 != 0: through an aligned temporary (dense, contiguous)
    sa_ready: bool               # SA already MN-major and TMA-aligned (its pointer is still checked per call)
    sb_contiguous: bool
    extents: Tuple[int, ...]     # bytes spanned by (A, SA, B, SB, out[, index]), for the overlap check
    expected_m: int
    num_sms: int
    arch: str
    psum_alignment: int = 0      # psum layout: row alignment of the experts' starts
    head_splits: HeadSplits = NO_HEAD_SPLITS
    # d = (e4m3 D, its MN-major 1 x 128 scales SFD): out is that pair; a SwiGLU instance: the gate/up GEMM's
    fp8_out: FP8Out = False
    plans: dict = field(default_factory=dict)
    family: Optional[Family] = None  # bound by the runtime for a layout that launches

    @property
    def needs_kernel(self) -> bool:
        return self.action == "launch"

    def run(self, lhs, rhs, out, *rest):
        """The per-call part: pointer checks, then nothing, zeroing or the launch. Returns the plan when the call
        needed no conversion (so `_C` can launch later calls of this layout by itself), else None. `rest`: the
        grouped variants' index tensor and host ints, or skip_head_mid's host ints only (already in the layout)."""
        index = rest[0] if rest and isinstance(rest[0], torch.Tensor) else None
        a, sa = lhs
        b, sb = rhs
        if self.fp8_out:
            return self._run_fp8_out((a, sa, b, sb, *out) + ((index,) if index is not None else ()))
        tensors = (a, sa, b, sb, out) if index is None else (a, sa, b, sb, out, index)
        if self.action == "none":
            return noop_plan(self.device.index, len(tensors), self.extents, (4,))
        ptrs = [t.data_ptr() for t in tensors]
        base_names = _NAMES_BMM if self.kind == KernelType.BATCHED else \
            _NAMES_SKIP_HEAD_MID if self.head_splits != NO_HEAD_SPLITS else _NAMES_1D2D
        if self.action == "launch" and (ptrs[0] | ptrs[2] | (0 if self.ragged_n else ptrs[4])) & 15:
            for i in (0, 2) + (() if self.ragged_n else (4,)):
                checks.check_tma_matrix(checks.rows_view(tensors[i], base_names[i]), base_names[i])
        names = base_names + ((_INDEX_NAMES[self.kind],) if index is not None else ())
        checks.check_no_overlap_ptrs("out", ptrs[4], self.extents[4],
                                     [(names[i], ptrs[i], self.extents[i]) for i in range(len(tensors)) if i != 4])
        if self.action == "zero":
            out.zero_()
            return None
        if self.action == "zero_masked":
            checks.zero_masked_rows(out, index)
            return None
        if self.kind == KernelType.BATCHED:  # the kernel gathers SA as it is
            sa_k, sb_k = sa, sb if self.sb_contiguous else sb.contiguous()
        else:
            sa_k, sb_k = checks.tma_ready_scales(sa, sb, self.sa_ready, self.sb_contiguous)
        target = out
        if self.ragged_n:
            m, n = out.shape
            target = torch.empty((m, n + (-n) % 8), dtype=out.dtype, device=self.device)
        kernel_tensors = (a, sa_k, b, sb_k, target) + tensors[5:]
        plan = self._launch(kernel_tensors)
        if self.ragged_n:
            out.copy_(target[:, :out.shape[1]])
        return plan if (sa_k is sa and sb_k is sb and target is out) else None

    def _run_fp8_out(self, tensors):
        """`run` of a GEMM with an FP8 d: tensors (A, SA, B, SB, D, SFD[, m_indices / masked_m]); D and SFD both
        written, no conversion of D (n % 16 == 0)."""
        if self.action == "none":
            return noop_plan(self.device.index, len(tensors), self.extents, (4, 5))
        ptrs = [t.data_ptr() for t in tensors]
        names = _NAMES_FP8_OUT + ((_INDEX_NAMES[self.kind],) if len(tensors) > 6 else ())
        if (ptrs[0] | ptrs[2] | ptrs[4]) & 15:
            for i in (0, 2, 4):
                checks.check_tma_matrix(checks.rows_view(tensors[i], names[i]), names[i])
        for i in (4, 5):
            checks.check_no_overlap_ptrs(names[i], ptrs[i], self.extents[i],
                                         [(names[j], ptrs[j], self.extents[j]) for j in range(len(tensors)) if j != i])
        a, sa, b, sb = tensors[:4]
        sa_k, sb_k = checks.tma_ready_scales(sa, sb, self.sa_ready, self.sb_contiguous)
        plan = self._launch((a, sa_k, b, sb_k) + tuple(tensors[4:]))
        return plan if (sa_k is sa and sb_k is sb) else None

    def load_kernel(self, lhs, rhs, out, *rest) -> None:
        """Compile mode (deep_gemm.set_compile_mode): compile or load this layout's kernel; launch nothing, write
        nothing."""
        if self.action == "launch":
            self.family.load(self.kind, lhs[0], rhs[0], self.num_sms, self.arch, self.expected_m, self.psum_alignment,
                             **self._family_args())

    def _family_args(self) -> dict:
        """The head splits and the FP8-output epilogue, for the family that serves them (sm90's; only their variants
        have them)."""
        return ({} if self.head_splits == NO_HEAD_SPLITS else {"head_splits": self.head_splits}) | \
            ({"fp8_out": self.fp8_out} if self.fp8_out else {})

    def _launch(self, tensors):
        geometry = checks.tensor_geometry(tensors)
        plan = self.plans.get(geometry)
        if plan is None:
            plan = self.plans[geometry] = self.family.build_plan(self.kind, tensors, self.num_sms, self.arch,
                                                                 self.expected_m, self.psum_alignment,
                                                                 **self._family_args())
        launch(plan, tuple(t.data_ptr() for t in tensors))
        return plan


_INDEX_NAMES = {KernelType.M_GROUPED_CONTIGUOUS: "m_indices", KernelType.M_GROUPED_MASKED: "masked_m",
                KernelType.M_GROUPED_PSUM: "grouped_layout"}


def _layout(kind, action, device, sa, sb, named, ragged_n=False, expected_m=0, psum_alignment=0,
            head_splits=NO_HEAD_SPLITS, fp8_out=False) -> GemmLayout:
    return GemmLayout(kind, action, device, ragged_n, is_col_major_tma_aligned(sa), sb.is_contiguous(),
                      tuple(checks.extent_bytes(t) for _, t in named), expected_m, get_num_sms(device.index),
                      get_device_arch(device.index), psum_alignment, head_splits, fp8_out)


def normalise_dense(lhs, rhs, out) -> GemmLayout:
    """Every layout check of `gemm_fp8_fp8_bf16_nt`, with errors naming the argument."""
    a, sa = checks.unpack_pair(lhs, "lhs")
    b, sb = checks.unpack_pair(rhs, "rhs")
    checks.check_tensor(a, "lhs[0] (A)", torch.float8_e4m3fn, 2)
    checks.check_tensor(sa, "lhs[1] (SA)", torch.float32, 2)
    checks.check_tensor(b, "rhs[0] (B)", torch.float8_e4m3fn, 2)
    checks.check_tensor(sb, "rhs[1] (SB)", torch.float32, 2)
    checks.check_tensor(out, "out", torch.bfloat16, 2)
    m, k = a.shape
    n, k_b = b.shape
    if k_b != k:
        raise ValueError(f"rhs[0] (B) must have shape (n, {k}) to match A's k={k}, got {tuple(b.shape)}")
    checks.check_shape(out, "out", (m, n), "m x n")
    kb = ceil_div(k, 128)
    checks.check_shape(sa, "lhs[1] (SA)", (m, kb), "m x ceil(k/128)")
    checks.check_shape(sb, "rhs[1] (SB)", (ceil_div(n, 128), kb), "ceil(n/128) x ceil(k/128)")
    named = list(zip(_NAMES_1D2D, (a, sa, b, sb, out)))
    device = checks.check_same_cuda_device(named)
    kind = KernelType.NORMAL
    if m == 0 or n == 0:
        return _layout(kind, "none", device, sa, sb, named)
    # NOTES: a TMA store writes whole 16-byte chunks of a row: with n % 8 != 0 the last chunk would spill into
    # whatever follows the row (measured on the H200), so such outputs go through an aligned temporary.
    ragged_n = n % 8 != 0
    checks.check_out_rows(out, ragged_n)
    checks.check_no_overlap(out, "out", named[:4])
    if k == 0:
        return _layout(kind, "zero", device, sa, sb, named, ragged_n)
    checks.check_tma_matrix(a, "lhs[0] (A)")
    checks.check_tma_matrix(b, "rhs[0] (B)")
    return _layout(kind, "launch", device, sa, sb, named, ragged_n)


def _check_fp8_d(named, n: int, k: int) -> None:
    """The launch checks every FP8-d variant shares, on its (name, tensor) list A, SA, B, SB, D, SFD[, index]: whole
    16-byte chunks of D's rows, SFD's layout (2-D: MN-major, stride(0) == 1 and stride(1) >= its rows, below 2^32;
    3-D: per group as get_mn_major_tma_aligned_tensor lays it out, the next masked GEMM's A scales), k > 0, TMA-legal
    A, B and D, and D and SFD overlapping nothing."""
    names = [name for name, _ in named]
    a, b, d, sd = named[0][1], named[2][1], named[4][1], named[5][1]
    if n % 16:
        raise ValueError(f"{names[4]}: n must be a multiple of 16 for an FP8 d on SM90 (whole 16-byte TMA chunks), "
                         f"got n = {n}")
    if sd.dim() == 3 and not is_col_major_tma_aligned(sd):
        raise ValueError(f"{names[5]} must be MN-major with its M stride padded to 16 bytes in every group, as "
                         f"get_mn_major_tma_aligned_tensor returns it; got strides {sd.stride()}")
    if sd.dim() == 2:
        rows = sd.shape[0]
        # (one column of scales: its stride is never used, so a contiguous [rows, 1] tensor is MN-major too)
        if rows > 1 and (sd.stride(0) != 1 or (sd.shape[1] > 1 and sd.stride(1) < rows)):
            raise ValueError(f"{names[5]} must be MN-major (stride(0) == 1, stride(1) >= its rows), as "
                             f"per_token_cast_to_fp8(x, mn_major_sf=True) returns it; got strides {sd.stride()}")
        if sd.stride(1) >= 1 << 32:
            raise ValueError(f"{names[5]}: stride(1) must be below 2^32, got {sd.stride(1)}")
    if k == 0:
        raise ValueError("k must be > 0 for an FP8 d (the scales of an all-zero D are not defined by DeepGEMM)")
    _check_operand(d, names[4])
    for i in (4, 5):
        checks.check_no_overlap(named[i][1], names[i], [named[j] for j in range(len(named)) if j != i])
    _check_operand(a, names[0])
    _check_operand(b, names[2])


def normalise_dense_fp8_out(lhs, rhs, out) -> GemmLayout:
    """Every layout check of the dense GEMM with an FP8 d (`fp8_gemm_nt_fp8_out(a, b, d)`, d = (D, SFD)): D [m, n]
    e4m3 with n % 16 == 0 (whole 16-byte TMA chunks) and 16-byte aligned rows, SFD [m, ceil(n/128)] float32 MN-major
    (stride(0) == 1, stride(1) >= m: what `per_token_cast_to_fp8(x, mn_major_sf=True)` returns), k > 0."""
    a, sa = checks.unpack_pair(lhs, "a")
    b, sb = checks.unpack_pair(rhs, "b")
    d, sd = checks.unpack_pair(out, "d")
    names = _NAMES_FP8_OUT
    for t, name, dtype in zip((a, sa, b, sb, d, sd), names, (torch.float8_e4m3fn, torch.float32, torch.float8_e4m3fn,
                                                             torch.float32, torch.float8_e4m3fn, torch.float32)):
        checks.check_tensor(t, name, dtype, 2)
    m, k = a.shape
    n, k_b = b.shape
    if k_b != k:
        raise ValueError(f"{names[2]} must have shape (n, {k}) to match A's k={k}, got {tuple(b.shape)}")
    checks.check_shape(d, names[4], (m, n), "m x n")
    kb = ceil_div(k, 128)
    checks.check_shape(sa, names[1], (m, kb), "m x ceil(k/128)")
    checks.check_shape(sb, names[3], (ceil_div(n, 128), kb), "ceil(n/128) x ceil(k/128)")
    checks.check_shape(sd, names[5], (m, ceil_div(n, 128)), "m x ceil(n/128)")
    named = list(zip(names, (a, sa, b, sb, d, sd)))
    device = checks.check_same_cuda_device(named)
    kind = KernelType.NORMAL
    if m == 0 or n == 0:
        return _layout(kind, "none", device, sa, sb, named, fp8_out=True)
    _check_fp8_d(named, n, k)
    return _layout(kind, "launch", device, sa, sb, named, fp8_out=True)


def normalise_masked_fp8_out(lhs, rhs, out, masked_m, expected_m) -> GemmLayout:
    """Every layout check of the masked GEMM with an FP8 d (`m_grouped_fp8_gemm_nt_masked_fp8_out`): as the masked
    GEMM's, with d = (D [G, m_max, n] e4m3, n % 16 == 0, SFD [G, m_max, ceil(n/128)] float32 in the layout
    `get_mn_major_tma_aligned_tensor` returns: the next masked GEMM's A scales as they are), k > 0. Rows >= masked_m
    of D and SFD stay untouched."""
    return _masked_fp8_d(lhs, rhs, out, masked_m, expected_m, True)


def normalise_masked_swiglu(lhs, rhs, out, masked_m, expected_m, clamp_bits) -> GemmLayout:
    """Every layout check of `m_grouped_fp8_gemm_nt_masked_swiglu`: as the masked FP8-d GEMM's, with B's gate and up
    rows interleaved (n = 2 x the intermediate size, a multiple of 256) and D [G, m_max, n / 2], SFD [G, m_max,
    n / 256]; `clamp_bits`: the activation clamp's float32 bits (host int)."""
    return _masked_fp8_d(lhs, rhs, out, masked_m, expected_m, _swiglu_epilogue(clamp_bits))


def _swiglu_epilogue(clamp_bits) -> SwiGLU:
    """The epilogue of the clamp's float32 bits: a positive float32 or +inf (no clamp); not NaN, zero or negative."""
    if isinstance(clamp_bits, bool) or not isinstance(clamp_bits, numbers.Integral) or not 0 <= clamp_bits < 1 << 32:
        raise TypeError(f"the activation clamp's float32 bits must be an int in [0, 2^32), got {clamp_bits!r}")
    if not struct.unpack("<f", struct.pack("<I", int(clamp_bits)))[0] > 0:
        raise ValueError(f"activation_clamp must be a positive float32 or +inf, got bits 0x{int(clamp_bits):08x}")
    return SwiGLU(int(clamp_bits))


def _swiglu_n(n: int, name: str) -> int:
    """D's column count of a SwiGLU GEMM whose B has n rows (gate and up interleaved)."""
    if n % 256:
        raise ValueError(f"{name}: the SwiGLU GEMM needs n = 2 x the intermediate size with the intermediate size a "
                         f"multiple of 128 (whole gate and up scale blocks), got n = {n}")
    return n // 2


def _d_columns(epilogue, n: int, d, sd, lead: Tuple[int, ...], lead_desc: str) -> int:
    """D's column count for B's n (n, or n / 2 for the SwiGLU GEMM), once D [*lead, columns] and SFD [*lead,
    ceil(columns / 128)] have those shapes."""
    swiglu = isinstance(epilogue, SwiGLU)
    n_d = _swiglu_n(n, _NAMES_FP8_OUT[2]) if swiglu else n
    checks.check_shape(d, _NAMES_FP8_OUT[4], (*lead, n_d), f"{lead_desc} x {'n / 2' if swiglu else 'n'}")
    checks.check_shape(sd, _NAMES_FP8_OUT[5], (*lead, ceil_div(n_d, 128)),
                       f"{lead_desc} x {'n / 256' if swiglu else 'ceil(n/128)'}")
    return n_d


def _masked_fp8_d(lhs, rhs, out, masked_m, expected_m, epilogue) -> GemmLayout:
    names = _NAMES_FP8_OUT
    a, sa = checks.unpack_pair(lhs, "a")
    d, sd = checks.unpack_pair(out, "d")
    checks.check_tensor(a, names[0], torch.float8_e4m3fn, 3)
    checks.check_tensor(sa, names[1], torch.float32, 3)
    num_groups_a, m_max, k = a.shape
    b, sb = checks.unpack_pair(rhs, "b")
    checks.check_tensor(b, names[2], torch.float8_e4m3fn, 3)
    checks.check_tensor(sb, names[3], torch.float32, 3)
    num_groups, n, k_b = b.shape
    if k_b != k:
        raise ValueError(f"{names[2]} must have shape (G, n, {k}) to match A's k={k}, got {tuple(b.shape)}")
    if num_groups_a != num_groups:
        raise ValueError(f"{names[0]} has {num_groups_a} groups but {names[2]} has {num_groups}")
    checks.check_shape(sb, names[3], (num_groups, ceil_div(n, 128), ceil_div(k, 128)), "G x ceil(n/128) x ceil(k/128)")
    checks.check_tensor(d, names[4], torch.float8_e4m3fn, 3)
    checks.check_tensor(sd, names[5], torch.float32, 3)
    checks.check_shape(sa, names[1], (num_groups, m_max, ceil_div(k, 128)), "G x m_max x ceil(k/128)")
    n_d = _d_columns(epilogue, n, d, sd, (num_groups, m_max), "G x m_max")
    checks.check_index_tensor(masked_m, "masked_m", (num_groups,), "G")
    expected_m = checks.host_int(expected_m, "expected_m")
    named = list(zip(names + ("masked_m",), (a, sa, b, sb, d, sd, masked_m)))
    device = checks.check_same_cuda_device(named)
    kind = KernelType.M_GROUPED_MASKED
    hint = min(max(int(expected_m), 1), max(m_max, 1))
    if num_groups == 0 or m_max == 0 or n == 0:
        return _layout(kind, "none", device, sa, sb, named, expected_m=hint, fp8_out=epilogue)
    _check_fp8_d(named, n_d, k)
    return _layout(kind, "launch", device, sa, sb, named, expected_m=hint, fp8_out=epilogue)


def normalise_contiguous_fp8_out(lhs, rhs, out, m_indices) -> GemmLayout:
    """Every layout check of the contiguous GEMM with an FP8 d (`m_grouped_fp8_gemm_nt_contiguous_fp8_out`): as the
    contiguous GEMM's (experts' rows stacked, m_indices [M], -1 for padding rows), with d = (D [M, n] e4m3, n % 16 ==
    0, SFD [M, ceil(n/128)] float32 MN-major: stride(0) == 1, stride(1) >= M), k > 0. Padding rows get zeros and the
    floor scale (1e-4 / 448), as the cast of the BF16 output's zeros."""
    return _contiguous_fp8_d(lhs, rhs, out, m_indices, True)


def normalise_contiguous_swiglu(lhs, rhs, out, m_indices, clamp_bits) -> GemmLayout:
    """Every layout check of `m_grouped_fp8_gemm_nt_contiguous_swiglu`: as the contiguous FP8-d GEMM's, with B's gate
    and up rows interleaved (n = 2 x the intermediate size, a multiple of 256) and D [M, n / 2], SFD [M, n / 256];
    `clamp_bits`: the activation clamp's float32 bits (host int)."""
    return _contiguous_fp8_d(lhs, rhs, out, m_indices, _swiglu_epilogue(clamp_bits))


def _contiguous_fp8_d(lhs, rhs, out, m_indices, epilogue) -> GemmLayout:
    names = _NAMES_FP8_OUT
    a, sa = checks.unpack_pair(lhs, "a")
    d, sd = checks.unpack_pair(out, "d")
    checks.check_tensor(a, names[0], torch.float8_e4m3fn, 2)
    checks.check_tensor(sa, names[1], torch.float32, 2)
    m, k = a.shape
    b, sb = checks.unpack_pair(rhs, "b")
    checks.check_tensor(b, names[2], torch.float8_e4m3fn, 3)
    checks.check_tensor(sb, names[3], torch.float32, 3)
    num_groups, n, k_b = b.shape
    if k_b != k:
        raise ValueError(f"{names[2]} must have shape (G, n, {k}) to match A's k={k}, got {tuple(b.shape)}")
    checks.check_shape(sb, names[3], (num_groups, ceil_div(n, 128), ceil_div(k, 128)), "G x ceil(n/128) x ceil(k/128)")
    checks.check_shape(sa, names[1], (m, ceil_div(k, 128)), "M x ceil(k/128)")
    checks.check_tensor(d, names[4], torch.float8_e4m3fn, 2)
    checks.check_tensor(sd, names[5], torch.float32, 2)
    n_d = _d_columns(epilogue, n, d, sd, (m,), "M")
    checks.check_index_tensor(m_indices, "m_indices", (m,), "M")
    named = list(zip(names + ("m_indices",), (a, sa, b, sb, d, sd, m_indices)))
    device = checks.check_same_cuda_device(named)
    kind = KernelType.M_GROUPED_CONTIGUOUS
    if m == 0 or n == 0:
        return _layout(kind, "none", device, sa, sb, named, fp8_out=epilogue)
    if num_groups == 0:
        raise ValueError("the group count must be > 0 for an FP8 d")
    _check_fp8_d(named, n_d, k)
    return _layout(kind, "launch", device, sa, sb, named, fp8_out=epilogue)


# Head parts of fp8_gemm_nt_skip_head_mid: left and right whole 16-column runs (a tile of a divisor of both lies
# inside one part), mid whole 16-byte chunks of BF16 (the TMA store's column offsets).
HEAD_PART_COLUMNS, HEAD_MID_COLUMNS = 16, 8


def normalise_skip_head_mid(lhs, rhs, out, left, mid, right) -> GemmLayout:
    """Every layout check of `fp8_gemm_nt_skip_head_mid` (DeepGEMM's attention-indexer GEMM): as the dense GEMM, with
    out [m, n + n / (left + right) * mid]; each head's left + right columns of A B^T land as left | mid columns left
    untouched | right."""
    a, sa = checks.unpack_pair(lhs, "a")
    b, sb = checks.unpack_pair(rhs, "b")
    names = _NAMES_SKIP_HEAD_MID
    checks.check_tensor(a, names[0], torch.float8_e4m3fn, 2)
    checks.check_tensor(sa, names[1], torch.float32, 2)
    checks.check_tensor(b, names[2], torch.float8_e4m3fn, 2)
    checks.check_tensor(sb, names[3], torch.float32, 2)
    checks.check_tensor(out, names[4], torch.bfloat16, 2)
    left, mid, right = (checks.host_int(v, f"head_splits[{i}]") for i, v in enumerate((left, mid, right)))
    if left <= 0 or right <= 0 or mid < 0:
        raise ValueError(f"head_splits must be (left > 0, mid >= 0, right > 0), got {(left, mid, right)}")
    if left % HEAD_PART_COLUMNS or right % HEAD_PART_COLUMNS or mid % HEAD_MID_COLUMNS:
        raise ValueError(f"head_splits: left and right must be multiples of {HEAD_PART_COLUMNS} and mid of "
                         f"{HEAD_MID_COLUMNS} on SM90, got {(left, mid, right)}")
    m, k = a.shape
    n, k_b = b.shape
    if k_b != k:
        raise ValueError(f"{names[2]} must have shape (n, {k}) to match A's k={k}, got {tuple(b.shape)}")
    if n % (left + right):
        raise ValueError(f"{names[2]}: n = {n} must be a multiple of left + right = {left + right} (whole heads)")
    n_out = n + n // (left + right) * mid
    checks.check_shape(out, names[4], (m, n_out), "m x (n + n / (left + right) * mid)")
    kb = ceil_div(k, 128)
    checks.check_shape(sa, names[1], (m, kb), "m x ceil(k/128)")
    checks.check_shape(sb, names[3], (ceil_div(n, 128), kb), "ceil(n/128) x ceil(k/128)")
    named = list(zip(names, (a, sa, b, sb, out)))
    device = checks.check_same_cuda_device(named)
    kind, splits = KernelType.NORMAL, (left, mid, right)
    if m == 0 or n == 0:
        return _layout(kind, "none", device, sa, sb, named, head_splits=splits)
    checks.check_tma_matrix(out, names[4])
    checks.check_no_overlap(out, names[4], named[:4])
    if k == 0:
        raise ValueError("k must be > 0 for fp8_gemm_nt_skip_head_mid (as DeepGEMM)")
    checks.check_tma_matrix(a, names[0])
    checks.check_tma_matrix(b, names[2])
    return _layout(kind, "launch", device, sa, sb, named, head_splits=splits)


def _check_grouped_rhs(rhs, k: int):
    """B [G, n, k] e4m3 (viewable as [G * n, k]) and SB [G, ceil(n/128), ceil(k/128)] fp32."""
    b, sb = checks.unpack_pair(rhs, "rhs")
    checks.check_tensor(b, "rhs[0] (B)", torch.float8_e4m3fn, 3)
    checks.check_tensor(sb, "rhs[1] (SB)", torch.float32, 3)
    num_groups, n, k_b = b.shape
    if k_b != k:
        raise ValueError(f"rhs[0] (B) must have shape (G, n, {k}) to match A's k={k}, got {tuple(b.shape)}")
    checks.check_shape(sb, "rhs[1] (SB)", (num_groups, ceil_div(n, 128), ceil_div(k, 128)),
                       "G x ceil(n/128) x ceil(k/128)")
    return b, sb, num_groups, n


def _check_operand(t: torch.Tensor, name: str) -> None:
    """A 2-D or stacked 3-D TMA operand (A, B or out): rows of unit stride, 16-byte aligned row stride/pointer."""
    checks.check_tma_matrix(checks.rows_view(t, name), name)


def _check_stacked_rows(lhs, rhs, out):
    """The operands of both contiguous layouts (experts' rows stacked along M): A [M, k], SA [M, ceil(k/128)],
    B / SB grouped, out [M, n] BF16. Returns (a, sa, b, sb, out, M, n, k, G)."""
    a, sa = checks.unpack_pair(lhs, "lhs")
    checks.check_tensor(a, "lhs[0] (A)", torch.float8_e4m3fn, 2)
    checks.check_tensor(sa, "lhs[1] (SA)", torch.float32, 2)
    m, k = a.shape
    b, sb, num_groups, n = _check_grouped_rhs(rhs, k)
    checks.check_tensor(out, "out", torch.bfloat16, 2)
    checks.check_shape(out, "out", (m, n), "M x n")
    checks.check_shape(sa, "lhs[1] (SA)", (m, ceil_div(k, 128)), "M x ceil(k/128)")
    return a, sa, b, sb, out, m, n, k, num_groups


def normalise_contiguous(lhs, rhs, out, m_indices) -> GemmLayout:
    """Every layout check of `m_grouped_gemm_fp8_fp8_bf16_nt_contiguous`, with errors naming the argument."""
    a, sa, b, sb, out, m, n, k, num_groups = _check_stacked_rows(lhs, rhs, out)
    checks.check_index_tensor(m_indices, "m_indices", (m,), "M")
    named = list(zip(_NAMES_1D2D + ("m_indices",), (a, sa, b, sb, out, m_indices)))
    device = checks.check_same_cuda_device(named)
    kind = KernelType.M_GROUPED_CONTIGUOUS
    if m == 0 or n == 0:
        return _layout(kind, "none", device, sa, sb, named)
    ragged_n = n % 8 != 0
    checks.check_out_rows(out, ragged_n)
    checks.check_no_overlap(out, "out", named[:4] + named[5:])
    if k == 0 or num_groups == 0:
        return _layout(kind, "zero", device, sa, sb, named, ragged_n)
    _check_operand(a, "lhs[0] (A)")
    _check_operand(b, "rhs[0] (B)")
    return _layout(kind, "launch", device, sa, sb, named, ragged_n)


def normalise_masked(lhs, rhs, out, masked_m, expected_m) -> GemmLayout:
    """Every layout check of `m_grouped_gemm_fp8_fp8_bf16_nt_masked`, with errors naming the argument."""
    a, sa = checks.unpack_pair(lhs, "lhs")
    checks.check_tensor(a, "lhs[0] (A)", torch.float8_e4m3fn, 3)
    checks.check_tensor(sa, "lhs[1] (SA)", torch.float32, 3)
    num_groups_a, m_max, k = a.shape
    b, sb, num_groups, n = _check_grouped_rhs(rhs, k)
    if num_groups_a != num_groups:
        raise ValueError(f"lhs[0] (A) has {num_groups_a} groups but rhs[0] (B) has {num_groups}")
    checks.check_tensor(out, "out", torch.bfloat16, 3)
    checks.check_shape(out, "out", (num_groups, m_max, n), "G x m_max x n")
    checks.check_shape(sa, "lhs[1] (SA)", (num_groups, m_max, ceil_div(k, 128)), "G x m_max x ceil(k/128)")
    checks.check_index_tensor(masked_m, "masked_m", (num_groups,), "G")
    expected_m = checks.host_int(expected_m, "expected_m")
    named = list(zip(_NAMES_1D2D + ("masked_m",), (a, sa, b, sb, out, masked_m)))
    device = checks.check_same_cuda_device(named)
    kind = KernelType.M_GROUPED_MASKED
    hint = min(max(int(expected_m), 1), max(m_max, 1))
    if num_groups == 0 or m_max == 0 or n == 0:
        return _layout(kind, "none", device, sa, sb, named, expected_m=hint)
    if n % 8 != 0:
        raise ValueError(f"rhs[0] (B): the masked layout needs n % 8 == 0 (got n={n}); pad B's rows to a multiple "
                         f"of 8 and slice the output")
    _check_operand(out, "out")
    checks.check_no_overlap(out, "out", named[:4] + named[5:])
    if k == 0:
        return _layout(kind, "zero_masked", device, sa, sb, named, expected_m=hint)
    _check_operand(a, "lhs[0] (A)")
    _check_operand(b, "rhs[0] (B)")
    return _layout(kind, "launch", device, sa, sb, named, expected_m=hint)


_NAMES_BMM = ("lhs[0] (x)", "lhs[1] (x_scales)", "rhs[0] (y)", "rhs[1] (y_scales)", "out")
# The kernel takes SA's strides as 32-bit element counts.
_MAX_SCALE_STRIDE = (1 << 32) - 1


def normalise_bmm(lhs, rhs, out) -> GemmLayout:
    """Every layout check of `bmm_fp8_fp8_bf16_nt`, with errors naming the argument."""
    a, sa = checks.unpack_pair(lhs, "lhs")
    b, sb = checks.unpack_pair(rhs, "rhs")
    checks.check_tensor(a, _NAMES_BMM[0], torch.float8_e4m3fn, 3)
    checks.check_tensor(sa, _NAMES_BMM[1], torch.float32, 3)
    checks.check_tensor(b, _NAMES_BMM[2], torch.float8_e4m3fn, 3)
    checks.check_tensor(sb, _NAMES_BMM[3], torch.float32, 3)
    checks.check_tensor(out, "out", torch.bfloat16, 3)
    batches, m, k = a.shape
    if b.shape[0] != batches or b.shape[2] != k:
        raise ValueError(f"{_NAMES_BMM[2]} must have shape ({batches}, n, {k}) to match x {tuple(a.shape)}, got "
                         f"{tuple(b.shape)}")
    n = b.shape[1]
    kb = ceil_div(k, 128)
    checks.check_shape(sa, _NAMES_BMM[1], (batches, m, kb), "B x m x ceil(k/128)")
    checks.check_shape(sb, _NAMES_BMM[3], (batches, ceil_div(n, 128), kb), "B x ceil(n/128) x ceil(k/128)")
    checks.check_shape(out, "out", (batches, m, n), "B x m x n")
    if max(sa.stride()) > _MAX_SCALE_STRIDE:
        raise ValueError(f"{_NAMES_BMM[1]}: strides above 2^32 - 1 elements are not supported, got {sa.stride()}")
    named = list(zip(_NAMES_BMM, (a, sa, b, sb, out)))
    device = checks.check_same_cuda_device(named)
    kind = KernelType.BATCHED
    if batches == 0 or m == 0 or n == 0:
        return _layout(kind, "none", device, sa, sb, named, expected_m=max(m, 1))
    if n % 8 != 0:
        raise ValueError(f"{_NAMES_BMM[2]}: the batched GEMM needs n % 8 == 0 (got n={n}); pad y's rows to a "
                         f"multiple of 8 and slice the output")
    _check_operand(out, "out")
    checks.check_no_overlap(out, "out", named[:4])
    if k == 0:
        return _layout(kind, "zero", device, sa, sb, named, expected_m=m)
    _check_operand(a, _NAMES_BMM[0])
    _check_operand(b, _NAMES_BMM[2])
    return _layout(kind, "launch", device, sa, sb, named, expected_m=m)


def normalise_psum(lhs, rhs, out, grouped_layout, expected_m, alignment) -> GemmLayout:
    """Every layout check of the contiguous GEMM with DeepGEMM's psum layout (`m_grouped_fp8_gemm_nt_contiguous(...,
    use_psum_layout=True)`): grouped_layout [G] int32 holds the running row count at the end of each expert; expert
    g's rows are [align(grouped_layout[g - 1], alignment), grouped_layout[g]). expected_m: expected rows per
    expert (0: the average over M), only for the configuration choice."""
    a, sa, b, sb, out, m, n, k, num_groups = _check_stacked_rows(lhs, rhs, out)
    checks.check_index_tensor(grouped_layout, "grouped_layout", (num_groups,), "G (psum layout)")
    for name, value in (("expected_m_for_psum_layout", expected_m), ("the mk alignment", alignment)):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if expected_m < 0:
        raise ValueError(f"expected_m_for_psum_layout must be >= 0, got {expected_m}")
    if alignment <= 0:
        raise ValueError(f"the mk alignment for the contiguous layout must be > 0, got {alignment}")
    if num_groups == 0 or k == 0:
        raise ValueError(f"the psum layout needs G > 0 and k > 0 (as DeepGEMM), got G={num_groups}, k={k}")
    named = list(zip(_NAMES_1D2D + ("grouped_layout",), (a, sa, b, sb, out, grouped_layout)))
    device = checks.check_same_cuda_device(named)
    kind = KernelType.M_GROUPED_PSUM
    hint = min(max(int(expected_m) or ceil_div(m, num_groups), 1), max(m, 1))
    if m == 0 or n == 0:
        return _layout(kind, "none", device, sa, sb, named, expected_m=hint, psum_alignment=alignment)
    if n % 8 != 0:
        raise ValueError(f"rhs[0] (B): the psum layout needs n % 8 == 0 (got n={n}); pad B's rows to a multiple "
                         f"of 8 and slice the output")
    _check_operand(out, "out")
    checks.check_no_overlap(out, "out", named[:4] + named[5:])
    _check_operand(a, "lhs[0] (A)")
    _check_operand(b, "rhs[0] (B)")
    return _layout(kind, "launch", device, sa, sb, named, expected_m=hint, psum_alignment=alignment)


# The variants, as the runtime registers them (through the families that list them).
DENSE = Variant("dense", "gemm_fp8_fp8_bf16_nt", (PAIR, PAIR, TENSOR), normalise_dense, warmup_fields=("n", "k"))
CONTIGUOUS = Variant("contiguous", "m_grouped_gemm_fp8_fp8_bf16_nt_contiguous", (PAIR, PAIR, TENSOR, TENSOR),
                     normalise_contiguous, warmup_fields=("n", "k", "num_groups"))
MASKED = Variant("masked", "m_grouped_gemm_fp8_fp8_bf16_nt_masked", (PAIR, PAIR, TENSOR, TENSOR, INT),
                 normalise_masked, warmup_fields=("n", "k", "num_groups", "expected_m"))
PSUM = Variant("psum", "m_grouped_fp8_gemm_nt_contiguous (psum layout)", (PAIR, PAIR, TENSOR, TENSOR, INT, INT),
               normalise_psum, warmup_fields=("n", "k", "num_groups", "expected_m"))
BMM = Variant("bmm", "bmm_fp8_fp8_bf16_nt", (PAIR, PAIR, TENSOR), normalise_bmm,
              warmup_fields=("n", "k", "num_batches", "m"))
SKIP_HEAD_MID = Variant("skip_head_mid", "fp8_gemm_nt_skip_head_mid", (PAIR, PAIR, TENSOR, INT, INT, INT),
                        normalise_skip_head_mid, warmup_fields=("n", "k", "left", "mid", "right"))
DENSE_FP8_OUT = Variant("dense_fp8_out", "fp8_gemm_nt_fp8_out", (PAIR, PAIR, PAIR), normalise_dense_fp8_out,
                        warmup_fields=("n", "k"))
CONTIGUOUS_FP8_OUT = Variant("contiguous_fp8_out", "m_grouped_fp8_gemm_nt_contiguous_fp8_out",
                             (PAIR, PAIR, PAIR, TENSOR), normalise_contiguous_fp8_out,
                             warmup_fields=("n", "k", "num_groups"))
MASKED_FP8_OUT = Variant("masked_fp8_out", "m_grouped_fp8_gemm_nt_masked_fp8_out", (PAIR, PAIR, PAIR, TENSOR, INT),
                         normalise_masked_fp8_out, warmup_fields=("n", "k", "num_groups", "expected_m"))
# The MoE gate/up GEMMs with SwiGLU and FP8 output; their last argument is the activation clamp's float32 bits (the
# public functions convert activation_clamp), a compile-time constant of the kernel.
# Warmed up without a clamp (a clamped kernel compiles on its first call).
CONTIGUOUS_SWIGLU = Variant("contiguous_swiglu", "m_grouped_fp8_gemm_nt_contiguous_swiglu",
                            (PAIR, PAIR, PAIR, TENSOR, INT), normalise_contiguous_swiglu,
                            warmup_fields=("n", "k", "num_groups"))
MASKED_SWIGLU = Variant("masked_swiglu", "m_grouped_fp8_gemm_nt_masked_swiglu", (PAIR, PAIR, PAIR, TENSOR, INT, INT),
                        normalise_masked_swiglu, warmup_fields=("n", "k", "num_groups", "expected_m"))
