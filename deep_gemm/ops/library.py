"""The public GEMMs as torch custom operators (``torch.ops.deep_gemm.*``), so that torch.compile sees each call as one
opaque node that writes its ``out`` argument, and traces models calling them with ``fullgraph=True``.

Eager calls do not go through the dispatcher (it costs microseconds per call): each public function checks
``torch.compiler.is_compiling()`` (~0.1 us) and only while Dynamo traces does it call its operator. The operators take
the flat tensors: the public API's (tensor, scales) pairs unpacked as ``checks.traced_call`` does, the first pair into
``a, sa`` and the second into ``b, sb``. Their fake implementations produce nothing (the result is the in-place write
to ``out``), so tracing needs no device and runs no check that reads data; the real implementation runs the full
validation when the compiled graph executes.

Nothing here is written per op: `register` derives each operator's schema from its variant (how `_C` reads each
argument, deep_gemm/families/variant.py) and the public function's parameter names, so a new public GEMM becomes an
operator by being listed in `deep_gemm.ops.OPERATORS`.
"""
import inspect
from typing import Callable, Dict, Iterable, Tuple

import torch

from ..families.variant import INT, INT_LIST, PAIR, TENSOR, Variant
from ..runtime import VARIANTS

NAMESPACE = "deep_gemm"
# The flat names of a GEMM's (tensor, scales) pairs, in order (checks.traced_call unpacks them the same way).
PAIR_NAMES = (("a", "sa"), ("b", "sb"))
_SCHEMA_TYPES = {TENSOR: "Tensor", INT: "SymInt", INT_LIST: "SymInt[]"}

# Operator name -> the operator (torch.library.CustomOpDef), in registration order.
OPS: Dict[str, object] = {}


def schema(variant: Variant, public: Callable) -> Tuple[str, Tuple[int, ...]]:
    """The operator's schema for `public` (the variant's public function) and, per public parameter, how many flat
    arguments it becomes (2 for a pair, else 1)."""
    params = list(inspect.signature(public).parameters)
    if len(params) != len(variant.signature):
        raise AssertionError(f"{public.__name__} takes {len(params)} arguments, its variant {variant.name!r} reads "
                             f"{len(variant.signature)}")
    pairs = iter(PAIR_NAMES)
    flat, widths = [], []
    for name, kind in zip(params, variant.signature):
        if kind == PAIR:
            flat += [f"Tensor {n}" for n in next(pairs)]
        elif name == "out":
            flat.append("Tensor(a!) out")
        else:
            flat.append(f"{_SCHEMA_TYPES[kind]} {name}")
        widths.append(2 if kind == PAIR else 1)
    if "out" not in params:
        raise AssertionError(f"{public.__name__} has no `out` parameter for its operator to mutate")
    return f"({', '.join(flat)}) -> ()", tuple(widths)


def _implementation(public: Callable, widths: Tuple[int, ...]) -> Callable:
    def run(*flat) -> None:
        args, i = [], 0
        for width in widths:
            args.append(tuple(flat[i:i + width]) if width == 2 else flat[i])
            i += width
        public(*args)
    return run


def _no_result(*args, **kwargs) -> None:
    return None


def register(publics: Iterable[Callable]) -> None:
    """Make each public GEMM (a function named like its variant's `public_name`) the operator
    torch.ops.deep_gemm.<its name>."""
    by_public_name = {v.public_name: v for v in VARIANTS if v.gemm}
    for public in publics:
        name = public.__name__
        if name not in by_public_name:
            raise AssertionError(f"{name} is no GEMM variant's public name")
        text, widths = schema(by_public_name[name], public)
        op = torch.library.custom_op(f"{NAMESPACE}::{name}", _implementation(public, widths), mutates_args=("out",),
                                     schema=text)
        op.register_fake(_no_result)
        OPS[name] = op
