"""The command line (deep_gemm/__main__.py): `compile` through deep_gemm.warmup, `--version`, one-line errors."""
import json
import os
import subprocess
import sys

import pytest

import deep_gemm
from deep_gemm.__main__ import main as cli_main
from deep_gemm.heuristics import GemmProblem, KernelType, get_config
from deep_gemm.heuristics.sm90 import sm90_kernel_variants
from deep_gemm.families.sm90_fp8_gemm_1d2d import kernel_source

REPO = os.path.dirname(os.path.dirname(os.path.abspath(deep_gemm.__file__)))


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    root = tmp_path / "dg_cache"
    monkeypatch.setenv("DG_JIT_CACHE_DIR", str(root))
    return root


def entries(root) -> set:
    path = os.path.join(str(root), "cache")
    return set(os.listdir(path)) if os.path.isdir(path) else set()


def names(sources) -> set:
    """Kernels by instantiation (what meta.json records; entry names only carry a hash)."""
    return {s.instantiation() for s in sources}


def cached_instantiations(root) -> set:
    out = set()
    for entry in entries(root):
        with open(os.path.join(str(root), "cache", entry, "meta.json")) as f:
            out.add(json.load(f)["kernel"])
    return out


def run_cli(args, cache_dir) -> subprocess.CompletedProcess:
    env = dict(os.environ, DG_JIT_CACHE_DIR=str(cache_dir))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (REPO, env.get("PYTHONPATH", "")) if p)
    return subprocess.run([sys.executable, "-m", "deep_gemm", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=600)


def test_compile_builds_every_variant_by_default_then_hits(tmp_path, cache_dir):
    """What the first call of (n, k) wants: every variant (the old default built only m's own kernel)."""
    summary_file = tmp_path / "summary.json"
    first = run_cli(["compile", "--m", "64", "--n", "256", "--k", "128", "--jobs", "2", "--json",
                     str(summary_file)], cache_dir)
    assert first.returncode == 0, first.stderr
    variants = sm90_kernel_variants(256, 128, 132)
    assert len(variants) > 1
    assert cached_instantiations(cache_dir) == names(kernel_source(256, 128, c) for c in variants)
    summary = json.loads(summary_file.read_text())
    assert (summary["kernels"], summary["compiled"], summary["cached"]) == (len(variants), len(variants), 0)
    assert summary["failures"] == [] and summary["by_family"] == {"dense": len(variants)}

    second = run_cli(["compile", "--n", "256", "--k", "128", "--quiet"], cache_dir)
    assert second.returncode == 0, second.stderr
    assert f"{len(variants)} kernels (dense {len(variants)}): 0 compiled, {len(variants)} cached" in second.stdout


def test_only_m_restricts_to_the_kernels_of_m(cache_dir):
    assert cli_main(["compile", "--only-m", "--m", "64", "--n", "256", "--k", "128", "--quiet"]) == 0
    config = get_config(GemmProblem(64, 256, 128, 132))
    assert cached_instantiations(cache_dir) == {kernel_source(256, 128, config).instantiation()}


def test_masked_kernels_from_a_shapes_file(tmp_path, cache_dir):
    """--shapes lines are 'm n k'; for masked, m is expected_m (one kernel per distinct choice)."""
    shapes = tmp_path / "shapes.txt"
    shapes.write_text("# m n k\n32 256 128\n\n32, 256, 128  # the same again\n")
    assert cli_main(["compile", "--family", "masked", "--groups", "8", "--shapes", str(shapes), "--quiet"]) == 0
    config = get_config(GemmProblem(32, 256, 128, 132, kernel_type=KernelType.M_GROUPED_MASKED, num_groups=8))
    source = kernel_source(256, 128, config, KernelType.M_GROUPED_MASKED)
    assert cached_instantiations(cache_dir) == {source.instantiation()}


def test_version(capsys):
    with pytest.raises(SystemExit) as info:
        cli_main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out.strip() == f"deep_gemm {deep_gemm.__version__}"


@pytest.mark.parametrize("args, names_arg", [
    (["compile", "--m", "-5", "--n", "256", "--k", "128"], "--m"),
    (["compile", "--n", "0", "--k", "128"], "--n"),
    (["compile", "--num-sms", "0", "--n", "256", "--k", "128"], "--num-sms"),
    (["compile", "--groups", "0", "--n", "256", "--k", "128"], "--groups"),
    (["compile", "--n", "256", "--k", "100000000"], "k=100000000"),
    (["compile", "--arch", "sm_100", "--n", "256", "--k", "128"], "--arch"),
    (["compile", "--family", "bogus", "--n", "256", "--k", "128"], "--family"),
    (["compile", "--family", "masked", "--n", "256", "--k", "128"], "--family masked"),
    (["compile", "--shapes", "/nonexistent/shapes.txt"], "--shapes /nonexistent/shapes.txt"),
    (["compile", "--model", "no-such-model"], "--model no-such-model"),
    (["compile", "--model", "deepseek-v3", "--tp", "3"], "tp=3"),
    (["compile", "--jobs", "-1", "--n", "256", "--k", "128"], "--jobs"),
    (["compile", "--only-m", "--n", "256", "--k", "128"], "--only-m"),
    (["compile"], "nothing to compile"),
    ([], "required"),
    (["compile", "--json", "/nonexistent/dir/x.json", "--n", "256", "--k", "128"], "--json /nonexistent/dir/x.json"),
    (["compile", "--json", "/", "--n", "256", "--k", "128"], "--json /: is a directory"),
    (["compile", "--n", "256", "--k", "128", "--tp", "8"], "--tp describes a --model deployment"),
    (["compile", "--n", "256", "--k", "128", "--max-tokens", "64"], "--max-tokens describes a --model"),
    (["compile", "--n", "256", "--k", "128", "--training"], "--training describes a --model"),
    (["compile", "--num-sms", "1000", "--n", "256", "--k", "128"], "--num-sms must be at most"),
    (["compile", "--n", "7168"], "--k: needed with --n"),
    (["compile", "--k", "7168"], "--n: needed with --k"),
    (["compile", "--m", "64"], "--n and --k: needed with --m"),
])
def test_bad_arguments_exit_2_with_one_line(args, names_arg, capsys, cache_dir):
    try:
        code = cli_main(args)
    except SystemExit as e:  # argparse's own checks
        code = e.code
    assert code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and names_arg in err, err
    assert entries(cache_dir) == set()


def test_num_sms_is_bounded_by_the_arch_without_its_gpu(monkeypatch):
    """Without a GPU of the target arch the bound is the arch's full die (documented in --help)."""
    import argparse
    import torch
    from deep_gemm.__main__ import MAX_NUM_SMS, _check_compile_args
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)

    def args(arch, num_sms):
        return argparse.Namespace(jobs=0, model=None, tp=None, max_tokens=None, training=False, n=[256], k=[128],
                                  m=None, shapes=None, num_sms=num_sms, arch=arch, json=None)
    for arch, bound in MAX_NUM_SMS.items():
        _check_compile_args(args(arch, bound))
        with pytest.raises(ValueError, match=f"--num-sms must be at most {bound} \\(the most SMs an {arch} GPU"):
            _check_compile_args(args(arch, bound + 1))
    assert MAX_NUM_SMS == {"sm_90a": 144, "sm_100a": 160}
    assert "sm_90a 144, sm_100a 160" in " ".join(_help_of("compile").split())


