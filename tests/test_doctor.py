"""deep_gemm/doctor.py: `doctor` and `cache ls|clear|prune`, through a parser built as deep_gemm/__main__ builds it."""
import argparse
import json
import os
import time

import pytest

from deep_gemm import doctor
from deep_gemm.envs import VARIABLES
from deep_gemm.jit.cache import KernelCache


def run(argv) -> int:
    parser = argparse.ArgumentParser(prog="python -m deep_gemm")
    doctor.add_commands(parser.add_subparsers(dest="cmd", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


def fake_cubin() -> bytes:
    return b"\x7fELF" + os.urandom(1000)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("DG_JIT_CACHE_DIR", str(tmp_path))
    cache = KernelCache(str(tmp_path))
    for i, days in enumerate((0, 2, 5)):
        cache.store(f"kern{i}", f"{i}" * 32, fake_cubin(), "// source", dict(kernel=f"k<Config{{I={i}}}>"))
        t = time.time() - days * 86400
        os.utime(cache.entry_dir(f"kern{i}", f"{i}" * 32), (t, t))
    return cache


def test_doctor_json_reports_everything_without_raising(cache, capsys, monkeypatch):
    monkeypatch.setenv("DG_JIT_DEBUG", "1")
    monkeypatch.setenv("DG_SOMETHING_ELSE", "x")
    assert run(["doctor", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert set(r) == {"versions", "driver", "gpus", "launch_path", "cache", "env"}
    assert set(r["versions"]) == {"deep_gemm", "python", "torch", "cuda_bindings", "nvrtc", "nvcc"}
    assert r["versions"]["nvrtc"].startswith("nvrtc-")
    assert r["launch_path"].startswith("deep_gemm._C (")
    assert r["cache"] == dict(dir=str(cache.root)[:-len("/cache")], entries=3,
                              bytes=sum(e.size for e in cache.entries()))
    assert [k for k in r["env"] if k != "DG_SOMETHING_ELSE" and k.startswith("DG_")][:len(VARIABLES)] == \
        [v.name for v in VARIABLES]
    assert r["env"]["DG_JIT_DEBUG"] == dict(value=True, set=True)
    assert r["env"]["DG_SOMETHING_ELSE"]["note"] == "not read by the library"
    # Either a GPU list or the reason there is none (this CPU machine: no libcuda).
    assert isinstance(r["gpus"], list) or set(r["gpus"]) == {"error"}
    assert isinstance(r["driver"], str) or r["driver"]["error"]


def test_doctor_text_and_failing_probes(cache, capsys, monkeypatch):
    def broken():
        raise RuntimeError("Failed to dlopen libcuda.so.1")
    monkeypatch.setattr(doctor, "_gpus", broken)
    monkeypatch.setattr(doctor, "_nvcc_version", broken)
    assert run(["doctor"]) == 0
    out = capsys.readouterr().out
    assert "gpus: unavailable: RuntimeError: Failed to dlopen libcuda.so.1" in out
    assert "  nvcc: unavailable: RuntimeError" in out
    assert f"kernel cache: {os.path.dirname(cache.root)}: 3 entries" in out
    monkeypatch.setattr(doctor, "_gpus", lambda: [])
    run(["doctor"])
    assert "gpus: no GPU\n" in capsys.readouterr().out


def test_cache_ls(cache, capsys):
    assert run(["cache", "ls", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert [(e["name"], e["kernel"]) for e in r["entries"]] == [(f"kern{i}", f"k<Config{{I={i}}}>") for i in range(3)]
    assert 2 * 86400 - 60 < r["entries"][1]["age_seconds"] < 2 * 86400 + 60
    assert all(e["bytes"] > 1000 for e in r["entries"])
    assert run(["cache", "ls"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 4 and lines[1].startswith(f"kern1.{'1' * 32}  ") and "used 2.0 d ago" in lines[1]
    assert lines[-1].startswith("3 entries, ")


def test_cache_clear(cache, capsys):
    assert run(["cache", "clear"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert sorted(line.split()[1] for line in out[:-1]) == [f"kern{i}.{str(i) * 32}" for i in range(3)]
    assert out[-1].startswith("removed 3 entries") and cache.entries() == []
    assert run(["cache", "clear"]) == 0  # empty: fine


def test_cache_prune_by_age_then_size(cache, capsys):
    assert run(["cache", "prune", "--older-than", "3"]) == 0
    assert [e.name for e in cache.entries()] == ["kern0", "kern1"]
    one = cache.entries()[0].size
    assert run(["cache", "prune", "--max-size", str(one)]) == 0
    assert [e.name for e in cache.entries()] == ["kern0"], "the least recently used goes first"
    assert "removed kern1." in capsys.readouterr().out


@pytest.mark.parametrize("argv,message", [
    ([], "give --older-than DAYS and/or --max-size SIZE"),
    (["--older-than", "-1"], "--older-than: expected a number of days >= 0, got '-1'"),
    (["--older-than", "nan"], "--older-than: expected a number of days >= 0, got 'nan'"),
    (["--max-size", "12Q"], "--max-size: expected a size such as 4096, 500M or 2G, got '12Q'"),
])
def test_cache_prune_bad_arguments(cache, capsys, argv, message):
    from deep_gemm.__main__ import main
    assert main(["cache", "prune", *argv]) == 2
    assert capsys.readouterr().err == f"python -m deep_gemm cache prune: error: {message}\n"
    assert len(cache.entries()) == 3


@pytest.mark.parametrize("text,size", [("4096", 4096), ("500M", 500 << 20), ("2g", 2 << 30), ("1.5GiB", 3 << 29),
                                       ("10KB", 10240), (" 7 ", 7)])
def test_parse_size(text, size):
    assert doctor.parse_size(text) == size
