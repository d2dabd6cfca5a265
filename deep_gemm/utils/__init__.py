"""Small public helpers with DeepGEMM's names: SM counts and caps, scale layouts (`deep_gemm.utils.layout`), FP8 / FP4
casts (`deep_gemm.utils.math`)."""
import functools
from typing import Optional

import torch

from ..heuristics.common import align, ceil_div


_num_sms_cap: Optional[int] = None


@functools.lru_cache(maxsize=None)
def device_num_sms(device_index: int) -> int:
    """The SM count of CUDA device `device_index` (ignores the `set_num_sms` cap; see `get_num_sms`)."""
    return torch.cuda.get_device_properties(device_index).multi_processor_count


@functools.lru_cache(maxsize=None)
def get_device_arch(device_index: int) -> str:
    """The kernel arch string of CUDA device `device_index`: "sm_90a", "sm_100a", else "sm_<major><minor>" (no
    kernels)."""
    major, minor = torch.cuda.get_device_capability(device_index)
    if (major, minor) == (9, 0):
        return "sm_90a"
    if (major, minor) == (10, 0):  # B200 / GB200; sm_100a cubins do not load on other 10.x parts (B300 is 10.3)
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
    from .. import _C
    _num_sms_cap = num_sms
    _C.set_num_sms_cap(num_sms)


def reset_num_sms() -> None:
    """Remove the `set_num_sms` cap: the kernels use every SM of the device again."""
    global _num_sms_cap
    from .. import _C
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


# NOTES: last, since `layout` reaches the runtime, whose launchers import the SM helpers above.
from . import layout, math  # noqa: E402
from .layout import *  # noqa: F401,F403,E402
from .math import *  # noqa: F401,F403,E402

__all__ = ["set_num_sms", "get_num_sms", "reset_num_sms", "get_device_arch", "device_num_sms", "layout", "math"] \
    + layout.__all__ + [n for n in math.__all__ if n not in layout.__all__]
