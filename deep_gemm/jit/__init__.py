"""JIT: codegen -> compile (NVRTC / nvcc) -> on-disk cache -> load (launches: deep_gemm._C)."""
import sys
import threading
from typing import Dict, Tuple

from ..envs import read_env
from . import counters
from .cache import CacheError, KernelCache, cache_key, get_or_build
from .codegen import CppName, KernelSource
from .compiler import CompileError, get_compiler
from .parallel import build_many
from .paths import ToolchainError, include_dirs, project_include_dir
from .runtime import CUDADriverError, LoadedKernel

__all__ = ["CppName", "KernelSource", "build", "build_many", "load", "stats", "CompileError", "CacheError",
           "ToolchainError", "CUDADriverError", "include_dirs", "project_include_dir"]

_loaded: Dict[Tuple[str, str], LoadedKernel] = {}
_lock = threading.Lock()


def stats() -> Dict[str, int]:
    """Kernel builds of this process and of its precompile workers: {"compiled": n (the compiler ran),
    "disk_hits": n (found in the disk cache, possibly after waiting for another process's compile)}. Multi-process
    tests check exactly one compile per kernel with it."""
    return counters.snapshot()


def build(source: KernelSource, arch: str) -> Tuple[bytes, bool, float]:
    """Compile (or fetch from the disk cache) one kernel. Returns (cubin, was_cached, seconds)."""
    env = read_env()
    compiler = get_compiler(env.jit_use_nvcc, env.jit_nvcc_path)
    flags = compiler.flags(arch, env.ptxas_verbose)
    code = source.code()
    key = cache_key(code, compiler.identity(), flags, arch)
    cache = KernelCache(env.jit_cache_dir)
    seconds = [0.0]

    def _compile():
        if env.jit_debug:
            print(f"[deep_gemm] compiling {source.instantiation()} with {compiler.name}: {' '.join(flags)}",
                  file=sys.stderr)
        result = compiler.compile(code, arch, ptxas_verbose=env.ptxas_verbose)
        seconds[0] = result.seconds
        if env.jit_debug or env.ptxas_verbose:
            print(f"[deep_gemm] compiled {source.name} in {result.seconds:.2f} s\n{result.log}", file=sys.stderr)
        return result.cubin, dict(compiler=compiler.identity(), arch=arch, kernel=source.instantiation(),
                                  compile_seconds=result.seconds)

    cubin, cached = get_or_build(cache, source.name, key, code, _compile)
    counters.add({"disk_hits" if cached else "compiled": 1})
    if env.jit_debug and cached:
        print(f"[deep_gemm] cache hit {cache.entry_dir(source.name, key)}", file=sys.stderr)
    return cubin, cached, seconds[0]


def load(source: KernelSource, arch: str, num_threads: int, smem_size: int) -> LoadedKernel:
    """In-process cache of loaded kernels (one library per kernel, CUfunctions per device)."""
    key = (source.instantiation(), arch)
    kernel = _loaded.get(key)
    if kernel is None:
        with _lock:
            kernel = _loaded.get(key)
            if kernel is None:
                cubin, _, _ = build(source, arch)
                kernel = LoadedKernel(cubin, num_threads, smem_size)
                _loaded[key] = kernel
    return kernel
