"""Where the headers the JIT compiles against live (project, CUTLASS/CuTe, CUDA runtime, CCCL)."""
import functools
import importlib.util
import os
from typing import List

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class ToolchainError(RuntimeError):
    """A header set or compiler the JIT needs is missing."""


@functools.lru_cache(maxsize=None)
def project_include_dir() -> str:
    """``include/`` holding ``deep_gemm/*.cuh``: inside the installed package, else the source checkout's."""
    for candidate in (os.path.join(_PACKAGE_DIR, "include"), os.path.join(os.path.dirname(_PACKAGE_DIR), "include")):
        if os.path.isfile(os.path.join(candidate, "deep_gemm", "sm90", "fp8_gemm_1d2d.cuh")):
            return candidate
    raise ToolchainError(f"deep_gemm headers not found next to {_PACKAGE_DIR}; reinstall the package")


@functools.lru_cache(maxsize=None)
def cutlass_include_dir() -> str:
    spec = importlib.util.find_spec("cutlass_library")
    if spec is not None and spec.submodule_search_locations:
        for loc in spec.submodule_search_locations:
            path = os.path.join(loc, "source", "include")
            if os.path.isfile(os.path.join(path, "cute", "tensor.hpp")):
                return path
    raise ToolchainError("CuTe/CUTLASS headers not found: `pip install nvidia-cutlass==4.2.0.0`")


def _cuda_home_include() -> List[str]:
    homes = [os.environ.get("CUDA_HOME", ""), os.environ.get("CUDA_PATH", ""), "/usr/local/cuda"]
    return [os.path.join(h, "include") for h in homes if h and os.path.isdir(os.path.join(h, "include"))]


@functools.lru_cache(maxsize=None)
def cuda_include_dirs() -> List[str]:
    """cudart + CCCL headers, and the CCCL dir's parent (CUTLASS 4.2 on CUDA 13 includes <cccl/cuda/std/...>)."""
    dirs: List[str] = []
    try:
        from cuda import pathfinder
        for lib in ("cudart", "cccl"):
            found = pathfinder.find_nvidia_header_directory(lib)
            if found:
                dirs.append(found)
                if lib == "cccl":
                    dirs.append(os.path.dirname(found))
    except Exception:  # pathfinder missing or too old: fall back to the CUDA toolkit
        pass
    for inc in _cuda_home_include():
        dirs += [inc, os.path.join(inc, "cccl")]
    result = []
    for d in dirs:
        if os.path.isdir(d) and d not in result:
            result.append(d)
    if not any(os.path.isfile(os.path.join(d, "cuda_bf16.h")) for d in result):
        raise ToolchainError("CUDA runtime headers (cuda_bf16.h) not found: "
                             "`pip install \"cuda-toolkit[nvrtc,cudart,cccl,crt]==13.0.3\"` or set CUDA_HOME")
    return result


def include_dirs() -> List[str]:
    return [project_include_dir(), cutlass_include_dir()] + cuda_include_dirs()


def project_headers() -> List[str]:
    """Every project header (relative path), sorted: all of them feed the cache key."""
    root = os.path.join(project_include_dir(), "deep_gemm")
    out = []
    for dirpath, _, files in os.walk(root):
        for f in files:
            if f.endswith((".cuh", ".h", ".hpp")):
                out.append(os.path.relpath(os.path.join(dirpath, f), project_include_dir()))
    return sorted(out)
