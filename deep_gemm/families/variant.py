"""What a kernel family declares to the runtime's registry (deep_gemm/runtime.py, `FAMILIES`): the variants (public
ops) it serves, on which architectures, and how to drop its loaded kernels.

A variant is one public op, under one name used everywhere: the runtime's `Op`, the warm-up and the CLI, the tuner
(tools/tune.py), the benchmarks (benchmarks/bench.py) and the sanitizer driver (tools/gpu_check.py). Its normaliser
validates a call's arguments into a layout (every user-facing error); the layout runs the call through the family
the runtime picked for its device's architecture."""
from dataclasses import dataclass
from typing import Callable, Optional, Tuple

# How `_C` reads each argument of a variant (csrc/launch.cpp ArgKind): a (tensor, scales) pair, a tensor, a host int
# (part of the layout key), a host list of ints (part of the key).
PAIR, TENSOR, INT, INT_LIST = 0, 1, 2, 3

# A family that runs on any architecture with a GPU (the scale-layout transforms).
ANY_ARCH = "any"


@dataclass(frozen=True)
class Variant:
    """One public op. `gemm`: compile mode (deep_gemm.set_compile_mode) turns its calls into compile-only calls.
    `warmup_fields`: the fields of one warm-up shape (deep_gemm.warmup), or None when it is warmed up under another
    variant's name (`warmup_as`) or not at all."""
    name: str
    public_name: str
    signature: Tuple[int, ...]
    normalise: Callable
    gemm: bool = True
    warmup_fields: Optional[Tuple[str, ...]] = None
    warmup_as: Optional[str] = None


@dataclass(frozen=True)
class Family:
    """One kernel family: a kernel header and its host side (one module, named like the header). `header` /
    `function` name the kernel, `params` its parameters as (name, kind) in the `__global__` signature's order (the
    one declaration, checked against the header by tests/families/test_params.py). `build_plan` is the entry the
    layouts of its variants call, `load` the one compile mode calls, `kernels` the kernels a warm-up shape loads
    (None: nothing to warm up), `precompile` the first-sight build of every kernel
a warm-up shape's calls can ever load, which also records that group as complete so that a later process's first
call of the shape skips enumerating it (None: the family has no such group)."""
    name: str
    header: str
    function: str
    params: Tuple[Tuple[str, str], ...]
    archs: Tuple[str, ...]
    variants: Tuple[Variant, ...]
    build_plan: Callable
    clear: Callable[[], None]
    load: Optional[Callable] = None
    kernels: Optional[Callable] = None
    precompile: Optional[Callable] = None
