"""docs/adding_a_family.md, followed literally (no GPU needed): a tiny family is added to a temporary copy of the
checkout from the page's recipe (the new files in tests/family_recipe/, the edits to existing files as the page's
diff blocks, in its order), and a process importing that copy checks that the variant reached the runtime, `_C`, the
dispatch, the JIT (its kernel compiles for sm_90a with NVRTC, with the constant multiply in its SASS), the warm-up,
the CLI, the tools and torch.library, and that malformed calls fail naming the argument. The copy's changed existing
files must be exactly the page's list, at most four.

The tiny family (out = (A @ B^T) * 0.25 for FP8 operands without scales) is never run: there is no GPU here, so its
numerics are left to the GPU suite (its reference is `build_scaled` in the page's tests/gemm_cases.py edit)."""
import filecmp
import os
import re
import shutil
import subprocess
import sys
import textwrap
from typing import List, Tuple

import pytest
import torch

import deep_gemm
from deep_gemm.jit.disasm import find_cuobjdump

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOC = os.path.join(REPO, "docs", "adding_a_family.md")
RECIPE = os.path.join(REPO, "tests", "family_recipe")
MAX_EXISTING_FILES = 4
_IGNORED = (".git", ".venv", "__pycache__", ".pytest_cache", "build", "dist", "*.egg-info")


def _doc() -> str:
    with open(DOC) as f:
        return f.read()


def doc_edits(text: str) -> List[Tuple[str, List[str], List[str]]]:
    """The page's edits, in order: (file, context lines, added lines) per ```diff block."""
    edits = []
    for block in re.findall(r"```diff\n(.*?)```", text, re.S):
        lines = block.rstrip("\n").split("\n")
        assert lines[0].startswith("--- "), lines[0]
        context = [ln[1:] for ln in lines[1:] if ln.startswith(" ")]
        added = [ln[1:] for ln in lines[1:] if ln.startswith("+")]
        assert lines[1:] == [" " + c for c in context] + ["+" + a for a in added], "context lines, then added lines"
        edits.append((lines[0][4:], context, added))
    return edits


def doc_existing_files(text: str) -> List[str]:
    """The page's list of the existing files a family with a new public op touches."""
    return re.search(r"<!-- existing files touched: (.*?) -->", text).group(1).split(", ")


def apply_edit(path: str, context: List[str], added: List[str]) -> None:
    """Insert `added` after the one run of lines that start with the `context` lines."""
    with open(path) as f:
        lines = f.read().split("\n")
    hits = [i for i in range(len(lines) - len(context) + 1)
            if all(lines[i + j].startswith(c) for j, c in enumerate(context))]
    assert len(hits) == 1, f"{path}: the context {context} matches {len(hits)} places"
    at = hits[0] + len(context)
    with open(path, "w") as f:
        f.write("\n".join(lines[:at] + added + lines[at:]))


def _files(root: str) -> set:
    """The source files under `root`: not bytecode, nor the build outputs (the `_C` launch module, which the copy
    gets from this process, and setup.py's build record), which the recipe never touches."""
    out = set()
    for dirpath, dirnames, files in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in ("__pycache__", ".pytest_cache")]
        out |= {os.path.relpath(os.path.join(dirpath, f), root) for f in files
                if not f.endswith((".pyc", ".so")) and f != "_build_info.py"}
    return out


def test_the_page_lists_its_edits_and_the_target_holds():
    text = _doc()
    listed = doc_existing_files(text)
    assert list(dict.fromkeys(path for path, _, _ in doc_edits(text))) == listed  # named in the order applied
    assert len(listed) <= MAX_EXISTING_FILES
    assert all(f"`{path}`" in text for path in listed)


def test_apply_edit_needs_one_unambiguous_place(tmp_path):
    path = tmp_path / "f.py"
    path.write_text("a = 1\nb = 2\na = 1\n")
    apply_edit(str(path), ["b ="], ["c = 3"])
    assert path.read_text() == "a = 1\nb = 2\nc = 3\na = 1\n"
    with pytest.raises(AssertionError, match="matches 2 places"):
        apply_edit(str(path), ["a = 1"], ["d = 4"])