def _help_of(*argv) -> str:
    from deep_gemm.__main__ import build_parser
    parser = build_parser()
    for name in argv:
        parser = next(a for a in parser._actions if a.dest in ("cmd", "cache_cmd")).choices[name]
    return parser.format_help()


def test_every_option_has_help():
    """Every option of every subcommand says what it is (hidden compatibility options excepted)."""
    import argparse
    from deep_gemm.__main__ import build_parser
    missing = []

    def walk(parser, path):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, child in action.choices.items():
                    walk(child, f"{path} {name}")
            elif action.option_strings and not isinstance(action, argparse._HelpAction) and not action.help:
                missing.append(f"{path} {action.option_strings[0]}")
    walk(build_parser(), "python -m deep_gemm")
    assert missing == []
    assert "sm_90a (Hopper" in _help_of("compile")


def test_summary_line_counts_kernels_in_the_right_number():
    from deep_gemm.__main__ import summary_line
    summary = dict(kernels=1, by_family={"dense": 1}, compiled=0, cached=1, waited=0, failures=[], seconds=0.01,
                   num_sms=132, cache_dir="/c")
    assert summary_line(summary).startswith("1 kernel (dense 1): 0 compiled, 1 cached")
    summary.update(kernels=2, by_family={"dense": 2})
    assert summary_line(summary).startswith("2 kernels (dense 2)")


def test_bad_shapes_line_names_file_and_line(tmp_path, capsys):
    shapes = tmp_path / "bad.txt"
    shapes.write_text("64 256 128\n64 256\n")
    assert cli_main(["compile", "--shapes", str(shapes)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and f"{shapes}:2: expected 'm n k'" in err


def test_error_without_traceback_in_a_real_process(cache_dir):
    result = run_cli(["compile", "--shapes", "/nonexistent/shapes.txt"], cache_dir)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_subcommands_of_doctor_are_added_when_it_exists():
    """deep_gemm/doctor.py (optional) registers its subcommands through add_commands(subparsers)."""
    import importlib.util
    if importlib.util.find_spec("deep_gemm.doctor") is None:
        pytest.skip("deep_gemm/doctor.py is not there yet")
    with pytest.raises(SystemExit) as info:
        cli_main(["doctor", "--help"])
    assert info.value.code == 0


def test_compile_for_sm100a_writes_cubins(tmp_path, cache_dir):
    """`compile --arch sm_100a` (no Blackwell GPU needed) builds the sm100 family's kernels of the shape, both scale
    paths, into the cache: one cubin per kernel."""
    from deep_gemm.families import sm100_fp8_gemm_1d2d
    summary_file = tmp_path / "summary.json"
    result = run_cli(["compile", "--arch", "sm_100a", "--m", "128", "--n", "512", "--k", "256", "--only-m",
                      "--jobs", "2", "--json", str(summary_file)], cache_dir)
    assert result.returncode == 0, result.stderr
    summary = json.loads(summary_file.read_text())
    assert summary["failures"] == [] and summary["arch"] == "sm_100a" and summary["kernels"] >= 2
    expected = set()
    for scales in ("fp32", "ue8m0"):
        expected |= names(sm100_fp8_gemm_1d2d.runtime_kernels(512, 256, 148, "sm_100a", ms=[128], scales=scales))
    assert cached_instantiations(cache_dir) == expected
    for entry in entries(cache_dir):
        cubins = [f for f in os.listdir(os.path.join(str(cache_dir), "cache", entry)) if f.endswith(".cubin")]
        assert len(cubins) == 1, entry
