"""Each kernel family declares its kernel's parameters once (`Family.params`: (name, kind) in the signature's order,
from which the family fills its ParamBuffer by name); this checks every declaration against the `__global__`
signature in the family's header, so a renamed, reordered, added or retyped parameter on either side fails here."""
import os
import re
from typing import List, Tuple

import pytest

from deep_gemm import runtime
from deep_gemm.families.plan import POINTER, STRUCT, TENSOR_MAP, U32, U64
from deep_gemm.jit.paths import project_include_dir


def _strip_comments(text: str) -> str:
    return re.sub(r"//[^\n]*", "", re.sub(r"/\*.*?\*/", "", text, flags=re.S))


def _kind(declaration: str) -> str:
    """A parameter's kind from its C++ declaration (without the name)."""
    if "TmaDescriptor" in declaration:
        return TENSOR_MAP
    if "*" in declaration:
        return POINTER
    words = re.sub(r"\bconst\b", " ", declaration).split()
    if words in (["uint32_t"], ["int32_t"]):
        return U32
    if words in (["uint64_t"], ["int64_t"]):
        return U64
    if "__grid_constant__" in words:
        return STRUCT  # a by-value struct such as WgradGroups<...>
    raise AssertionError(f"no parameter kind for the C++ type {declaration!r}")


def signature(source: str, function: str) -> List[Tuple[str, str]]:
    """(name, kind) of each parameter of the `__global__` function `function` (unqualified) in `source`."""
    text = _strip_comments(source)
    match = re.search(r"__global__[^;{]*?\b" + re.escape(function) + r"\s*\(", text)
    assert match, f"no __global__ {function} found"
    depth, start = 1, match.end()
    for end in range(start, len(text)):
        depth += {"(": 1, ")": -1}.get(text[end], 0)
        if depth == 0:
            break
    params, depth, current = [], 0, ""
    for ch in text[start:end]:
        depth += {"<": 1, ">": -1, "(": 1, ")": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            params.append(current)
            current = ""
        else:
            current += ch
    params.append(current)
    out = []
    for p in (" ".join(p.split()) for p in params if p.strip()):
        name = re.search(r"(\w+)\s*$", p).group(1)
        out.append((name, _kind(p[:-len(name)])))
    return out


def _header(family) -> str:
    with open(os.path.join(project_include_dir(), family.header)) as f:
        return f.read()


@pytest.mark.parametrize("family", runtime.FAMILIES, ids=lambda f: f.name)
def test_declared_parameters_match_the_kernel_signature(family):
    function = family.function.rsplit("::", 1)[-1]
    assert list(family.params) == signature(_header(family), function)


def test_the_parser_catches_a_mismatch():
    """A signature changed in the header's way (renamed, reordered, retyped) no longer matches a declaration."""
    source = ("template <typename C> __global__ void __launch_bounds__(128, 1)\n"
              "k_impl(const __grid_constant__ TmaDescriptor map_a, // A\n"
              "       const float* __restrict__ sb, /* SB */ const uint32_t shape_m,\n"
              "       const __grid_constant__ Groups<max_groups<C>()> groups, const uint64_t stride) {}")
    assert signature(source, "k_impl") == [("map_a", TENSOR_MAP), ("sb", POINTER), ("shape_m", U32),
                                           ("groups", STRUCT), ("stride", U64)]
    assert signature(source.replace("shape_m", "rows"), "k_impl")[2] == ("rows", U32)
    with pytest.raises(AssertionError, match="no parameter kind"):
        signature(source.replace("const uint32_t shape_m", "const float shape_m"), "k_impl")


def test_every_family_fills_its_declaration_by_name():
    """The plan builders name each parameter they fill (ParamBuffer checks the order and kinds against the
    declaration): no positional parameter list remains in the families."""
    families = {f.build_plan.__module__ for f in runtime.FAMILIES}
    for module in families:
        path = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                            *module.split(".")) + ".py"
        with open(path) as f:
            source = f.read()
        assert "ParamBuffer(PARAMS)" in source, module
        assert not re.search(r"params\.(tensor_map|pointer|u32|u64)\((\d|[a-z_.]+\.)", source), module
