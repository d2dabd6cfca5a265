"""Every ``DG_*`` environment variable the library reads, typed and with its default (see README)."""
import os
from dataclasses import dataclass


def _flag(name: str, default: str = "0") -> bool:
    return os.environ.get(name, default).strip().lower() not in ("", "0", "false", "no", "off")


@dataclass(frozen=True)
class Env:
    #: Root of the on-disk kernel cache.
    jit_cache_dir: str
    #: Compile with nvcc instead of NVRTC.
    jit_use_nvcc: bool
    #: nvcc to use when ``jit_use_nvcc`` (default: $CUDA_HOME/bin/nvcc, then /usr/local/cuda/bin/nvcc, then PATH).
    jit_nvcc_path: str
    #: Print every compile command, its time and cache hits/misses.
    jit_debug: bool
    #: Print the chosen kernel configuration of every new problem.
    print_configs: bool
    #: Ask ptxas for its resource report (registers, spills) and print it.
    ptxas_verbose: bool
    #: On the first sight of an (n, k), compile every kernel variant any m can pick (parallel processes).
    jit_precompile: bool


def read_env() -> Env:
    """Read the environment now (tests call this after changing ``os.environ``)."""
    return Env(
        jit_cache_dir=os.path.expanduser(os.environ.get("DG_JIT_CACHE_DIR", "") or "~/.deep_gemm"),
        jit_use_nvcc=_flag("DG_JIT_USE_NVCC"),
        jit_nvcc_path=os.environ.get("DG_JIT_NVCC_PATH", ""),
        jit_debug=_flag("DG_JIT_DEBUG"),
        print_configs=_flag("DG_PRINT_CONFIGS"),
        ptxas_verbose=_flag("DG_JIT_PTXAS_VERBOSE"),
        jit_precompile=_flag("DG_JIT_PRECOMPILE", "1"),
    )
