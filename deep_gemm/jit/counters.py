"""Counts of kernel builds in this process (see `deep_gemm.jit.stats`); a module of its own so precompile workers'
reports (deep_gemm.jit.parallel) and in-process builds add to the same numbers without an import cycle."""
import threading
from typing import Dict

_lock = threading.Lock()
_counts = {"compiled": 0, "disk_hits": 0}


def add(delta: Dict[str, int]) -> None:
    with _lock:
        for name in _counts:
            _counts[name] += int(delta.get(name, 0))


def snapshot() -> Dict[str, int]:
    with _lock:
        return dict(_counts)
