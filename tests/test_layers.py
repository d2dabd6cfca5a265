"""The package's import graph (parsed, not imported): layers import strictly downward, no import cycle, no import of a
deep_gemm module inside a function, and kernel families never import each other."""
import ast
import os
from typing import Dict, List, Set, Tuple

import pytest

from deep_gemm import runtime

ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "deep_gemm")

# Module -> layer, top (1) to bottom (5); a module's name is matched by its longest listed prefix. A call flows down:
# public API -> runtime -> kernel families -> shared services (JIT, heuristics, layouts, the self-test gate) -> leaves.
LAYERS = {
    "deep_gemm": 1, "deep_gemm.__main__": 1, "deep_gemm.doctor": 1, "deep_gemm.ops": 1, "deep_gemm.testing": 1,
    "deep_gemm.utils": 1, "deep_gemm.warmup": 1, "deep_gemm.sm100_selftest": 1,
    "deep_gemm.runtime": 2,
    "deep_gemm.families": 3,
    "deep_gemm.jit": 4, "deep_gemm.heuristics": 4, "deep_gemm.scale_layout": 4, "deep_gemm.device": 4,
    "deep_gemm.selftest": 4,
    "deep_gemm.envs": 5, "deep_gemm.log": 5, "deep_gemm._C": 5, "deep_gemm._c_loader": 5, "deep_gemm._version": 5,
    "deep_gemm._build_info": 5, "deep_gemm._package_digest": 5,
}


def module_name(path: str) -> str:
    rel = os.path.relpath(path, os.path.dirname(ROOT))[:-len(".py")].replace(os.sep, ".")
    return rel[:-len(".__init__")] if rel.endswith(".__init__") else rel


def layer(module: str) -> int:
    parts = module.split(".")
    for i in range(len(parts), 0, -1):
        if ".".join(parts[:i]) in LAYERS:
            return LAYERS[".".join(parts[:i])]
    raise AssertionError(f"{module} has no layer in LAYERS: add it")


def _modules() -> Dict[str, str]:
    found = {}
    for dirpath, _, files in os.walk(ROOT):
        for f in files:
            if f.endswith(".py"):
                found[module_name(os.path.join(dirpath, f))] = os.path.join(dirpath, f)
    return found


MODULES = _modules()


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> List[str]:
    """The deep_gemm modules an import statement loads: the target, each name that is a submodule, and (as Python
    runs them) the packages above the target."""
    if node.level:
        base = module.split(".") if is_package else module.split(".")[:-1]
        base = base[:len(base) - node.level + 1]
        target = ".".join(base + ([node.module] if node.module else []))
    else:
        target = node.module or ""
    names = [target] + [f"{target}.{a.name}" for a in node.names]
    return [n for n in names if n in MODULES or n == "deep_gemm._C"]


def _with_parents(name: str) -> List[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(2, len(parts) + 1)]  # the root package is always loaded first


def imports() -> List[Tuple[str, str, bool]]:
    """(importer, imported, inside a function) for every import of a deep_gemm module."""
    edges = []
    for module, path in MODULES.items():
        tree = ast.parse(open(path).read(), path)
        is_package = path.endswith("__init__.py")
        nested = {id(n) for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                  for n in ast.walk(f) if n is not f}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                targets = _resolve(module, is_package, node)
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names if a.name.split(".")[0] == "deep_gemm"]
            else:
                continue
            for target in targets:
                for name in _with_parents(target):
                    if name != module and not module.startswith(name + "."):
                        edges.append((module, name, id(node) in nested))
    return edges


EDGES = imports()


def test_every_module_has_a_layer():
    for module in MODULES:
        layer(module)


def test_the_parser_sees_the_imports():
    """The graph is not empty and finds known edges, so that the checks below cannot pass vacuously."""
    pairs = {(a, b) for a, b, _ in EDGES}
    assert ("deep_gemm.runtime", "deep_gemm.families.sm90_fp8_gemm_1d2d") in pairs
    assert ("deep_gemm.ops.gemm", "deep_gemm.runtime") in pairs
    assert ("deep_gemm.families.sm90_fp8_gemm_1d2d", "deep_gemm.jit") in pairs
    assert len(pairs) > 60


def upward(edges) -> List[Tuple[str, str]]:
    return sorted({(a, b) for a, b, _ in edges if layer(b) < layer(a)})


def find_cycle(edges) -> List[str]:
    """One import cycle as a path (first module repeated at the end), or []."""
    graph: Dict[str, Set[str]] = {}
    for a, b, _ in edges:
        graph.setdefault(a, set()).add(b)
    state: Dict[str, int] = {}

    def visit(node: str, path: List[str]) -> List[str]:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [node, nxt] if nxt in path else [node, nxt]
            if nxt not in state:
                found = visit(nxt, path + [node])
                if found:
                    return found
        state[node] = 2
        return []

    for node in sorted(graph):
        if node not in state:
            found = visit(node, [])
            if found:
                return found
    return []


def test_the_checks_catch_what_they_look_for():
    """On a made-up graph: an upward edge and a cycle are found."""
    edges = [("deep_gemm.families.x", "deep_gemm.runtime", False), ("deep_gemm.runtime", "deep_gemm.families.x", False),
             ("deep_gemm.ops.gemm", "deep_gemm.runtime", False)]
    assert upward(edges) == [("deep_gemm.families.x", "deep_gemm.runtime")]
    assert find_cycle(edges) == ["deep_gemm.families.x", "deep_gemm.runtime", "deep_gemm.families.x"]
    assert find_cycle(edges[1:]) == []


def test_no_import_inside_a_function():
    inside = sorted({(a, b) for a, b, nested in EDGES if nested})
    assert not inside, f"deep_gemm modules imported inside a function (import them at the top): {inside}"


def test_layers_import_downward():
    assert not upward(EDGES), f"imports that point up the layers: {upward(EDGES)}"


def test_no_import_cycle():
    cycle = find_cycle(EDGES)
    assert not cycle, f"import cycle: {' -> '.join(cycle)}"


def test_families_never_import_each_other():
    families = {f.build_plan.__module__ for f in runtime.FAMILIES}
    assert len(families) == len(runtime.FAMILIES)
    crossing = sorted({(a, b) for a, b, _ in EDGES if a in families and b in families})
    assert not crossing, f"families importing each other: {crossing}"


def test_the_runtime_is_the_only_importer_of_the_families_above_them():
    """Arch dispatch happens once: only the runtime (and developer tools, outside the package) picks a family."""
    families = {f.build_plan.__module__ for f in runtime.FAMILIES}
    importers = sorted({a for a, b, _ in EDGES if b in families and layer(a) < layer(b)})
    assert importers == ["deep_gemm.runtime"], importers
