"""benchmarks/bench.py and readme_table.py without a GPU: provenance, the incrementally written result file, its
default name, the plot and the README table from a fake result, and the command line."""
import json
import os
import subprocess
import sys

import pytest

from benchmarks import bench, readme_table

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def fake_result() -> dict:
    return dict(device="NVIDIA H200", torch="2.11.0", summary={},
                provenance=dict(commit="abc1234", dirty=True, date="2026-11-26T10:00:00+00:00", driver="580.1",
                                versions=dict(nvrtc="13.0")),
                rows=[dict(m=64, n=2112, k=7168, us=10.0, tflops=200.0, cublas_tflops=100.0),
                      dict(m=64, n=7168, k=576, us=5.0, tflops=100.0, cublas_tflops=None)],
                grouped=[dict(kind="masked", groups=4, m=256, n=4096, k=7168, us=50.0, tflops=900.0,
                              cublas_tflops=1000.0, dg_tflops=1000.0)],
                wgrad=[dict(kind="k_grouped", groups=4, m=7168, n=4096, k=4096, us=300.0, tflops=950.0)])


def test_provenance_records_commit_versions_and_dg_env(monkeypatch):
    monkeypatch.setenv("DG_JIT_USE_NVCC", "1")
    prov = bench.provenance()
    assert prov["env"]["DG_JIT_USE_NVCC"] == "1" and all(k.startswith("DG_") for k in prov["env"])
    assert set(prov["versions"]) == {"python", "torch", "cuda", "cuda_bindings", "nvrtc", "deep_gemm"}
    assert prov["versions"]["deep_gemm"] == bench.deep_gemm.__version__
    if prov["commit"] is not None:  # a git checkout
        assert isinstance(prov["dirty"], bool) and len(prov["commit"]) == 10
    assert isinstance(prov["gpu_start"], dict) and prov["date"][4] == "-"


def test_provenance_is_the_packages_build_not_the_current_directory(monkeypatch, tmp_path):
    """The commit comes from deep_gemm.build_info() (set when the package was built), whatever git repository the
    current directory belongs to."""
    build = dict(version="9.9.9", commit="0123456789abcdef0123456789abcdef01234567", dirty=False,
                 built_at="2026-11-26T10:00:00+00:00")
    monkeypatch.setattr(bench.deep_gemm, "build_info", lambda: dict(build))
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    monkeypatch.chdir(tmp_path)
    prov = bench.provenance()
    assert (prov["commit"], prov["dirty"], prov["build"]) == ("0123456789", False, build)
    assert prov["package"] == os.path.dirname(os.path.abspath(bench.deep_gemm.__file__))
    monkeypatch.setattr(bench.deep_gemm, "build_info", lambda: dict(build, commit=None, dirty=None))
    assert (bench.provenance()["commit"], bench.provenance()["dirty"]) == (None, None)


def test_default_result_path_names_date_commit_device():
    prov = dict(date="2026-11-26T10:00:00+00:00", commit="abc1234", dirty=False, device="NVIDIA H200")
    assert bench.default_result_path(prov) == os.path.join(bench.RESULTS_DIR, "2026-11-26_abc1234_h200.json")
    prov.update(dirty=True, device="NVIDIA H100 80GB HBM3", commit=None)
    assert os.path.basename(bench.default_result_path(prov, "Dense run")) == \
        "2026-11-26_nogit-dirty_h100-80gb-hbm3_dense-run.json"


def test_results_are_written_after_every_case(tmp_path, monkeypatch):
    monkeypatch.setattr(bench, "gpu_state", lambda: {"clocks.sm": "1980"})
    path = str(tmp_path / "sub" / "run.json")
    results = bench.Results(path, dict(device="NVIDIA H200", commit="abc"))
    assert json.load(open(path))["rows"] == []  # exists before the first case
    results.add("rows", dict(m=1, n=2, k=3))
    on_disk = json.load(open(path))
    assert on_disk["rows"] == [dict(m=1, n=2, k=3, gpu_after={"clocks.sm": "1980"})]
    results.summarize(geomean_ratio_vs_cublas=1.5)
    assert json.load(open(path))["summary"] == {"geomean_ratio_vs_cublas": 1.5}
    assert os.listdir(tmp_path / "sub") == ["run.json"]  # no temporary left behind


def test_plot_writes_an_image(tmp_path):
    pytest.importorskip("matplotlib")
    path = tmp_path / "plot.png"
    bench.plot(fake_result(), str(path))
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError, match="no measured rows"):
        bench.plot(dict(rows=[]), str(path))


