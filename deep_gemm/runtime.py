"""The host runtime: the one path from a public GEMM call to a kernel launch.

Every public GEMM is `_C.call(op, *args)` (csrc/launch.cpp). For a layout it has seen, `_C` launches through the
layout's cached plan without entering Python. Otherwise it calls `_slow_path` below, which asks the op's kernel
family (deep_gemm/launchers/) to validate the layout once (`normalise`: every error users see comes from there),
then runs the call: per-call pointer checks, any layout conversion, the launch through `_C.launch`. When the call
needed no conversion, the plan goes back to `_C` and later calls with that layout skip Python entirely.

Layouts are keyed by what `_C` reads (dtypes, devices, shapes, strides, host-int arguments) plus the `set_num_sms`
cap, so alternating caps keeps a plan per cap warm.
"""
import contextlib
import enum
from typing import Callable, Dict, Optional

import torch

from ._c_loader import load_c

_C = load_c()  # a missing or broken _C raises ImportError saying why (e.g. an unbuilt checkout shadowing the install)

from .heuristics import common as heuristics_common
from .jit.runtime import CUDADriverError

__all__ = ["Op", "get_launch_path", "stats", "clear_plans", "forced_config", "set_compile_mode", "get_compile_mode"]


class Op(enum.IntEnum):
    """The public kernels (GEMMs and scale-layout transforms), as `_C` numbers them."""
    DENSE = 0
    M_GROUPED_CONTIGUOUS = 1
    M_GROUPED_MASKED = 2
    WGRAD = 3
    K_GROUPED_WGRAD = 4
    M_GROUPED_PSUM = 5  # the contiguous GEMM with DeepGEMM's psum layout (deep_gemm.m_grouped_fp8_gemm_nt_contiguous)
    PACK_UE8M0 = 6            # deep_gemm.utils.get_mn_major_tma_aligned_packed_ue8m0_tensor
    PACK_UE8M0_K_GROUPED = 7  # deep_gemm.utils.get_k_grouped_mn_major_tma_aligned_packed_ue8m0_tensor
    BMM = 8                   # batched GEMM (deep_gemm.bmm_fp8_fp8_bf16_nt)


# How `_C` reads each op's arguments (csrc/launch.cpp ArgKind): a (tensor, scales) pair, a tensor, a host int
# (part of the layout key), a host list of ints (part of the key).
_PAIR, _TENSOR, _INT, _INT_LIST = 0, 1, 2, 3
_SIGNATURES = {
    Op.DENSE: (_PAIR, _PAIR, _TENSOR),
    Op.M_GROUPED_CONTIGUOUS: (_PAIR, _PAIR, _TENSOR, _TENSOR),
    Op.M_GROUPED_MASKED: (_PAIR, _PAIR, _TENSOR, _TENSOR, _INT),
    Op.WGRAD: (_PAIR, _PAIR, _TENSOR),
    Op.K_GROUPED_WGRAD: (_PAIR, _PAIR, _TENSOR, _INT_LIST),
    Op.M_GROUPED_PSUM: (_PAIR, _PAIR, _TENSOR, _TENSOR, _INT, _INT),
    Op.PACK_UE8M0: (_TENSOR, _TENSOR),
    Op.PACK_UE8M0_K_GROUPED: (_TENSOR, _TENSOR, _TENSOR, _INT_LIST, _INT),
    Op.BMM: (_PAIR, _PAIR, _TENSOR),
}

_normalisers: Dict[Op, Callable] = {}
_layouts: Dict[tuple, object] = {}
_MAX_LAYOUTS = 4096
# The GEMMs, which compile mode turns into compile-only calls (the scale-layout transforms still run: their one
# kernel is compiled once, and their results are what the GEMMs are then called with).
_GEMMS = frozenset((Op.DENSE, Op.M_GROUPED_CONTIGUOUS, Op.M_GROUPED_MASKED, Op.WGRAD, Op.K_GROUPED_WGRAD,
                    Op.M_GROUPED_PSUM, Op.BMM))
_compile_mode = False


