"""Helpers for users' own tests and benchmarks (DeepGEMM's `deep_gemm.testing` names): FP8 casts, dequantisation,
calc_diff, count_bytes, timers, test decorators."""
import contextlib
import functools
import os
import sys
from typing import Callable, Iterable, Optional, Tuple, Union

import torch

from . import runtime
from .utils.math import FP8_MAX, per_block_cast_to_fp8, per_channel_cast_to_fp8, per_token_cast_to_fp8  # noqa: F401

__all__ = ["per_token_cast_to_fp8", "per_block_cast_to_fp8", "per_channel_cast_to_fp8", "dequant_per_token",
           "dequant_per_block", "calc_diff", "DiffAccumulator", "count_bytes", "bench", "bench_kineto",
           "get_arch_major", "test_filter", "ignore_env", "assert_bitwise_equal"]


def dequant_per_token(x: torch.Tensor, scale: torch.Tensor, dtype=torch.float32) -> torch.Tensor:
    """x [m, k] (FP8) times its 1x128 per-token-group scales [m, ceil(k/128)], in `dtype`."""
    m, k = x.shape
    return (x.to(dtype) * scale.to(dtype).repeat_interleave(128, dim=1)[:, :k])


def dequant_per_block(x: torch.Tensor, scale: torch.Tensor, dtype=torch.float32) -> torch.Tensor:
    """x [n, k] (FP8) times its 128x128 per-block scales [ceil(n/128), ceil(k/128)], in `dtype`."""
    n, k = x.shape
    s = scale.to(dtype).repeat_interleave(128, dim=0)[:n].repeat_interleave(128, dim=1)[:, :k]
    return x.to(dtype) * s


# Elements per float64 block in calc_diff: four float64 temporaries of this size (2 GiB) at most, so the metric of
# an output of several billion elements fits next to the output on an 80 GB card.
CALC_DIFF_CHUNK_ELEMENTS = 1 << 26