CHECKS = r'''
import json, os, re, struct, sys

import torch

import deep_gemm
from deep_gemm import jit, runtime
from deep_gemm.families import sm90_scaled_fp8_gemm as family
from deep_gemm.families.variant import TENSOR
from deep_gemm.jit.disasm import find_cuobjdump, sass_text
from deep_gemm.warmup import FAMILIES as WARMUP_FAMILIES, WARMUP_FIELDS
from tests.families.test_params import signature
from benchmarks import bench
from tools import gpu_check, tune

ROOT = os.getcwd()
assert deep_gemm.__file__.startswith(ROOT), deep_gemm.__file__  # the copy, not the checkout

# The registry: the Op number, the variant `_C` numbers with it, the dispatch (sm_90a only).
op = int(runtime.Op.SCALED)
assert runtime.VARIANTS[op] is family.SCALED and family.SCALED.signature == (TENSOR, TENSOR, TENSOR)
assert runtime.families_of("scaled", "sm_90a") == (family.FAMILY,)
assert runtime.families_of("scaled", "sm_100a") == ()

# The parameters declared once, against the header's signature.
with open(os.path.join(ROOT, "include", family.HEADER)) as f:
    assert list(family.PARAMS) == signature(f.read(), "scaled_fp8_gemm_impl")

# The public op: exported, a torch custom operator, malformed calls fail through `_C` naming the argument.
assert "scaled_fp8_gemm_nt" in deep_gemm.__all__ and deep_gemm.scaled_fp8_gemm_nt.__module__ == "deep_gemm.ops.scaled"
schema = str(torch.ops.deep_gemm.scaled_fp8_gemm_nt.default._schema)
assert schema == "deep_gemm::scaled_fp8_gemm_nt(Tensor a, Tensor b, Tensor(a!) out) -> ()", schema
a = torch.zeros((64, 256), dtype=torch.float8_e4m3fn)
b = torch.zeros((128, 256), dtype=torch.float8_e4m3fn)
out = torch.zeros((64, 128), dtype=torch.bfloat16)
errors = {}
for name, args in dict(a_dtype=(a.bfloat16(), b, out), a_type=([1], b, out), k=(a[:, :200], b[:, :200], out),
                       out_shape=(a, b, out[:, :64]), cpu=(a, b, out)).items():
    try:
        deep_gemm.scaled_fp8_gemm_nt(*args)
    except (TypeError, ValueError) as e:
        errors[name] = f"{type(e).__name__}: {e}"
print(json.dumps(errors))
assert errors["a_dtype"].startswith("TypeError: a must have dtype torch.float8_e4m3fn"), errors
assert errors["a_type"].startswith("TypeError") and " a " in f" {errors['a_type']}", errors
assert errors["k"].startswith("ValueError: a must have a positive multiple of 128 columns"), errors
assert errors["out_shape"].startswith("ValueError: out must have shape (64, 128)"), errors
assert errors["cpu"].startswith("ValueError: a must be a CUDA tensor"), errors

# The tools and the warm-up list it.
assert "scaled" in WARMUP_FAMILIES and WARMUP_FIELDS["scaled"] == ("m", "n", "k")
assert "scaled" in tune.FAMILIES and tune.CASE_FORMS["scaled"] == tune.SPEC_FORM
assert bench.SUITE_SECTION["scaled"] == "spec" and "scaled" in gpu_check.FAMILIES
assert gpu_check.PROBLEMS["scaled"] == [dict(m=129, n=264, k=256)] and gpu_check.BUILDERS["scaled"]

# The warm-up compiles its kernel for sm_90a with NVRTC (no GPU needed).
summary = deep_gemm.warmup(scaled=[(256, 512, 1024)], num_sms=132, arch="sm_90a", jobs=1, progress=False)
assert summary["failures"] == [] and summary["by_family"] == {"scaled": 1}, summary
source = family.warmup_kernels("scaled", dict(m=256, n=512, k=1024), None, 132, "sm_90a", 0)[0]
cubin, cached, _ = jit.build(source, "sm_90a")
assert cached, "the warm-up built this kernel"
if find_cuobjdump() is not None:
    text = sass_text(cubin)
    # The epilogue's constant: FMULs by the immediate 0.25 (one per accumulator the warp writes).
    multiplies = len(re.findall(r"FMUL\S*\s+R\d+,\s*R\d+,\s*0\.25\b", text))
    assert multiplies >= 8, text[:2000]
    print(f"sass: {multiplies} multiplies by 0.25")
print("ok")
'''


@pytest.fixture(scope="module")
def copy_with_family(tmp_path_factory):
    """The checkout copied, the recipe's new files written, the page's edits applied; (copy, JIT cache dir)."""
    tmp = tmp_path_factory.mktemp("family")
    root = str(tmp / "repo")
    shutil.copytree(REPO, root, ignore=shutil.ignore_patterns(*_IGNORED), symlinks=True)
    for rel in _files(RECIPE):
        os.makedirs(os.path.dirname(os.path.join(root, rel)), exist_ok=True)
        shutil.copyfile(os.path.join(RECIPE, rel), os.path.join(root, rel))
    for path, context, added in doc_edits(_doc()):
        apply_edit(os.path.join(root, path), context, added)
    # The launch module the recipe never touches: the one this process runs (built in place or installed), so that
    # the copy imports as a built package (a checkout without _C would only say it shadows the install).
    c_module = deep_gemm._C.__file__
    copied = os.path.join(root, "deep_gemm", os.path.basename(c_module))
    if not os.path.exists(copied):
        shutil.copyfile(c_module, copied)
    return root, str(tmp / "cache")


