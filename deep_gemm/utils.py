"""Small public helpers (DeepGEMM-compatible names)."""
import functools
from typing import Optional

import torch

from .heuristics.common import align, ceil_div

__all__ = ["ceil_div", "align", "get_tma_aligned_size", "get_col_major_tma_aligned_tensor", "set_num_sms",
           "get_num_sms", "reset_num_sms", "get_device_arch", "device_num_sms"]

_num_sms_cap: Optional[int] = None


@functools.lru_cache(maxsize=None)
def device_num_sms(device_index: int) -> int:
    return torch.cuda.get_device_properties(device_index).multi_processor_count


@functools.lru_cache(maxsize=None)
def get_device_arch(device_index: int) -> str:
    major, minor = torch.cuda.get_device_capability(device_index)
    if (major, minor) == (9, 0):
        return "sm_90a"
    if major == 10:
        return "sm_100a"
    return f"sm_{major}{minor}"


def set_num_sms(num_sms: int) -> None:
    """Cap the persistent grid at `num_sms` SMs (e.g. to leave SMs to communication kernels).

    The cap is part of every cached layout's key, so switching it back and forth (as serving engines do around
    overlapped kernels) keeps the plans of each cap warm instead of dropping them."""
    global _num_sms_cap
    if isinstance(num_sms, bool) or not isinstance(num_sms, int):
        raise TypeError(f"num_sms must be an int, got {type(num_sms).__name__}")
    if num_sms < 1:
        raise ValueError(f"num_sms must be >= 1, got {num_sms}")
    if torch.cuda.is_available():
        total = device_num_sms(torch.cuda.current_device())
        if num_sms > total:
            raise ValueError(f"num_sms={num_sms} exceeds the {total} SMs of the current device")
    from . import _C
    _num_sms_cap = num_sms
    _C.set_num_sms_cap(num_sms)


def reset_num_sms() -> None:
    """Remove the `set_num_sms` cap: the kernels use every SM of the device again."""
    global _num_sms_cap
    from . import _C
    _num_sms_cap = None
    _C.set_num_sms_cap(0)


def get_num_sms(device_index: Optional[int] = None) -> int:
    """SMs the kernels may use: the device's count, or the cap set with `set_num_sms`."""
    if device_index is None:
        if not torch.cuda.is_available():
            if _num_sms_cap is None:
                raise RuntimeError("no CUDA device: call set_num_sms() first or pass --num-sms")
            return _num_sms_cap
        device_index = torch.cuda.current_device()
    total = device_num_sms(device_index)
    return total if _num_sms_cap is None else min(total, _num_sms_cap)


def get_tma_aligned_size(x: int, element_size: int) -> int:
    """Round `x` elements up so that `x * element_size` is a multiple of 16 bytes (TMA stride alignment)."""
    if element_size not in (1, 2, 4, 8, 16):
        raise ValueError(f"element_size must divide 16, got {element_size}")
    return align(x, 16 // element_size)


def get_col_major_tma_aligned_tensor(x: torch.Tensor) -> torch.Tensor:
    """Return `x` ([m, k'] or [g, m, k'], float32) as an MN-major tensor whose M stride is padded to 16 bytes.

    The result has the same shape and values, strides (1, m_aligned) (or (m_aligned * k', 1, m_aligned)); `x` is
    returned unchanged, without a copy, when it already has that layout.
    """
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
    if x.dtype != torch.float32:
        raise TypeError(f"x must be float32 scales, got {x.dtype}")
    if x.dim() not in (2, 3):
        raise ValueError(f"x must be 2-D [m, k] or 3-D [g, m, k], got shape {tuple(x.shape)}")
    from .ops.checks import is_col_major_tma_aligned
    if is_col_major_tma_aligned(x) and x.data_ptr() % 16 == 0:
        return x
    m, k = x.shape[-2], x.shape[-1]
    aligned_m = get_tma_aligned_size(m, x.element_size())
    batch = () if x.dim() == 2 else (x.shape[0],)
    out = torch.empty((*batch, k, aligned_m), device=x.device, dtype=x.dtype).transpose(-1, -2)[..., :m, :]
    out.copy_(x)
    return out
