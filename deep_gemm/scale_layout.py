"""Operand and scale layouts the kernels read, below the public API (which re-exports them from
`deep_gemm.utils.layout` and `deep_gemm.utils.math`) so that the kernel families can use them: TMA alignment, the
MN-major TMA-aligned scale layout, scales rounded up to powers of two (UE8M0)."""
import torch

from .heuristics.common import align


def get_tma_aligned_size(x: int, element_size: int) -> int:
    """Round `x` elements up so that `x * element_size` is a multiple of 16 bytes (TMA stride alignment)."""
    if element_size not in (1, 2, 4, 8, 16):
        raise ValueError(f"element_size must divide 16, got {element_size}")
    return align(x, 16 // element_size)


def is_col_major_tma_aligned(x: torch.Tensor) -> bool:
    """Whether [m, k'] / [g, m, k'] `x` has the strides `get_col_major_tma_aligned_tensor` returns (the pointer's
    16-byte alignment is not checked: it changes from call to call where the layout does not)."""
    m, k = x.shape[-2], x.shape[-1]
    aligned_m = get_tma_aligned_size(m, x.element_size())
    if not (x.stride(-2) == 1 and (x.stride(-1) == aligned_m or k == 1)):
        return False
    return x.dim() == 2 or x.stride(0) == aligned_m * k or x.shape[0] == 1


def get_col_major_tma_aligned_tensor(x: torch.Tensor) -> torch.Tensor:
    """Return `x` ([m, k'] or [g, m, k'], float32) as an MN-major tensor whose M stride is padded to 16 bytes.

    The result has the same shape and values, strides (1, m_aligned) (or (m_aligned * k', 1, m_aligned)); `x` is
    returned without a copy when it already has that layout (as a view with these strides when it differs only in
    the strides of size-1 dimensions), else copied (one copy kernel).
    """
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
    if x.dtype != torch.float32:
        raise TypeError(f"x must be float32 scales, got {x.dtype}")
    if x.dim() not in (2, 3):
        raise ValueError(f"x must be 2-D [m, k] or 3-D [g, m, k], got shape {tuple(x.shape)}")
    m, k = x.shape[-2], x.shape[-1]
    aligned_m = get_tma_aligned_size(m, x.element_size())
    if is_col_major_tma_aligned(x) and x.data_ptr() % 16 == 0:
        # NOTES: the strides of size-1 dimensions are arbitrary; the result always reports the canonical ones
        # (DeepGEMM's tests check them), as a view of the same memory.
        canonical = (1, aligned_m) if x.dim() == 2 else (aligned_m * k, 1, aligned_m)
        return x if x.stride() == canonical else x.as_strided(x.shape, canonical, x.storage_offset())
    batch = () if x.dim() == 2 else (x.shape[0],)
    out = torch.empty((*batch, k, aligned_m), device=x.device, dtype=x.dtype).transpose(-1, -2)[..., :m, :]
    out.copy_(x)
    return out


def ceil_to_ue8m0(x: torch.Tensor) -> torch.Tensor:
    """The smallest power of two >= |x| (float32), exponent clamped to the normal range [2^-126, 2^127]."""
    bits = x.abs().float().view(torch.int32)
    exponent = (bits >> 23) & 0xFF
    exponent = exponent + ((bits & 0x7FFFFF) != 0).to(torch.int32)  # round up unless already a power of two
    return (exponent.clamp(1, 254) << 23).view(torch.float32)
