"""Small public helpers with DeepGEMM's names: SM counts and caps, scale layouts (`deep_gemm.utils.layout`), FP8 / FP4
casts (`deep_gemm.utils.math`)."""
import torch

from ..device import device_num_sms, get_device_arch, get_num_sms
from ..runtime import set_num_sms_cap
from . import layout, math
from .layout import *  # noqa: F401,F403
from .math import *  # noqa: F401,F403


def set_num_sms(num_sms: int) -> None:
    """Cap the persistent grid at `num_sms` SMs (e.g. to leave SMs to communication kernels).

    The cap is part of every cached layout's key, so switching it back and forth (as serving engines do around
    overlapped kernels) keeps the plans of each cap warm instead of dropping them."""
    if isinstance(num_sms, bool) or not isinstance(num_sms, int):
        raise TypeError(f"num_sms must be an int, got {type(num_sms).__name__}")
    if num_sms < 1:
        raise ValueError(f"num_sms must be >= 1, got {num_sms}")
    if torch.cuda.is_available():
        total = device_num_sms(torch.cuda.current_device())
        if num_sms > total:
            raise ValueError(f"num_sms={num_sms} exceeds the {total} SMs of the current device")
    set_num_sms_cap(num_sms)


def reset_num_sms() -> None:
    """Remove the `set_num_sms` cap: the kernels use every SM of the device again."""
    set_num_sms_cap(None)


__all__ = ["set_num_sms", "get_num_sms", "reset_num_sms", "get_device_arch", "device_num_sms", "layout", "math"] \
    + layout.__all__ + [n for n in math.__all__ if n not in layout.__all__]
