"""The documentation against the code: the README's and docs/performance.md's tables are what
benchmarks/readme_table.py prints from the committed result, every public name and DG_* variable is in the README,
links resolve inside the repository, and benchmarks/results/ holds exactly the files its index lists."""
import ast
import json
import os
import re

import pytest

import deep_gemm
from benchmarks import readme_table
from deep_gemm import envs

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(REPO, "benchmarks", "results")
DOCS = ["README.md", "CONTRIBUTING.md", "benchmarks/NOTES.md", "benchmarks/results/README.md"] + \
    sorted(os.path.join("docs", f) for f in os.listdir(os.path.join(REPO, "docs")) if f.endswith(".md"))
TABLE = re.compile(r"<!-- readme_table (--cases )?(\S+) -->\n(.*?)\n<!-- /readme_table -->", re.S)


def read(path: str) -> str:
    with open(os.path.join(REPO, path)) as f:
        return f.read()


@pytest.mark.parametrize("doc, cases", [("README.md", False), ("docs/performance.md", True)])
def test_published_tables_are_the_scripts_output(doc, cases):
    blocks = TABLE.findall(read(doc))
    assert len(blocks) == 1, f"{doc}: expected one readme_table block"
    flag, path, text = blocks[0]
    assert bool(flag) == cases
    with open(os.path.join(REPO, path)) as f:
        result = json.load(f)
    assert text == (readme_table.markdown(result) if cases else readme_table.summary(result))


def test_readme_and_performance_page_use_the_same_result():
    assert TABLE.findall(read("README.md"))[0][1] == TABLE.findall(read("docs/performance.md"))[0][1]


def test_summary_counts_suites_and_ratios():
    result = dict(device="NVIDIA H200", torch="2.13.0",
                  rows=[dict(m=64, n=2112, k=7168, tflops=200.0, cublas_tflops=100.0),
                        dict(m=64, n=7168, k=576, tflops=100.0, cublas_tflops=None),
                        dict(m=128, n=2112, k=7168, tflops=400.0, cublas_tflops=100.0)],
                  grouped=[dict(kind="masked", groups=4, m=256, n=4096, k=7168, tflops=900.0, cublas_tflops=1000.0)],
                  wgrad=[])
    lines = readme_table.summary(result).splitlines()
    assert lines[0].startswith("Measured on NVIDIA H200, torch 2.13.0")
    assert "| dense | 3 | 100-400 | 2.83x (2.00-4.00, 2) |" in lines
    assert "| MoE masked | 1 | 900-900 | n/a |" in lines  # no cuBLAS ratio for a grouped suite
    assert not any(line.startswith(("| MoE contiguous", "| weight gradient")) for line in lines)


def test_readme_is_short_and_keeps_the_ci_commands():
    text = read("README.md")
    assert len(text.splitlines()) <= 250
    assert 'pip install "torch==2.13.0" ".[cu13,test]"\npytest tests' in text
    assert 'pip install "deepgemm-sm90[cu13]"' in text


def test_every_public_name_has_a_line_in_the_readme_api_table():
    api = read("README.md").split("## API", 1)[1].split("\n## ", 1)[0]
    missing = [n for n in deep_gemm.__all__ if not re.search(rf"`(deep_gemm\.)?{n}[`(]", api)]
    assert not missing


def _dg_variables_read_by_python() -> set:
    """DG_* names the repository's Python reads from the environment, outside deep_gemm/envs.py's table."""
    names = set()
    for top in ("deep_gemm", "tests", "tools", "benchmarks", "setup.py", "conftest.py"):
        path = os.path.join(REPO, top)
        files = [path] if path.endswith(".py") else [os.path.join(d, f) for d, _, fs in os.walk(path) for f in fs
                                                       if f.endswith(".py")]
        for file in files:
            with open(file) as f:
                tree = ast.parse(f.read())
            for node in ast.walk(tree):
                # A setting is read with its default: os.environ.get("DG_X", "0"), os.getenv("DG_X", "0"),
                # os.environ.setdefault("DG_X", ...). A one-argument get is a test inspecting a name it set itself.
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                        node.func.attr in ("get", "getenv", "setdefault") and len(node.args) == 2 and \
                        isinstance(node.args[0], ast.Constant) and str(node.args[0].value).startswith("DG_"):
                    names.add(node.args[0].value)
    return names


def test_every_dg_variable_is_listed_in_the_readme():
    text = read("README.md")
    names = {v.name for v in envs.VARIABLES} | _dg_variables_read_by_python()
    assert {"DG_BUILD_WITH_TORCH", "DG_SWEEP"} <= names  # the scan sees setup.py and the tests
    assert not [n for n in sorted(names) if f"`{n}`" not in text and f"`{n}=" not in text]


def test_links_stay_inside_the_repository_and_resolve():
    missing = set()
    for doc in DOCS:
        text = read(doc)
        for bad in ("ANCHORS.md", "PERF_GAP.md", "TOOLCHAIN.md", "../shared", "h200_env.sh", "-m deep_gemm.jit.sass",
                    "deep_gemm[progress]"):
            assert bad not in text, f"{doc} mentions {bad}"
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
            if re.match(r"[a-z]+://", target):
                continue
            path = os.path.normpath(os.path.join(os.path.dirname(doc), target))
            assert not path.startswith(".."), f"{doc} links outside the repository: {target}"
            if not os.path.exists(os.path.join(REPO, path)):
                missing.add(path)
    assert not missing, missing


def test_results_folder_holds_exactly_what_its_index_lists():
    index = read("benchmarks/results/README.md")
    listed = set(re.findall(r"`([^`\s]+\.(?:json|png|log|txt))`", index))
    on_disk = {os.path.relpath(os.path.join(d, f), RESULTS) for d, _, fs in os.walk(RESULTS) for f in fs
               if f != "README.md"}
    assert listed == on_disk


def test_result_paths_named_in_the_docs_exist():
    for doc in DOCS:
        for path in re.findall(r"benchmarks/results/[\w./-]+\.(?:json|png|log|txt)", read(doc)):
            assert os.path.exists(os.path.join(REPO, path)), f"{doc}: {path}"


def test_notes_are_a_short_current_state_page():
    assert len(read("benchmarks/NOTES.md").splitlines()) <= 300
