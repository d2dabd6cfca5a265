"""The host runtime: the one path from a public GEMM call to a kernel launch.

Every public GEMM is `_C.call(op, *args)` (csrc/launch.cpp). For a layout it has seen, `_C` launches through the
layout's cached plan without entering Python. Otherwise it calls `_slow_path` below, which asks the op's variant
(deep_gemm/families/) to validate the layout once (`normalise`: every error users see comes from there), binds the
layout to the family that serves the op on the device's architecture (the one arch dispatch, from `FAMILIES`, the
registry), then runs the call: per-call pointer checks, any layout conversion, the launch through `_C.launch`. When
the call needed no conversion, the plan goes back to `_C` and later calls with that layout skip Python entirely.

Layouts are keyed by what `_C` reads (dtypes, devices, shapes, strides, host-int arguments) plus the `set_num_sms`
cap, so alternating caps keeps a plan per cap warm.
"""
import contextlib
import enum
import functools
from typing import Dict, Optional, Tuple

import torch

from ._c_loader import load_c

_C = load_c()  # a missing or broken _C raises ImportError saying why (e.g. an unbuilt checkout shadowing the install)

from . import device
from .families import sf_layout, sm90_bf16_gemm, sm90_fp8_gemm_1d2d, sm90_fp8_wgrad_1d1d, sm100_fp8_gemm_1d2d
from .families import sm90_fp8_mqa_logits, sm90_fp8_paged_mqa_logits, sm90_tf32_hc_prenorm
from .families import sm90_fp8_cast
from .families.variant import ANY_ARCH, Family, Variant
from .heuristics import common as heuristics_common
from .jit.runtime import CUDADriverError

__all__ = ["Op", "FAMILIES", "VARIANTS", "families_of", "variants_on", "k_split_count", "get_launch_path", "stats",
           "clear_plans",
           "forced_config", "set_compile_mode", "get_compile_mode"]

# The registry: one line per kernel family (deep_gemm/families/). The `Op` numbers, the argument signatures `_C`
# reads, compile mode's GEMMs, the arch dispatch and the variant lists of the warm-up and the tools derive from it.
FAMILIES: Tuple[Family, ...] = (
    sm90_fp8_gemm_1d2d.FAMILY,
    sm90_fp8_wgrad_1d1d.FAMILY,
    sm100_fp8_gemm_1d2d.FAMILY,
    sf_layout.FAMILY,
    sm90_bf16_gemm.FAMILY,
    sm90_tf32_hc_prenorm.FAMILY,
    sm90_fp8_mqa_logits.FAMILY,
    sm90_fp8_paged_mqa_logits.FAMILY,
    sm90_fp8_cast.FAMILY,
)


def _variants() -> Tuple[Variant, ...]:
    seen: Dict[str, Variant] = {}
    for family in FAMILIES:
        for variant in family.variants:
            if seen.setdefault(variant.name, variant) is not variant:
                raise AssertionError(f"two variants are named {variant.name!r}")
    return tuple(seen.values())


# Every variant once, in registry order: the public ops, as `_C` numbers them.
VARIANTS: Tuple[Variant, ...] = _variants()
Op = enum.IntEnum("Op", [(v.name.upper(), i) for i, v in enumerate(VARIANTS)], module=__name__)
Op.__doc__ = "The public ops (GEMMs and scale-layout transforms), as `_C` numbers them: one per variant."


def _dispatch() -> Dict[Tuple[str, str], Family]:
    table: Dict[Tuple[str, str], Family] = {}
    for family in FAMILIES:
        for arch in family.archs:
            for variant in family.variants:
                if table.setdefault((variant.name, arch), family) is not family:
                    raise AssertionError(f"two families serve {variant.name!r} on {arch}")
    return table


# (variant name, arch) -> the family that runs it there: the one arch dispatch.
_DISPATCH = _dispatch()

_layouts: Dict[tuple, object] = {}
_MAX_LAYOUTS = 4096
_compile_mode = False


def families_of(variant: str, arch: str) -> Tuple[Family, ...]:
    """The family that serves `variant` on `arch` (one, or none)."""
    family = _DISPATCH.get((variant, arch)) or _DISPATCH.get((variant, ANY_ARCH))
    return () if family is None else (family,)


def variants_on(arch: str, gemm: Optional[bool] = None) -> Tuple[str, ...]:
    """The names of the variants some family serves on `arch` (only the GEMMs, or only the others, with `gemm`), in
    registry order: what the tuner, the benchmarks and the sanitizer driver cover."""
    return tuple(v.name for v in VARIANTS if families_of(v.name, arch) and (gemm is None or v.gemm == gemm))


def _bind(variant: Variant, layout) -> None:
    """Give a layout that launches the family of its device's architecture."""
    families = families_of(variant.name, layout.arch)
    if not families:
        raise NotImplementedError(f"{variant.public_name} has no kernel for {layout.arch} yet (device {layout.device})")
    layout.family = families[0]