def _row_blocks(x: torch.Tensor, y: torch.Tensor, chunk_elements: int):
    """Aligned blocks of whole rows (a row is the last dimension) of two same-shaped tensors, about `chunk_elements`
    elements each; views where the leading dimensions merge, so only one block at a time is copied or upcast."""
    if x.shape != y.shape:
        raise ValueError(f"calc_diff: x and y must have the same shape, got {tuple(x.shape)} and {tuple(y.shape)}")
    if x.numel() == 0:
        return
    cols = x.shape[-1] if x.dim() >= 2 else 1
    x2, y2 = x.reshape(-1, cols), y.reshape(-1, cols)
    step = max(1, chunk_elements // cols)
    for start in range(0, x2.shape[0], step):
        yield x2[start:start + step], y2[start:start + step]


class DiffAccumulator:
    """calc_diff of data that arrives in pieces: `add(x, y)` each aligned pair of same-shaped tensors, then `value()`
    is calc_diff of their concatenation (so a masked selection or a derived tensor is measured without
    materialising it whole). Sums are float64, block by block of at most `chunk_elements` elements."""

    def __init__(self, chunk_elements: Optional[int] = None):
        chunk_elements = CALC_DIFF_CHUNK_ELEMENTS if chunk_elements is None else chunk_elements
        if not isinstance(chunk_elements, int) or chunk_elements < 1:
            raise ValueError(f"chunk_elements must be a positive int, got {chunk_elements!r}")
        self.chunk_elements = chunk_elements
        self.dot = 0.0   # sum(x * y)
        self.norm = 0.0  # sum(x^2 + y^2)

    def add(self, x: torch.Tensor, y: torch.Tensor) -> "DiffAccumulator":
        for xb, yb in _row_blocks(x, y, self.chunk_elements):
            xb, yb = xb.double(), yb.double()
            self.dot += float((xb * yb).sum())
            self.norm += float((xb * xb + yb * yb).sum())
        return self

    def value(self) -> float:
        return 0.0 if self.norm == 0 else 1 - 2 * self.dot / self.norm


def calc_diff(x: torch.Tensor, y: torch.Tensor) -> float:
    """1 - 2 sum(xy) / sum(x^2 + y^2), in float64 (0 for identical tensors). x and y have the same shape; the
    float64 sums run over blocks of `CALC_DIFF_CHUNK_ELEMENTS` elements, so a large output needs no full-size
    float64 copy (the result equals the one-block sum to float64 rounding)."""
    return DiffAccumulator().add(x, y).value()


def bench(fn: Callable[[], object], num_warmups: int = 5, num_tests: int = 30, flush_bytes: int = 256 << 20) -> float:
    """Mean seconds per call by CUDA events, flushing L2 with a memset before every call."""
    flush = torch.empty(flush_bytes // 4, dtype=torch.int32, device="cuda")
    for _ in range(num_warmups):
        fn()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(num_tests)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(num_tests)]
    for i in range(num_tests):
        flush.zero_()
        starts[i].record()
        fn()
        ends[i].record()
    torch.cuda.synchronize()
    return sum(s.elapsed_time(e) for s, e in zip(starts, ends)) / num_tests / 1e3


@contextlib.contextmanager
def _silenced(active: bool):
    """Redirect this process's stdout / stderr file descriptors to /dev/null inside the block (kineto's own prints
    come from C++, so sys.stdout alone is not enough)."""
    if not active:
        yield
        return
    sys.stdout.flush(), sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    with open(os.devnull, "w") as null:
        os.dup2(null.fileno(), 1), os.dup2(null.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved[0], 1), os.dup2(saved[1], 2)
            os.close(saved[0]), os.close(saved[1])


def bench_kineto(fn: Callable[[], object], kernel_names: Optional[Union[str, Iterable[str]]] = None,
                 num_tests: int = 30, suppress_kineto_output: bool = False, trace_path: Optional[str] = None,
                 flush_l2: bool = True, with_multiple_kernels: bool = False, barrier: Optional[Callable] = None,
                 flush_bytes: int = 8 << 30) -> Union[float, Tuple[float, ...]]:
    """Mean device seconds per call from the torch profiler (kineto), with DeepGEMM's signature.

    `kernel_names`: a substring, or a tuple of them, selecting kernels (a tuple gives a tuple of times); None =
    every kernel `fn` launched. A name no kernel matches gives 0 (as DeepGEMM). Unless `with_multiple_kernels`, a
    name matching two distinct kernels is an AssertionError. The time is the sum of the matching kernels per call
    (DeepGEMM divides by the kernels' occurrences instead: the same when a call launches one matching kernel).
    With `flush_l2`, each call is preceded by a `flush_bytes` memset that flushes L2 and lets the GPU cool a little
    (DeepGEMM's method), not counted. `barrier`: called before each call (multi-process benchmarks).
    `trace_path`: also write a Chrome trace there. `suppress_kineto_output`: silence the profiler's prints.
    With DG_USE_NVIDIA_TOOLS=1 (under compute-sanitizer / Nsight) nothing is profiled and 1 is returned per name.
    """
    single = isinstance(kernel_names, str) or kernel_names is None
    names = (kernel_names,) if single else tuple(kernel_names)
    if int(os.environ.get("DG_USE_NVIDIA_TOOLS", "0") or 0):
        return 1 if single else (1,) * len(names)
    flush = torch.empty(flush_bytes // 4, dtype=torch.int32, device="cuda") if flush_l2 else None
    fn()  # warm up: compilation, caches, handles
    torch.cuda.synchronize()
    with _silenced(suppress_kineto_output):
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _ in range(num_tests):
                if flush is not None:
                    flush.zero_()
                if barrier is not None:
                    barrier()
                fn()
            torch.cuda.synchronize()
    if trace_path is not None:
        prof.export_chrome_trace(trace_path)
    totals = [0.0 for _ in names]
    matched = [set() for _ in names]
    for evt in prof.key_averages():
        # NOTES: only device-side kernel records; the CPU launch records carry the same time as "device time".
        if getattr(evt, "device_type", None) != torch.autograd.DeviceType.CUDA:
            continue
        t = getattr(evt, "self_device_time_total", None)
        if t is None:
            t = evt.self_cuda_time_total
        if t <= 0:
            continue
        key = evt.key
        is_flush = "fill" in key.lower() or "memset" in key.lower()
        for i, n in enumerate(names):
            if (n is None and not is_flush) or (n is not None and n in key):
                totals[i] += t
                matched[i].add(key)
    if not with_multiple_kernels:
        for n, keys in zip(names, matched):
            assert n is None or len(keys) <= 1, f"{len(keys)} kernels match {n!r}: {sorted(keys)}"
    result = tuple(t / 1e6 / num_tests for t in totals)
    return result[0] if single else result


def count_bytes(*tensors) -> int:
    """Bytes of the given tensors (tuples and lists are walked; None counts 0)."""
    total = 0
    for t in tensors:
        if isinstance(t, (tuple, list)):
            total += count_bytes(*t)
        elif t is not None:
            total += t.numel() * t.element_size()
    return total


def get_arch_major() -> int:
    """Compute capability major of the current CUDA device (9 on Hopper)."""
    return torch.cuda.get_device_capability()[0]


def test_filter(condition: Callable[[], bool]):
    """Decorator: run the test only when `condition()` holds, else print that it was filtered (DeepGEMM's tests)."""
    def decorator(func):
        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            if condition():
                return func(*args, **kwargs)
            print(f"{func.__name__}:\n > Filtered by {condition}\n")
        return wrapper
    return decorator


def ignore_env(name: str, condition: Callable[[], bool]):
    """Decorator: while the function runs and `condition()` holds, environment variable `name` is unset (restored
    afterwards, also on an exception)."""
    def decorator(func):
        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            if not condition():
                return func(*args, **kwargs)
            saved = os.environ.pop(name, None)
            try:
                return func(*args, **kwargs)
            finally:
                if saved is not None:
                    os.environ[name] = saved
        return wrapper
    return decorator


def assert_bitwise_equal(x: torch.Tensor, y: torch.Tensor, label: str = "") -> None:
    """Raise AssertionError unless x and y have the same shape, dtype and bytes; the message locates the first
    differing element."""
    assert x.shape == y.shape, f"shapes differ{f' ({label})' if label else ''}: {tuple(x.shape)} vs {tuple(y.shape)}"
    assert x.dtype == y.dtype, f"dtypes differ{f' ({label})' if label else ''}: {x.dtype} vs {y.dtype}"
    xb, yb = x.contiguous().view(torch.uint8).flatten(), y.contiguous().view(torch.uint8).flatten()
    if torch.equal(xb, yb):
        return
    first = int((xb != yb).nonzero()[0].item())
    element = first // x.element_size()
    coord = tuple(int(c) for c in torch.unravel_index(torch.tensor(element), tuple(x.shape)))
    raise AssertionError(f"bitwise mismatch{f' ({label})' if label else ''}: {int((xb != yb).sum())} of {xb.numel()} "
                         f"bytes differ; first at element {coord}: {x.flatten()[element].item()} vs "
                         f"{y.flatten()[element].item()}")


# Test and tuning hooks (documented in docs/internals.md, "Test hooks"): behaviour is selected only through these.
def forced_config(config):
    """Context manager: calls inside the block run kernel configuration `config` (a
    `deep_gemm.heuristics.GemmConfig`) instead of the heuristic's pick; every cached plan is dropped on entry and
    exit. For tests and tuning sweeps (tools/tune.py), not for production."""
    return runtime.forced_config(config)


def launch_stats() -> dict:
    """Counters of the launch module: "fast" (launched without entering Python), "slow" (through the Python
    path), "registered" (plans handed to the C++ table so far), "plans" (held now)."""
    return runtime.stats()


def clear_plans() -> None:
    """Forget every validated layout, cached plan and loaded kernel handle (the next call of each layout is a
    first call again; the on-disk kernel cache is kept)."""
    runtime.clear_plans()