def test_plot_without_matplotlib_names_the_extra(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(ImportError, match=r"deepgemm-sm90\[bench\]"):
        bench.plot(fake_result(), str(tmp_path / "plot.png"))


def test_readme_table_is_generated_from_the_rows():
    text = readme_table.markdown(fake_result())
    lines = text.splitlines()
    assert lines[0].startswith("Measured on NVIDIA H200, torch 2.11.0, commit abc1234 (dirty), driver 580.1")
    assert "| 64x2112x7168 | 10.0 | 200 | 100 | 2.00 |" in lines
    assert "| 64x7168x576 | 5.0 | 100 | n/a | n/a |" in lines
    assert "| case | us | TFLOPS | cuBLAS TFLOPS | x cuBLAS | DeepGEMM TFLOPS | x DeepGEMM |" in lines  # grouped
    assert "| masked 4x256 4096x7168 | 50.0 | 900 | 1000 | 0.90 | 1000 | 0.90 |" in lines
    assert "geomean 2.000x cuBLAS over 1 cases." in lines
    assert "| k-grouped 4x 7168x4096 k~4096 | 300.0 | 950 | n/a | n/a |" in lines


def test_readme_table_cli_writes_the_plot_next_to_the_result(tmp_path):
    pytest.importorskip("matplotlib")
    result = tmp_path / "2026-11-26_abc_h200.json"
    result.write_text(json.dumps(fake_result()))
    proc = subprocess.run([sys.executable, "-m", "benchmarks.readme_table", str(result), "--cases"], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "| 64x2112x7168 |" in proc.stdout and (tmp_path / "2026-11-26_abc_h200.png").exists()
    bad = subprocess.run([sys.executable, "-m", "benchmarks.readme_table", str(tmp_path / "missing.json")],
                         cwd=REPO, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "result: cannot read" in bad.stderr


def test_command_line_without_gpu():
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    script = os.path.join(REPO, "benchmarks", "bench.py")
    proc = subprocess.run([sys.executable, script, "--help"], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "--plot" in proc.stdout
    shapes = subprocess.run([sys.executable, script, "--list-shapes", "--shapes", "1x2x3", "4x5x6"], env=env,
                            capture_output=True, text=True, timeout=120)
    assert shapes.stdout.split("\n")[:2] == ["1 2 3", "4 5 6"]
    bad = subprocess.run([sys.executable, script, "--shapes", "1x2"], env=env, capture_output=True, text=True,
                         timeout=120)
    assert bad.returncode == 2 and "--shapes: expected MxNxK" in bad.stderr
    assert bench.parse_args(["--suite", "dense"]).shapes == bench.dense_shapes()


def test_first_call_rejects_bad_arguments_without_gpu():
    """benchmarks/first_call.py: bad sizes exit 2 with one line before anything touches a GPU."""
    proc = subprocess.run([sys.executable, "-m", "benchmarks.first_call", "--m", "0"], capture_output=True, text=True,
                          cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    assert proc.returncode == 2 and "--m and --tp must be positive" in proc.stderr


def test_first_call_runs_as_a_script_from_outside_the_checkout(tmp_path):
    """Run by path from another directory, first_call.py needs nothing of the checkout (it measures whatever
    deep_gemm is installed): --help works, and without a GPU it says so and exits 2."""
    script = os.path.join(REPO, "benchmarks", "first_call.py")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    help_ = subprocess.run([sys.executable, script, "--help"], cwd=tmp_path, env=env, capture_output=True, text=True,
                           timeout=120)
    assert help_.returncode == 0 and "--json" in help_.stdout, help_.stderr
    import torch
    if not torch.cuda.is_available():
        run = subprocess.run([sys.executable, script, "--json", str(tmp_path / "r.json")], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=300)
        assert run.returncode == 2 and "needs a CUDA device" in run.stderr, run.stderr
        assert not (tmp_path / "r.json").exists()


def test_bf16_benchmark_rejects_bad_arguments_and_needs_a_gpu():
    """benchmarks/bf16.py: bad sizes exit 2 with one line; without a GPU it says so and exits 2."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    bad = subprocess.run([sys.executable, "-m", "benchmarks.bf16", "--ms", "0"], capture_output=True, text=True,
                         cwd=root, timeout=120)
    assert bad.returncode == 2 and "--ms and --num-tests must be positive" in bad.stderr
    import torch
    if not torch.cuda.is_available():
        run = subprocess.run([sys.executable, "-m", "benchmarks.bf16"], capture_output=True, text=True, cwd=root,
                             timeout=300)
        assert run.returncode == 2 and "needs a CUDA device" in run.stderr, run.stderr
