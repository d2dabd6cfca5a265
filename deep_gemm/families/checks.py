"""Input validation and TMA operand geometry shared by the kernel families (not a family itself): every failure names
the argument and what was expected."""
import numbers
from typing import Optional, Sequence, Tuple

import torch

from ..scale_layout import get_col_major_tma_aligned_tensor, get_tma_aligned_size


def unpack_pair(value, name: str) -> Tuple[torch.Tensor, torch.Tensor]:
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        raise TypeError(f"{name} must be a (tensor, scales) pair, got {type(value).__name__}"
                        + (f" of length {len(value)}" if isinstance(value, (tuple, list)) else ""))
    return value[0], value[1]


def traced_call(op: str, lhs, rhs, out, *rest) -> None:
    """While torch.compile traces: the call as one node of the custom operator torch.ops.deep_gemm.<op>
    (deep_gemm/ops/library.py), the (tensor, scales) pairs unpacked."""
    a, sa = unpack_pair(lhs, "lhs")
    b, sb = unpack_pair(rhs, "rhs")
    getattr(torch.ops.deep_gemm, op)(a, sa, b, sb, out, *rest)


def check_tensor(t, name: str, dtype, dim: Optional[int]) -> torch.Tensor:
    """A tensor of this dtype (or of one of a tuple of dtypes) and rank (`dim=None`: any rank)."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    dtypes = dtype if isinstance(dtype, tuple) else (dtype,)
    if t.dtype not in dtypes:
        raise TypeError(f"{name} must have dtype {' or '.join(map(str, dtypes))}, got {t.dtype}")
    if dim is not None and t.dim() != dim:
        raise ValueError(f"{name} must be {dim}-D, got shape {tuple(t.shape)}")
    return t


def check_shape(t: torch.Tensor, name: str, expected: Sequence[int], what: str = "") -> None:
    if tuple(t.shape) != tuple(expected):
        raise ValueError(f"{name} must have shape {tuple(expected)}{' (' + what + ')' if what else ''}, "
                         f"got {tuple(t.shape)}")


def check_same_cuda_device(tensors: Sequence[Tuple[str, torch.Tensor]]) -> torch.device:
    first_name, first = tensors[0]
    if first.device.type != "cuda":
        raise ValueError(f"{first_name} must be a CUDA tensor, got device {first.device}")
    for name, t in tensors[1:]:
        if t.device != first.device:
            raise ValueError(f"{name} is on {t.device} but {first_name} is on {first.device}; "
                             f"all tensors must be on one CUDA device")
    return first.device


def check_tma_matrix(t: torch.Tensor, name: str) -> None:
    """Row-major 2-D operand for TMA: unit inner stride, 16-byte aligned row stride and base address."""
    rows, cols = t.shape
    if cols > 1 and t.stride(1) != 1:
        raise ValueError(f"{name} must have a contiguous inner dimension (stride(1) == 1), got strides {t.stride()}")
    es = t.element_size()
    if rows > 1 and (t.stride(0) * es) % 16 != 0:
        raise ValueError(f"{name}'s row stride is {t.stride(0)} elements = {t.stride(0) * es} bytes; TMA needs a "
                         f"multiple of 16 bytes (e.g. allocate rows padded to {16 // es} elements and pass a view)")
    if rows > 1 and t.stride(0) < cols:
        raise ValueError(f"{name} has overlapping rows (stride(0)={t.stride(0)} < {cols} columns)")
    if t.data_ptr() % 16 != 0:
        raise ValueError(f"{name}'s data pointer must be 16-byte aligned, got offset {t.data_ptr() % 16}")


def check_out_rows(out: torch.Tensor, ragged_n: bool) -> None:
    """A 2-D BF16 output for the kernels: a TMA matrix, or, when n % 8 != 0 (written through an aligned temporary
    and one copy), any tensor with a unit inner stride."""
    n = out.shape[1]
    if not ragged_n:
        check_tma_matrix(out, "out")
    elif n > 1 and out.stride(1) != 1:
        raise ValueError(f"out must have a contiguous inner dimension (stride(1) == 1), got strides {out.stride()}")


def extent_bytes(t: torch.Tensor) -> int:
    """Bytes from the first to one past the last element of `t` (0 when empty)."""
    if t.numel() == 0:
        return 0
    return (sum((size - 1) * stride for size, stride in zip(t.shape, t.stride())) + 1) * t.element_size()


def check_no_overlap_ptrs(out_name: str, out_ptr: int, out_extent: int,
                          inputs: Sequence[Tuple[str, int, int]]) -> None:
    """Raise if [out_ptr, out_ptr + out_extent) intersects any input's (name, ptr, extent) range."""
    if out_extent == 0:
        return
    for name, ptr, ext in inputs:
        if ext and ptr < out_ptr + out_extent and out_ptr < ptr + ext:
            raise ValueError(f"{out_name} overlaps the memory of {name}; the output must not alias an input")


