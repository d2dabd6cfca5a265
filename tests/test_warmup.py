"""deep_gemm.warmup (deep_gemm/warmup.py): which kernels it builds (the families' own lists), the model shapes,
argument errors, and the one-compiler-per-node protocol."""
import json
import os
import subprocess
import sys

import pytest

import deep_gemm
from deep_gemm import jit
from deep_gemm.heuristics import KernelType
from deep_gemm.heuristics.sm90 import sm90_kernel_variants
from deep_gemm.families import sm90_fp8_gemm_1d2d as gemm_1d2d, sm90_fp8_wgrad_1d1d as wgrad_1d1d
from deep_gemm.warmup import MODELS, is_compile_leader, model_shapes

ARCH = "sm_90a"
REPO = os.path.dirname(os.path.dirname(os.path.abspath(deep_gemm.__file__)))


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    root = tmp_path / "dg_cache"
    monkeypatch.setenv("DG_JIT_CACHE_DIR", str(root))
    for name in ("LOCAL_RANK", "RANK", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    return root


def cached_instantiations(root) -> set:
    path = os.path.join(str(root), "cache")
    out = set()
    for entry in os.listdir(path) if os.path.isdir(path) else []:
        with open(os.path.join(path, entry, "meta.json")) as f:
            out.add(json.load(f)["kernel"])
    return out


def test_dense_builds_the_runtime_variants_once(cache_dir):
    summary = deep_gemm.warmup(dense=[(256, 128)], num_sms=132, progress=False)
    expected = {gemm_1d2d.kernel_source(256, 128, c).instantiation() for c in sm90_kernel_variants(256, 128, 132)}
    assert cached_instantiations(cache_dir) == expected
    assert (summary["kernels"], summary["compiled"], summary["cached"], summary["failures"]) == \
        (len(expected), len(expected), 0, [])
    again = deep_gemm.warmup(dense=[(256, 128)], num_sms=132, progress=False)
    assert (again["compiled"], again["cached"]) == (0, len(expected))


def test_grouped_and_wgrad_kernels_are_the_families_choices(cache_dir):
    """masked: one kernel per expected_m the calls pass; wgrad / k-grouped: the launcher's kernel_choice."""
    summary = deep_gemm.warmup(masked=[(256, 128, 4, [8, 200])], wgrad=[(128, 256)], k_grouped=[(128, 256, 5)],
                               num_sms=132, progress=False)
    expected = {s.instantiation() for s in gemm_1d2d.runtime_kernels(256, 128, 132, ARCH,
                                                                       KernelType.M_GROUPED_MASKED, [8, 200], 4)}
    assert len(expected) == 2
    for m, n, groups in ((128, 256, 1), (128, 256, 5)):
        expected.add(wgrad_1d1d.kernel_source(n, *wgrad_1d1d.kernel_choice(m, n, groups, 132)).instantiation())
    assert cached_instantiations(cache_dir) == expected
    assert summary["by_family"] == {"masked": 2, "wgrad": 1, "k_grouped": 1}
    assert summary["compiled"] == len(expected)


def test_only_ms_and_max_expected_m(monkeypatch):
    """`ms` keeps the kernels of those rows; an int expected_m means every value up to it (no compile here)."""
    monkeypatch.setattr(jit, "build_many", lambda sources, arch, jobs=0: pytest.fail("nothing to build"))
    k = gemm_1d2d.runtime_kernels(4096, 7168, 132, ARCH, KernelType.NORMAL, [64])
    assert len(k) == 1 and len(gemm_1d2d.runtime_kernels(4096, 7168, 132, ARCH)) > 1
    every = gemm_1d2d.runtime_kernels(4096, 7168, 132, ARCH, KernelType.M_GROUPED_MASKED, range(1, 129), 32)
    from deep_gemm.warmup import _family_sources
    assert {s.instantiation() for s in _family_sources("masked", (4096, 7168, 32, 128), None, 132, ARCH)} == \
        {s.instantiation() for s in every}
    with pytest.raises(ValueError, match="expected_m"):
        gemm_1d2d.runtime_kernels(4096, 7168, 132, ARCH, KernelType.M_GROUPED_MASKED)


def test_deepseek_v3_shapes():
    tp8 = model_shapes(MODELS["deepseek-v3"], tp=8, max_tokens=256)
    assert tp8["dense"] == [(2112, 7168), (3072, 1536), (4096, 512), (7168, 2048), (4608, 7168), (7168, 2304),
                            (512, 7168), (7168, 256)]
    assert tp8["contiguous"] == [(4096, 7168, 32), (7168, 2048, 32)]
    assert tp8["masked"] == [(4096, 7168, 32, 64), (7168, 2048, 32, 64)]  # 256 tokens x 8 ranks x top-8 / 256
    assert "wgrad" not in tp8
    train = model_shapes(MODELS["deepseek-v3"], tp=1, training=True)
    assert (7168, 2112) in train["dense"] and (7168, 4096, 256) in train["contiguous"]
    assert (2112, 7168) in train["wgrad"] and train["k_grouped"] == [(4096, 7168, 256), (7168, 2048, 256)]
    with pytest.raises(ValueError, match="tp=3"):
        model_shapes(MODELS["deepseek-v3"], tp=3)


@pytest.mark.parametrize("kwargs, match", [
    (dict(dense=[(0, 128)]), r"dense shape \(0, 128\): n must be positive"),
    (dict(dense=[(256,)]), r"dense shapes are \(n, k\)"),
    (dict(dense=[(256, 10 ** 8)]), "k=100000000 is too large"),
    (dict(masked=[(256, 128, 4, [])]), "expected_m must not be empty"),
    (dict(wgrad=[(128, -1)]), "n must be positive"),
    (dict(dense=[(256, 128)], arch="sm_100"), "arch"),
    (dict(dense=[(256, 128)], num_sms=0), "num_sms"),
    (dict(dense=[(256, 128)], families=["dense", "dgrad"]), "families"),
    (dict(dense=[(256, 128)], ms=[0]), r"ms\[0\]"),
    (dict(model="deepseek-v3"), "model"),
])
def test_bad_arguments_name_themselves(kwargs, match, cache_dir):
    with pytest.raises((ValueError, TypeError), match=match):
        deep_gemm.warmup(progress=False, **kwargs)
    assert not os.path.isdir(os.path.join(str(cache_dir), "cache"))


@pytest.mark.parametrize("env, leader", [
    ({}, True), ({"LOCAL_RANK": "0", "WORLD_SIZE": "8"}, True), ({"LOCAL_RANK": "3", "WORLD_SIZE": "8"}, False),
    ({"WORLD_SIZE": "16", "RANK": "9"}, False), ({"WORLD_SIZE": "16", "RANK": "0"}, True),
    ({"WORLD_SIZE": "1", "RANK": "5"}, True), ({"LOCAL_RANK": "x"}, True),
])
def test_compile_leader_from_the_environment(env, leader, monkeypatch):
    for name in ("LOCAL_RANK", "RANK", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert is_compile_leader() is leader


def test_followers_never_precompile_at_run_time(cache_dir, monkeypatch):
    """The runtime's first-sight precompile spawns workers on the node's leader only."""
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setattr(jit, "build_many", lambda sources, arch, jobs=0: pytest.fail("a follower spawned workers"))
    assert gemm_1d2d.precompile_variants(256, 128, 132, ARCH) == 0


def test_follower_without_a_leader_builds_after_the_timeout(cache_dir):
    summary = deep_gemm.warmup(dense=[(256, 128)], num_sms=132, progress=False, leader=False, leader_timeout_s=0.5)
    assert summary["leader"] is False and summary["failures"] == []
    assert summary["compiled"] == summary["kernels"] == len(cached_instantiations(cache_dir))


_RANK = r"""
import json, sys
import deep_gemm
summary = deep_gemm.warmup(dense=[(256, 128), (512, 256)], num_sms=132, progress=False)
print(json.dumps(summary))
"""


def test_one_compile_per_kernel_over_the_ranks_of_a_node(cache_dir):
    """Four ranks (LOCAL_RANK 0-3) at once: each ends with every kernel cached, the compiles sum to the kernels,
    and the followers compile nothing while the leader is at work."""
    env = dict(os.environ, DG_JIT_CACHE_DIR=str(cache_dir), WORLD_SIZE="4")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (REPO, env.get("PYTHONPATH", "")) if p)
    procs = [subprocess.Popen([sys.executable, "-c", _RANK], env=dict(env, LOCAL_RANK=str(r), RANK=str(r)),
                              cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in range(4)]
    outs = [p.communicate(timeout=600) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err[-2000:] for _, err in outs]
    summaries = [json.loads(out.strip().splitlines()[-1]) for out, _ in outs]
    kernels = summaries[0]["kernels"]
    assert kernels == len(cached_instantiations(cache_dir)) > 2
    assert [s["leader"] for s in summaries] == [True, False, False, False]
    assert sum(s["compiled"] for s in summaries) == kernels
    assert all(s["compiled"] == 0 for s in summaries[1:])
    assert all(s["failures"] == [] and s["compiled"] + s["cached"] + s["waited"] == kernels for s in summaries)
