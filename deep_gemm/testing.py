"""Helpers for users' own tests and benchmarks: FP8 casts, dequantisation, calc_diff, timers."""
from typing import Callable, Iterable, Optional, Tuple, Union

import torch

from .heuristics.common import ceil_div

FP8_MAX = 448.0

__all__ = ["per_token_cast_to_fp8", "per_block_cast_to_fp8", "dequant_per_token", "dequant_per_block", "calc_diff",
           "bench", "bench_kineto"]


def _pad_last(x: torch.Tensor, multiple: int) -> torch.Tensor:
    pad = (-x.shape[-1]) % multiple
    return torch.nn.functional.pad(x, (0, pad)) if pad else x


def per_token_cast_to_fp8(x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """[m, k] -> (e4m3 [m, k], float32 scales [m, ceil(k/128)]); scales multiply: x ~= fp8 * scale."""
    if x.dim() != 2:
        raise ValueError(f"x must be 2-D, got shape {tuple(x.shape)}")
    m, k = x.shape
    xp = _pad_last(x.float(), 128)
    xp = xp.view(m, xp.shape[1] // 128, 128)
    amax = xp.abs().amax(dim=2, keepdim=True).clamp(min=1e-4)
    scale = amax / FP8_MAX
    fp8 = (xp / scale).to(torch.float8_e4m3fn).view(m, xp.shape[1] * 128)[:, :k].contiguous()
    return fp8, scale.squeeze(2).contiguous()


def per_block_cast_to_fp8(x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """[n, k] -> (e4m3 [n, k], float32 scales [ceil(n/128), ceil(k/128)]), one scale per 128x128 block."""
    if x.dim() != 2:
        raise ValueError(f"x must be 2-D, got shape {tuple(x.shape)}")
    n, k = x.shape
    pn, pk = ceil_div(n, 128) * 128, ceil_div(k, 128) * 128
    xp = torch.zeros((pn, pk), dtype=torch.float32, device=x.device)
    xp[:n, :k] = x.float()
    blocks = xp.view(pn // 128, 128, pk // 128, 128)
    amax = blocks.abs().amax(dim=(1, 3), keepdim=True).clamp(min=1e-4)
    scale = amax / FP8_MAX
    fp8 = (blocks / scale).to(torch.float8_e4m3fn).view(pn, pk)[:n, :k].contiguous()
    return fp8, scale.view(pn // 128, pk // 128).contiguous()


def dequant_per_token(x: torch.Tensor, scale: torch.Tensor, dtype=torch.float32) -> torch.Tensor:
    m, k = x.shape
    return (x.to(dtype) * scale.to(dtype).repeat_interleave(128, dim=1)[:, :k])


def dequant_per_block(x: torch.Tensor, scale: torch.Tensor, dtype=torch.float32) -> torch.Tensor:
    n, k = x.shape
    s = scale.to(dtype).repeat_interleave(128, dim=0)[:n].repeat_interleave(128, dim=1)[:, :k]
    return x.to(dtype) * s


def calc_diff(x: torch.Tensor, y: torch.Tensor) -> float:
    """1 - 2 sum(xy) / sum(x^2 + y^2), in float64 (0 for identical tensors)."""
    x, y = x.double(), y.double()
    denominator = (x * x + y * y).sum()
    if denominator == 0:
        return 0.0
    return float(1 - 2 * (x * y).sum() / denominator)


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


def bench_kineto(fn: Callable[[], object], kernel_names: Optional[Union[str, Iterable[str]]] = None,
                 num_tests: int = 30, flush_bytes: int = 8 << 30) -> Union[float, Tuple[float, ...]]:
    """Mean device seconds per call from the torch profiler (kineto).

    `kernel_names`: a substring (or several) selecting kernels; None = every kernel `fn` launched. Each call is
    preceded by a `flush_bytes` memset that flushes L2 and lets the GPU cool a little (ANCHORS.md's method); the
    memset itself is not counted.
    """
    single = isinstance(kernel_names, str) or kernel_names is None
    names = (kernel_names,) if single else tuple(kernel_names)
    flush = torch.empty(flush_bytes // 4, dtype=torch.int32, device="cuda")
    fn()  # warm up: compilation, caches, handles
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(num_tests):
            flush.zero_()
            fn()
        torch.cuda.synchronize()
    totals = [0.0 for _ in names]
    found = [False for _ in names]
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
                found[i] = True
    for n, f in zip(names, found):
        if not f:
            raise RuntimeError(f"no kernel matching {n!r} was profiled")
    result = tuple(t / 1e6 / num_tests for t in totals)
    return result[0] if single else result


# Test and tuning hooks (documented in the README, "Test hooks"): behaviour is selected only through these.
def forced_config(config):
    """Context manager: calls inside the block run kernel configuration `config` (a
    `deep_gemm.heuristics.GemmConfig`) instead of the heuristic's pick; every cached plan is dropped on entry and
    exit. For tests and tuning sweeps (tools/sweep*.py), not for production."""
    from .runtime import forced_config as _forced
    return _forced(config)


def launch_stats() -> dict:
    """Counters of the launch module: "fast" (launched without entering Python), "slow" (through the Python
    path), "registered" (plans handed to the C++ table so far), "plans" (held now)."""
    from .runtime import stats
    return stats()


def clear_plans() -> None:
    """Forget every validated layout, cached plan and loaded kernel handle (the next call of each layout is a
    first call again; the on-disk kernel cache is kept)."""
    from .runtime import clear_plans as _clear
    _clear()
