"""The C++ launch fast path on the CPU: it is built, parses calls like Python does, and hands anything else over."""
import os
import shutil
import subprocess

import pytest
import torch

import deep_gemm
from deep_gemm.ops import gemm as gemm_mod

def _inputs(m=128, n=64, k=256):
    a = torch.zeros((m, k), dtype=torch.float8_e4m3fn)
    sa = torch.zeros(((k + 127) // 128, m)).t()
    b = torch.zeros((n, k), dtype=torch.float8_e4m3fn)
    sb = torch.zeros(((n + 127) // 128, (k + 127) // 128))
    out = torch.zeros((m, n), dtype=torch.bfloat16)
    return (a, sa), (b, sb), out


def test_pip_built_module_is_present_and_used():
    # NOTES: `pip install .` builds deep_gemm._C (optional=True, so a broken build would otherwise pass silently).
    from deep_gemm import _C
    assert gemm_mod.fast_path_name() in ("cpython_api", "torch_ext")
    assert _C.stats()["plans"] == 0  # no CUDA here: nothing can have been registered


def test_layout_key_reads_dtype_device_sizes_strides():
    from deep_gemm import _C
    lhs, rhs, out = _inputs()
    key = _C.layout_key(lhs, rhs, out)
    assert key == (1, -1, 128, 256, 256, 1,   # A: e4m3, CPU, [128, 256], strides (256, 1)
                   2, -1, 128, 2, 1, 128,     # SA: f32, MN-major
                   1, -1, 64, 256, 256, 1,    # B
                   2, -1, 1, 2, 2, 1,         # SB
                   3, -1, 128, 64, 64, 1)     # out: bf16
    a, sa = lhs
    wide = torch.zeros((128, 512), dtype=torch.float8_e4m3fn)[:, :256]
    assert _C.layout_key((wide, sa), rhs, out)[4] == 512  # a new row stride is a new layout


@pytest.mark.parametrize("case", ["list_pair", "subclass", "wrong_dtype", "three_d", "not_tensor", "short_pair"])
def test_layout_key_refuses_what_python_must_handle(case):
    from deep_gemm import _C
    (a, sa), (b, sb), out = _inputs()
    lhs, rhs = (a, sa), (b, sb)
    if case == "list_pair":
        lhs = [a, sa]
    elif case == "subclass":
        class Sub(torch.Tensor):
            pass
        out = out.as_subclass(Sub)
    elif case == "wrong_dtype":
        out = out.half()
    elif case == "three_d":
        out = out[None]
    elif case == "not_tensor":
        rhs = (b, 1.0)
    elif case == "short_pair":
        lhs = (a,)
    assert _C.layout_key(lhs, rhs, out) is None


def test_errors_come_through_the_fast_module():
    """With the fast module in front, bad calls still get the Python path's typed errors."""
    assert gemm_mod._fast is not None
    lhs, rhs, out = _inputs()
    with pytest.raises(ValueError, match="CUDA tensor"):
        deep_gemm.gemm_fp8_fp8_bf16_nt(lhs, rhs, out)
    with pytest.raises(TypeError, match="lhs"):
        deep_gemm.gemm_fp8_fp8_bf16_nt(lhs[0], rhs, out)
    with pytest.raises(TypeError, match="3"):
        gemm_mod._fast.gemm(lhs, rhs)
    stats = gemm_mod._fast.stats()
    assert stats["slow"] >= 2 and stats["fast"] == 0


def test_calls_off_the_fast_path_never_register_a_plan():
    """For a call the C++ side cannot launch itself (CPU tensors here) whatever the Python path returns is ignored:
    no plan is parsed or registered."""
    from deep_gemm import _C
    lhs, rhs, out = _inputs()
    before = _C.stats()
    try:
        _C.init(lambda *args: (1, 2, 3), None, RuntimeError, torch.Tensor, torch.nn.Parameter,
                torch.float8_e4m3fn, torch.float32, torch.bfloat16)
        assert _C.gemm(lhs, rhs, out) is None
        after = _C.stats()
        assert after["slow"] == before["slow"] + 1
        assert after["registered"] == before["registered"] and after["plans"] == 0
    finally:
        gemm_mod._init_fast_module(_C)


def test_cuda_abi_matches_cuda_h(tmp_path):
    """csrc/cuda_abi.h re-declares a few driver types: check them against the real cuda.h."""
    cxx = shutil.which("g++") or shutil.which("c++")
    cuda_h = [d for d in ("/usr/local/cuda/include", os.path.join(os.environ.get("CUDA_HOME", "/nonexistent"),
                                                                   "include")) if os.path.isfile(f"{d}/cuda.h")]
    if cxx is None or not cuda_h:
        pytest.skip("needs a C++ compiler and cuda.h")
    from deep_gemm.jit.torch_ext import source_dir
    src = tmp_path / "abi.cpp"
    src.write_text("""
#include <cstddef>
#include <cuda.h>
#include "cuda_abi.h"
namespace dg = deep_gemm::cu;
static_assert(sizeof(dg::TensorMap) == sizeof(CUtensorMap) && alignof(dg::TensorMap) == alignof(CUtensorMap));
static_assert(sizeof(dg::LaunchAttribute) == sizeof(CUlaunchAttribute));
static_assert(offsetof(dg::LaunchAttribute, value) == offsetof(CUlaunchAttribute, value));
static_assert(offsetof(dg::LaunchAttribute, value.cluster_dim.z) == offsetof(CUlaunchAttribute, value.clusterDim.z));
static_assert(sizeof(dg::LaunchConfig) == sizeof(CUlaunchConfig));
static_assert(offsetof(dg::LaunchConfig, shared_mem_bytes) == offsetof(CUlaunchConfig, sharedMemBytes));
static_assert(offsetof(dg::LaunchConfig, stream) == offsetof(CUlaunchConfig, hStream));
static_assert(offsetof(dg::LaunchConfig, attrs) == offsetof(CUlaunchConfig, attrs));
static_assert(offsetof(dg::LaunchConfig, num_attrs) == offsetof(CUlaunchConfig, numAttrs));
static_assert(dg::kLaunchAttributeClusterDimension == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION);
static_assert(dg::kTensorMapInterleaveNone == CU_TENSOR_MAP_INTERLEAVE_NONE);
static_assert(dg::kTensorMapFloatOOBFillNone == CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
static_assert(sizeof(CUresult) == sizeof(dg::Result));
// The function-pointer types must accept the real entry points.
static dg::TensorMapEncodeTiledFn encode = reinterpret_cast<dg::TensorMapEncodeTiledFn>(&cuTensorMapEncodeTiled);
static_assert(sizeof(CUtensorMapDataType) == sizeof(int) && sizeof(CUtensorMapSwizzle) == sizeof(int));
int main() { return encode == nullptr; }
""")
    proc = subprocess.run([cxx, "-std=c++17", "-fsyntax-only", f"-I{cuda_h[0]}", f"-I{source_dir()}", str(src)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.slow
def test_torch_build_of_the_fast_path(tmp_path, monkeypatch):
    """The run-time build against the installed torch compiles, loads, parses keys like the pip-built module,
    and is found again (no rebuild) by a fresh lookup."""
    if not (shutil.which(os.environ.get("CXX", "") or "c++") or shutil.which("g++")):
        pytest.skip("no C++ compiler")
    from deep_gemm import _C
    from deep_gemm.jit import torch_ext
    monkeypatch.setenv("DG_JIT_CACHE_DIR", str(tmp_path))
    assert torch_ext.load_cached() is None
    module = torch_ext.build()
    assert module.__name__ == torch_ext.MODULE
    assert torch_ext.load_cached() is not None
    lhs, rhs, out = _inputs(m=100, n=72, k=300)
    try:
        gemm_mod._init_fast_module(module)
        assert module.layout_key(lhs, rhs, out) == _C.layout_key(lhs, rhs, out)
        assert module.layout_key([*lhs], rhs, out) is None
        with pytest.raises(ValueError, match="CUDA tensor"):
            module.gemm(lhs, rhs, out)
    finally:
        gemm_mod._init_fast_module(_C)
