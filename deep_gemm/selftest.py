"""The first-use self-test gate of the sm100 kernel families.

The sm_100a kernels were compiled and inspected (SASS) but never run on Blackwell hardware when they were written.
So the first time a process launches one of their variants (e.g. "dense": the dense GEMM with FP32 scales,
"dense_ue8m0": with UE8M0 scales) on a device, the family asks this gate to run a few small ragged problems through it
and compare them with a dequantised FP32 reference (`ensure`; the problems are deep_gemm/sm100_selftest.py's,
registered here with `register` because they call the public ops, above the families). The verdict is cached per
(device, variant) for the life of the process: a passing one costs one dict lookup per new plan afterwards; a failing
one raises `SelfTestError` now and at every later use, so an untested kernel never silently returns wrong numbers.
DG_SM100_SELFTEST=0 turns the gate off (the kernels then run unchecked).
"""
import threading
import time
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Tuple

from .envs import read_env

__all__ = ["CaseResult", "SelfTestError", "ensure", "verdicts", "clear", "wait_for", "register", "run_registered",
           "TIMEOUT_S"]

# How long one self-test problem may run before it counts as hung (a wrong barrier protocol deadlocks rather than
# returning wrong numbers); a correct one takes milliseconds.
TIMEOUT_S = 20.0


class SelfTestError(RuntimeError):
    """A kernel family gave wrong results in its first-use self-test on this device."""


@dataclass(frozen=True)
class CaseResult:
    """One self-test problem: its description, calc_diff against the reference, the bound it must stay under, and
    any other failure found (e.g. writes outside the output), or None."""
    problem: str
    diff: float
    bound: float
    error: Optional[str] = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.diff < self.bound  # NaN diff: not ok


# The registered problem runner: (kind, scales, device) -> results (deep_gemm/sm100_selftest.py).
_problems: Optional[Callable[..., List["CaseResult"]]] = None

_RUNNING = object()
# (device key, family) -> "" (passed), a failure message, or _RUNNING (its self-test is running in this thread).
_verdicts: Dict[Tuple, object] = {}
_lock = threading.RLock()


def wait_for(done: Callable[[], bool], timeout_s: float = TIMEOUT_S, poll_s: float = 0.001) -> bool:
    """Poll `done` (e.g. a CUDA event's `query`) until it returns True or `timeout_s` passes; whether it finished."""
    deadline = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() >= deadline:
            return False
        time.sleep(poll_s)
    return True


def device_key(device_index: int) -> Tuple:
    """A device as the cache sees it: its index, name and compute capability."""
    import torch
    return (device_index, torch.cuda.get_device_name(device_index), torch.cuda.get_device_capability(device_index))


def _message(family: str, device: Tuple, failures: List[CaseResult]) -> str:
    lines = [f"{c.problem}: " + (c.error or f"calc_diff {c.diff:.3g} >= {c.bound:g}") for c in failures]
    return (f"deep_gemm: the sm100 kernel of the {family!r} variant FAILED its self-test on device {device[0]} "
            f"({device[1]}, sm_{device[2][0]}{device[2][1]}): its results are wrong on this device, so it will not be "
            f"used. Failed problems: " + "; ".join(lines) + ". Please report this with `python -m deep_gemm doctor` "
            f"output. DG_SM100_SELFTEST=0 skips the check (at your own risk).")


def ensure(device_index: int, family: str, runner: Callable[[], List[CaseResult]],
           key: Optional[Tuple] = None) -> None:
    """Make sure `family` passed its self-test on device `device_index`: run `runner` (which launches the family's
    kernels on small problems and returns their results) the first time, cache the verdict, and raise SelfTestError
    if any problem failed. `key` overrides the device key (tests). Launches made by `runner` itself pass through."""
    if not read_env().sm100_selftest:
        return
    device = key if key is not None else device_key(device_index)
    cache_key = (device, family)
    with _lock:
        verdict = _verdicts.get(cache_key)
        if verdict is _RUNNING or verdict == "":
            return
        if verdict is not None:
            raise SelfTestError(verdict)
        _verdicts[cache_key] = _RUNNING
        try:
            results = runner()
        except BaseException:
            del _verdicts[cache_key]  # no verdict: an error of the runner itself, try again next time
            raise
        failures = [r for r in results if not r.ok]
        if not results:
            failures = [CaseResult("(no problem ran)", float("nan"), 0.0, "the self-test ran no problem")]
        verdict = _verdicts[cache_key] = _message(family, device, failures) if failures else ""
    if verdict:
        raise SelfTestError(verdict)


def verdicts() -> Dict[Tuple, bool]:
    """{(device key, family): passed} of the self-tests this process finished."""
    with _lock:
        return {k: v == "" for k, v in _verdicts.items() if v is not _RUNNING}


def clear() -> None:
    """Forget every verdict (tests)."""
    with _lock:
        _verdicts.clear()


def register(problems: Callable[..., List[CaseResult]]) -> None:
    """Set the function that runs a family's self-test problems (deep_gemm/sm100_selftest.py does, on import)."""
    global _problems
    _problems = problems


def run_registered(*args) -> List[CaseResult]:
    """Run the registered problems with `args` (a runner for `ensure`)."""
    if _problems is None:
        raise RuntimeError("no self-test problems are registered (deep_gemm.sm100_selftest registers them when "
                           "deep_gemm is imported)")
    return _problems(*args)