def _run(root: str, cache: str, argv, timeout: int) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=root, DG_JIT_CACHE_DIR=cache, CUDA_VISIBLE_DEVICES="")
    return subprocess.run([sys.executable, *argv], cwd=root, env=env, capture_output=True, text=True, timeout=timeout)


def test_the_recipe_touches_exactly_the_listed_existing_files(copy_with_family):
    root, _ = copy_with_family
    before, after = _files(REPO) & _files(root), _files(root)
    changed = sorted(rel for rel in before if not filecmp.cmp(os.path.join(REPO, rel), os.path.join(root, rel),
                                                              shallow=False))
    assert changed == sorted(doc_existing_files(_doc()))
    assert len(changed) <= MAX_EXISTING_FILES
    assert after - _files(REPO) == _files(RECIPE)  # and the new files are the family's own


def test_the_family_reaches_runtime_jit_warmup_and_tools(copy_with_family):
    root, cache = copy_with_family
    proc = _run(root, cache, ["-c", CHECKS], 900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    assert proc.stdout.rstrip().endswith("ok")
    if find_cuobjdump() is not None:  # the SASS check ran
        assert "multiplies by 0.25" in proc.stdout, proc.stdout


def test_the_copys_cli_and_variant_list_tests_cover_it(copy_with_family):
    root, cache = copy_with_family
    cli = _run(root, cache, ["-m", "deep_gemm", "compile", "--family", "scaled", "--m", "256", "--n", "512", "--k",
                             "1024", "--arch", "sm_90a", "--num-sms", "132", "--quiet"], 900)
    assert cli.returncode == 0, cli.stderr[-4000:]
    assert "(scaled 1)" in cli.stdout + cli.stderr, cli.stdout + cli.stderr
    # The repository's own checks, in the copy: every tool covers every variant, the new one included; the
    # hard-coded variant tuples of test_the_registry_lists are the one thing a new variant changes.
    tests = _run(root, cache, ["-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/tools/test_variant_lists.py",
                               "tests/families/test_params.py", "--deselect",
                               "tests/tools/test_variant_lists.py::test_the_registry_lists"], 600)
    assert tests.returncode == 0, tests.stdout[-6000:]
    assert " passed" in tests.stdout and "skipped" not in tests.stdout, tests.stdout[-2000:]
    # Its SPECS entry brings it into the CPU tests of the public GEMMs: its malformed calls, its operator (schema,
    # fake implementation, one node under Dynamo).
    tests = _run(root, cache, ["-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_malformed_calls.py",
                               "tests/ops/test_library.py", "-k", "scaled or covers_every or registry"], 600)
    assert tests.returncode == 0, tests.stdout[-6000:]
    assert re.search(r"\b(9|[1-9]\d+) passed", tests.stdout), tests.stdout[-2000:]


# What the derived operators replaced: the hand-written ones' schemas (alias set names aside).
OPERATOR_SCHEMAS = {
    "gemm_fp8_fp8_bf16_nt": "Tensor a, Tensor sa, Tensor b, Tensor sb, Tensor(a!) out",
    "m_grouped_gemm_fp8_fp8_bf16_nt_contiguous": "Tensor a, Tensor sa, Tensor b, Tensor sb, Tensor(a!) out, "
                                                 "Tensor m_indices",
    "m_grouped_gemm_fp8_fp8_bf16_nt_masked": "Tensor a, Tensor sa, Tensor b, Tensor sb, Tensor(a!) out, "
                                             "Tensor masked_m, SymInt expected_m",
    "wgrad_gemm_fp8_fp8_fp32_nt": "Tensor a, Tensor sa, Tensor b, Tensor sb, Tensor(a!) out",
    "k_grouped_wgrad_gemm_fp8_fp8_fp32_nt": "Tensor a, Tensor sa, Tensor b, Tensor sb, Tensor(a!) out, "
                                            "SymInt[] batch_sizes",
    "bmm_fp8_fp8_bf16_nt": "Tensor a, Tensor sa, Tensor b, Tensor sb, Tensor(a!) out",
}


def test_the_derived_operators_keep_their_schemas():
    from deep_gemm.ops import library
    assert list(library.OPS) == list(OPERATOR_SCHEMAS)
    for name, args in OPERATOR_SCHEMAS.items():
        schema = re.sub(r"\(a\d*!\)", "(a!)", str(getattr(torch.ops.deep_gemm, name).default._schema))
        assert schema == f"deep_gemm::{name}({args}) -> ()"


def test_warmup_refuses_a_keyword_that_is_no_variant():
    with pytest.raises(TypeError, match=r"unexpected keyword arguments \['no_such_variant'\]"):
        deep_gemm.warmup(no_such_variant=[(1, 2)], num_sms=132, progress=False)