def _slow_path(op: int, args: tuple, key: Optional[tuple]):
    """What `_C` calls for a call it cannot launch by itself; returns a plan for `_C` to cache under `key`, or
    None. `key` is None when the call is not fast-path material (then nothing is cached here either)."""
    layout = _layouts.get(key) if key is not None else None
    if layout is None:
        variant = VARIANTS[op]
        layout = variant.normalise(*args)
        if layout.needs_kernel:
            _bind(variant, layout)
        if key is not None:
            if len(_layouts) >= _MAX_LAYOUTS:
                _layouts.clear()
            _layouts[key] = layout
    if _compile_mode and VARIANTS[op].gemm:
        layout.load_kernel(*args)
        return None  # no plan for `_C`: while the mode is on, every GEMM call must come back here
    # NOTES: kernels launch in the current context, so tensors off the current device need a switch (without it
    # the kernel ran in the wrong device's context); only then, since a switch costs microseconds.
    if layout.device.index == torch.cuda.current_device():
        return layout.run(*args)
    with torch.cuda.device(layout.device):
        return layout.run(*args)


@functools.lru_cache(maxsize=1024)
def _k_split_count(m: int, n: int, batches: int, k: int, device_index: int, num_sms: int,
                   clusters_fit: bool) -> int:
    arch = device.get_device_arch(device_index)
    if families_of("einsum", arch) != (sm90_bf16_gemm.FAMILY,):
        raise NotImplementedError(f"einsum has no kernel for {arch} yet (device {device_index})")
    return sm90_bf16_gemm.k_split_count(m, n, batches, k, device_index, clusters_fit)


def k_split_count(m: int, n: int, batches: int, k: int, device_index: int, clusters_fit: bool = False) -> int:
    """How the einsum variant's family sums over batches for this shape on this device under the current
    `set_num_sms` cap: 0 = in one launch over clusters (only where `clusters_fit`: d can take that kernel's
    output), else the K splits, i.e. the length of the partial-sum buffer `einsum("bmk,bnk->mn")` allocates
    (deep_gemm/ops/einsum.py)."""
    return _k_split_count(m, n, batches, k, device_index, device.get_num_sms(device_index), clusters_fit)


def paged_mqa_logits_schedule(context_lens, num_ctas: int):
    """The schedule metadata the paged MQA logits family walks (`get_paged_mqa_logits_metadata`,
    deep_gemm/ops/attention.py): int32 [num_ctas + 1, 2] on context_lens' device."""
    return sm90_fp8_paged_mqa_logits.schedule_metadata(context_lens, num_ctas)


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
    for family in FAMILIES:
        family.clear()


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


def call_unplanned(op: int, *args) -> None:
    """Run one call through the Python path without caching its layout or giving `_C` a plan (the sm100 self-test's
    problems, whose plans must not outlive a failing verdict)."""
    _slow_path(op, args, None)


def set_num_sms_cap(num_sms: Optional[int]) -> None:
    """Record the `deep_gemm.set_num_sms` cap (None: none) for the families and for `_C`'s layout keys."""
    device.set_num_sms_cap(num_sms)
    _C.set_num_sms_cap(0 if num_sms is None else num_sms)


# Workspaces of the launches that need one (K splits added up by the last CTA: WorkspaceSplitEpilogue), one per
# (device, stream) and, on a capturing stream, per capture (each CUDA graph owns its own, so two graphs may replay
# at once on different streams). Zeroed when made; a kernel leaves its counters back at zero. Launches on one stream
# are ordered, so they share it. Never freed: a captured graph keeps the address of the one it was captured with,
# and `_C` remembers those of streams that are not capturing.
WORKSPACE_MIN_BYTES = 1 << 20
_workspaces: Dict[Tuple[int, int, int], torch.Tensor] = {}
_outgrown: list = []


def _capture_id(stream: torch.cuda.Stream) -> int:
    """The id of the capture under way on `stream`, the current stream (0: none)."""
    if not torch.cuda.is_current_stream_capturing():
        return 0
    from cuda.bindings import driver
    result = driver.cuStreamGetCaptureInfo(driver.CUstream(stream.cuda_stream))
    if int(result[0]) != 0:
        raise CUDADriverError(f"cuStreamGetCaptureInfo failed: {result[0]}")
    return int(result[2])


def stream_workspace(device_index: int, nbytes: int) -> Tuple[int, int]:
    """(address, bytes) of the current stream's workspace on device `device_index`, at least `nbytes` long (made
    on first use, zeroed on that stream; `_C` asks for it per launch that needs one)."""
    stream = torch.cuda.current_stream(device_index)
    key = (device_index, stream.cuda_stream, _capture_id(stream))
    workspace = _workspaces.get(key)
    if workspace is None or workspace.numel() < nbytes:
        if workspace is not None:
            _outgrown.append(workspace)  # a captured graph may still address it
        workspace = torch.zeros(max(nbytes, WORKSPACE_MIN_BYTES), dtype=torch.uint8,
                                device=torch.device("cuda", device_index))
        _workspaces[key] = workspace
    return workspace.data_ptr(), workspace.numel()


def _init() -> None:
    raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    _C.init(_slow_path, raw_stream, CUDADriverError, torch.Tensor, torch.nn.Parameter,
            (torch.float8_e4m3fn, torch.float32, torch.bfloat16, torch.int32),
            tuple(v.signature for v in VARIANTS))
    _C.set_workspace_provider(stream_workspace)


_init()
call = _C.call
