"""Package surface: public names, DG_* environment parsing (deep_gemm/envs.py), header discovery."""
import dataclasses
import importlib.metadata
import os
import sys

import pytest

import deep_gemm
from deep_gemm import envs, jit
from deep_gemm.jit.compiler import NVRTCCompiler
from deep_gemm.jit.paths import project_headers, project_include_dir

DISTRIBUTION = "deepgemm-sm90"  # pyproject.toml [project] name; the import name stays deep_gemm

FLAGS = {"DG_JIT_USE_NVCC": "jit_use_nvcc", "DG_JIT_DEBUG": "jit_debug", "DG_PRINT_CONFIGS": "print_configs",
         "DG_JIT_PTXAS_VERBOSE": "ptxas_verbose"}
ALL_VARS = ["DG_JIT_CACHE_DIR", "DG_JIT_NVCC_PATH", *FLAGS]


@pytest.fixture
def clean_env(monkeypatch):
    for name in ALL_VARS:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_public_names():
    assert len(set(deep_gemm.__all__)) == len(deep_gemm.__all__)
    for name in deep_gemm.__all__:
        assert hasattr(deep_gemm, name), name
    for name in ("gemm_fp8_fp8_bf16_nt", "get_col_major_tma_aligned_tensor", "set_num_sms", "get_num_sms",
                 "ceil_div", "get_tma_aligned_size", "per_token_cast_to_fp8", "per_block_cast_to_fp8", "calc_diff"):
        assert name in deep_gemm.__all__ and callable(getattr(deep_gemm, name)), name
    assert isinstance(deep_gemm.__version__, str)


def test_jit_public_names():
    for name in jit.__all__:
        assert hasattr(jit, name), name
    for error in (jit.CompileError, jit.CacheError, jit.ToolchainError, jit.CUDADriverError):
        assert issubclass(error, RuntimeError)


def test_env_defaults(clean_env):
    env = envs.read_env()
    assert env.jit_cache_dir == os.path.expanduser("~/.deep_gemm")
    assert env.jit_nvcc_path == ""
    for field in FLAGS.values():
        assert getattr(env, field) is False, field


def test_env_is_frozen(clean_env):
    with pytest.raises(dataclasses.FrozenInstanceError):
        envs.read_env().jit_debug = True


def test_env_reads_each_call(clean_env):
    assert envs.read_env().jit_use_nvcc is False
    clean_env.setenv("DG_JIT_USE_NVCC", "1")
    assert envs.read_env().jit_use_nvcc is True


@pytest.mark.parametrize("var", sorted(FLAGS))
@pytest.mark.parametrize("value,expected", [
    ("1", True), ("true", True), ("TRUE", True), ("yes", True), ("on", True), (" 1 ", True), ("2", True),
    ("0", False), ("false", False), ("False", False), ("no", False), ("off", False), ("", False), ("  ", False),
])
def test_flag_parsing(clean_env, var, value, expected):
    clean_env.setenv(var, value)
    env = envs.read_env()
    assert getattr(env, FLAGS[var]) is expected
    for other, field in FLAGS.items():
        if other != var:
            assert getattr(env, field) is False, "one variable must set one field"


def test_cache_dir(clean_env, tmp_path):
    clean_env.setenv("DG_JIT_CACHE_DIR", str(tmp_path))
    assert envs.read_env().jit_cache_dir == str(tmp_path)
    clean_env.setenv("DG_JIT_CACHE_DIR", "~/dg_somewhere")
    assert envs.read_env().jit_cache_dir == os.path.expanduser("~/dg_somewhere")
    clean_env.setenv("DG_JIT_CACHE_DIR", "")
    assert envs.read_env().jit_cache_dir == os.path.expanduser("~/.deep_gemm")


def test_nvcc_path(clean_env):
    clean_env.setenv("DG_JIT_NVCC_PATH", "/opt/cuda/bin/nvcc")
    assert envs.read_env().jit_nvcc_path == "/opt/cuda/bin/nvcc"


def test_project_include_dir():
    root = project_include_dir()
    assert os.path.isabs(root)
    assert os.path.isfile(os.path.join(root, "deep_gemm", "sm90", "fp8_gemm_1d2d.cuh"))
    assert jit.project_include_dir() == root
    # The kernels include only project headers: no CUTLASS, CCCL or CUDA header directories.
    assert jit.include_dirs() == [root]


def test_project_headers_feed_the_cache_key():
    headers = project_headers()
    assert headers == sorted(headers)
    assert os.path.join("deep_gemm", "sm90", "fp8_gemm_1d2d.cuh") in headers
    assert os.path.join("deep_gemm", "common", "scheduler.cuh") in headers
    for rel in headers:
        assert not os.path.isabs(rel) and os.path.isfile(os.path.join(project_include_dir(), rel))


def test_version_is_single_sourced():
    dist = importlib.metadata.distribution(DISTRIBUTION)
    assert dist.version == deep_gemm.__version__
    assert "deep_gemm" in dist.read_text("top_level.txt").split()


def test_py_typed_ships_with_the_package():
    assert os.path.isfile(os.path.join(os.path.dirname(deep_gemm.__file__), "py.typed"))


@pytest.mark.parametrize("version", [(12, 8), (12, 9), (13, 0), (13, 3)])
def test_nvrtc_versions_accepted(monkeypatch, version):
    from cuda.bindings import nvrtc
    monkeypatch.setattr(nvrtc, "nvrtcVersion", lambda: (nvrtc.nvrtcResult.NVRTC_SUCCESS, *version))
    assert NVRTCCompiler().loaded_identity() == "nvrtc-%d.%d" % version


@pytest.mark.parametrize("version", [(11, 8), (12, 6), (12, 7)])
def test_old_nvrtc_refused(monkeypatch, version):
    from cuda.bindings import nvrtc
    monkeypatch.setattr(nvrtc, "nvrtcVersion", lambda: (nvrtc.nvrtcResult.NVRTC_SUCCESS, *version))
    with pytest.raises(jit.ToolchainError, match=r"NVRTC %d\.%d is too old.*12\.8\+.*\[cu13\].*\[cu12\]" % version):
        NVRTCCompiler().loaded_identity()


def test_missing_nvrtc_library_names_the_extras(monkeypatch):
    from cuda.bindings import nvrtc

    def not_found():
        raise RuntimeError("Unable to load libnvrtc.so")
    monkeypatch.setattr(nvrtc, "nvrtcVersion", not_found)
    with pytest.raises(jit.ToolchainError, match=r"NVRTC could not be loaded.*libnvrtc.*\[cu13\].*\[cu12\]"):
        NVRTCCompiler().loaded_identity()


def test_missing_cuda_bindings_names_the_extras(monkeypatch):
    import cuda.bindings
    monkeypatch.delattr(cuda.bindings, "nvrtc", raising=False)
    monkeypatch.setitem(sys.modules, "cuda.bindings.nvrtc", None)
    with pytest.raises(jit.ToolchainError, match=r"cuda-bindings is required.*\[cu13\].*\[cu12\]"):
        NVRTCCompiler().loaded_identity()