def _register_families() -> None:
    from .launchers import sf_layout, sm90_fp8_gemm_1d2d as gemm_1d2d, sm90_fp8_wgrad_1d1d as wgrad_1d1d
    _normalisers.update({
        Op.DENSE: gemm_1d2d.normalise_dense,
        Op.M_GROUPED_CONTIGUOUS: gemm_1d2d.normalise_contiguous,
        Op.M_GROUPED_MASKED: gemm_1d2d.normalise_masked,
        Op.WGRAD: wgrad_1d1d.normalise_wgrad,
        Op.K_GROUPED_WGRAD: wgrad_1d1d.normalise_k_grouped,
        Op.M_GROUPED_PSUM: gemm_1d2d.normalise_psum,
        Op.PACK_UE8M0: sf_layout.normalise_pack,
        Op.PACK_UE8M0_K_GROUPED: sf_layout.normalise_pack_k_grouped,
        Op.BMM: gemm_1d2d.normalise_bmm,
    })


def _slow_path(op: int, args: tuple, key: Optional[tuple]):
    """What `_C` calls for a call it cannot launch by itself; returns a plan for `_C` to cache under `key`, or
    None. `key` is None when the call is not fast-path material (then nothing is cached here either)."""
    layout = _layouts.get(key) if key is not None else None
    if layout is None:
        layout = _normalisers[op](*args)
        if key is not None:
            if len(_layouts) >= _MAX_LAYOUTS:
                _layouts.clear()
            _layouts[key] = layout
    if _compile_mode and op in _GEMMS:
        layout.load_kernel(*args)
        return None  # no plan for `_C`: while the mode is on, every GEMM call must come back here
    # NOTES: kernels launch in the current context, so tensors off the current device need a switch (without it
    # the kernel ran in the wrong device's context); only then, since a switch costs microseconds.
    if layout.device.index == torch.cuda.current_device():
        return layout.run(*args)
    with torch.cuda.device(layout.device):
        return layout.run(*args)


def get_launch_path() -> str:
    """How calls reach the GPU: always through "deep_gemm._C" (the C++ module built at install time; there is no
    other launch path, and importing deep_gemm fails if it is missing), with how that build reads tensors:
    "deep_gemm._C (CPython API)" (pip's default, portable) or "deep_gemm._C (torch headers)" (built where torch
    was importable, tied to that torch version)."""
    return f"deep_gemm._C ({_C.tensor_reader()})"


def stats() -> dict:
    """Counters of `_C`: "fast" launches (no Python), "slow" calls through Python, plans "registered" so far and
    "plans" held now. For tests and diagnostics."""
    return _C.stats()


def clear_plans() -> None:
    """Forget every validated layout and cached plan (the next call of each layout validates again)."""
    _layouts.clear()
    _C.clear()
    from .launchers import sf_layout, sm90_fp8_gemm_1d2d as gemm_1d2d, sm90_fp8_wgrad_1d1d as wgrad_1d1d
    from .launchers import sm100_fp8_gemm
    gemm_1d2d.clear_kernels()
    wgrad_1d1d.clear_kernels()
    sf_layout.clear_kernels()
    sm100_fp8_gemm.clear_kernels()
    sm100_fp8_gemm.clear_plans()


def set_compile_mode(enabled: bool) -> None:
    """Compile mode: while on, GEMM calls validate their arguments and compile (or load) their kernel, but launch
    nothing and leave `out` untouched, so running a model's forward pass once with it on fills the kernel cache.
    Turning it on drops the plans `_C` launches by itself, and none are registered while it is on; the validated
    layouts stay, so the first real call of a layout afterwards only builds its plan."""
    global _compile_mode
    if not isinstance(enabled, bool):
        raise TypeError(f"enabled must be a bool, got {type(enabled).__name__}")
    _compile_mode = enabled
    if enabled:
        _C.clear()


def get_compile_mode() -> bool:
    """Whether compile mode (`set_compile_mode`) is on."""
    return _compile_mode


@contextlib.contextmanager
def forced_config(config):
    """Test/tuning hook: every call inside the block runs with kernel configuration `config` (a
    `deep_gemm.heuristics.GemmConfig`) instead of the heuristic's choice. Caches are dropped on entry and exit, so
    plans made with the forced config never serve later calls. Not for production use (a config the kernel
    cannot run fails at compile or launch)."""
    clear_plans()
    previous = heuristics_common.set_forced_config(config)
    try:
        yield
    finally:
        heuristics_common.set_forced_config(previous)
        clear_plans()


def _init() -> None:
    _register_families()
    raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    _C.init(_slow_path, raw_stream, CUDADriverError, torch.Tensor, torch.nn.Parameter,
            (torch.float8_e4m3fn, torch.float32, torch.bfloat16, torch.int32),
            tuple(_SIGNATURES[op] for op in Op))


_init()
call = _C.call
