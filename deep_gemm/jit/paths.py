"""Where the headers the JIT compiles against live."""
import functools
import os
from typing import List

from .. import _package_digest

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


def include_dirs() -> List[str]:
    """What the compilers get as -I: the kernels include only project headers (no CUDA, CCCL or CuTe headers; NVRTC
    and nvcc provide the CUDA built-ins such as `__shfl_sync` themselves)."""
    return [project_include_dir()]


def project_headers() -> List[str]:
    """Every project header (relative path), sorted: all of them feed the cache key."""
    return _package_digest.header_files(project_include_dir())