def check_no_overlap(out: torch.Tensor, out_name: str, inputs: Sequence[Tuple[str, torch.Tensor]]) -> None:
    check_no_overlap_ptrs(out_name, out.data_ptr(), extent_bytes(out),
                          [(name, t.data_ptr(), extent_bytes(t)) for name, t in inputs])


def check_index_tensor(t, name: str, shape: Sequence[int], what: str) -> torch.Tensor:
    """A device int32 index/count tensor of the given shape (its device is checked with the others)."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of int32, got {type(t).__name__}")
    if t.dtype != torch.int32:
        raise TypeError(f"{name} must have dtype torch.int32, got {t.dtype}")
    check_shape(t, name, shape, what)
    if t.numel() > 1 and t.stride(0) != 1:
        raise ValueError(f"{name} must be contiguous, got stride {t.stride()}")
    return t


def rows_view(t: torch.Tensor, name: str) -> torch.Tensor:
    """`t` as 2-D rows: itself when 2-D; a [G, R, C] tensor as [G * R, C], which needs its groups stacked
    uniformly (stride(0) == R * stride(1), as in a contiguous tensor or a slice along its last dimension)."""
    if t.dim() == 2:
        return t
    g, r, c = t.shape
    if r == 1:
        return t[:, 0]  # one row per group: the group stride is the row stride, whatever stride(1) says
    if g > 1 and r > 0 and t.stride(0) != r * t.stride(1):
        raise ValueError(f"{name} must stack its {g} groups uniformly (stride(0) == size(1) * stride(1)), got "
                         f"shape {tuple(t.shape)} and strides {t.stride()}")
    return t.view(g * r, c)


def tma_row_stride(t: torch.Tensor) -> int:
    """Row stride (elements) to give TMA for a 2-D operand: its own, or any legal one when there is a single row."""
    rows, cols = t.shape
    return t.stride(0) if rows > 1 else get_tma_aligned_size(cols, t.element_size())


def tensor_geometry(tensors) -> Tuple:
    """(shape, strides) of each tensor: what a plan's descriptors depend on besides the addresses."""
    return tuple((tuple(t.shape), t.stride()) for t in tensors)


def tma_ready_scales(sa: torch.Tensor, sb: torch.Tensor, sa_ready: bool, sb_contiguous: bool):
    """(SA, SB) as the kernels read them: SA MN-major and TMA-aligned (converted unless `sa_ready` and its pointer
    is 16-byte aligned), SB contiguous. `sa_ready` / `sb_contiguous` come from a caller's cached layout checks."""
    if not (sa_ready and sa.data_ptr() % 16 == 0):
        sa = get_col_major_tma_aligned_tensor(sa)
    return sa, sb if sb_contiguous else sb.contiguous()


def host_int(value, name: str) -> int:
    """A host int argument >= 0 (bools refused), e.g. expected_m."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {value}")
    return int(value)


def zero_masked_rows(out: torch.Tensor, masked_m: torch.Tensor) -> None:
    """The masked layout's k = 0 result: rows < masked_m[g] of each group of out [G, m_max, n] become zeros, the
    others stay as they are (device-side, no host sync)."""
    rows = torch.arange(out.shape[1], device=out.device).view(1, -1, 1)
    out.masked_fill_(rows < masked_m.view(-1, 1, 1), 0)
