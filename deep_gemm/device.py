"""The device facts the kernel families read: a device's architecture and its SM count, capped by
`deep_gemm.set_num_sms` (whose public setter lives in `deep_gemm.utils`; the cap itself is kept here so that the
families, below the public API, can read it)."""
import functools
from typing import Optional

import torch

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


def num_sms_cap() -> Optional[int]:
    """The `set_num_sms` cap, or None."""
    return _num_sms_cap


def set_num_sms_cap(num_sms: Optional[int]) -> None:
    """Record the cap (None: no cap); `deep_gemm.utils.set_num_sms` validates it and tells `_C` too."""
    global _num_sms_cap
    _num_sms_cap = num_sms


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
