"""JIT: codegen -> compile (NVRTC / nvcc) -> on-disk cache -> load (launches: deep_gemm._C)."""
import logging
import os
import threading
from typing import Dict, Optional, Tuple

from .. import log
from ..envs import read_env
from . import counters
from .cache import CacheError, KernelCache, cache_key, get_or_build
from .codegen import CppName, KernelSource
from .compiler import CompileError, check_ptxas_report, compile_options, get_compiler
from .disasm import sass_text
from .parallel import build_group, build_many
from .paths import ToolchainError, include_dirs, project_include_dir
from .runtime import CUDADriverError, LoadedKernel

__all__ = ["CppName", "KernelSource", "build", "build_many", "build_group", "load", "stats", "CompileError",
           "CacheError", "ToolchainError", "CUDADriverError", "include_dirs", "project_include_dir"]

_loaded: Dict[Tuple[str, str], LoadedKernel] = {}
_lock = threading.Lock()
_log = logging.getLogger("deep_gemm.jit")
_log_command = logging.getLogger("deep_gemm.jit.command")
_log_ptxas = logging.getLogger("deep_gemm.jit.ptxas")
_log_ptx = logging.getLogger("deep_gemm.jit.ptx")
_log_sass = logging.getLogger("deep_gemm.jit.sass")


def stats() -> Dict[str, int]:
    """Kernel builds of this process and of its precompile workers: {"compiled": n (the compiler ran),
    "disk_hits": n (found in the disk cache, possibly after waiting for another process's compile)}. Multi-process
    tests check exactly one compile per kernel with it."""
    return counters.snapshot()


def build(source: KernelSource, arch: str) -> Tuple[bytes, bool, float]:
    """Compile (or fetch from the disk cache) one kernel. Returns (cubin, was_cached, seconds)."""
    env = read_env()
    log.apply_env(env)
    compiler = get_compiler(env.jit_use_nvcc, env.jit_nvcc_path)
    options = compile_options(env)
    flags = compiler.flags(arch, **options)
    code = source.code()
    key = cache_key(code, compiler.identity(), flags, arch)
    cache = KernelCache(env.jit_cache_dir)
    entry = cache.entry_dir(source.name, key)
    seconds = [0.0]

    def _compile():
        _log_command.debug("compiling %s with %s: %s", source.instantiation(), compiler.name, " ".join(flags))
        result = compiler.compile(code, arch, want_ptx=env.jit_dump_ptx, **options)
        seconds[0] = result.seconds
        _log.debug("compiled %s in %.2f s", source.name, result.seconds)
        if result.log:
            _log_ptxas.debug("compiler log of %s:\n%s", source.name, result.log.rstrip())
        if env.jit_ptxas_check:
            check_ptxas_report(result.log, source.instantiation())
        dumps = {}
        if result.ptx is not None:
            dumps["kernel.ptx"] = result.ptx
            _log_ptx.debug("PTX of %s: %s", source.name, os.path.join(entry, "kernel.ptx"))
        if env.jit_dump_sass:
            sass = _sass(result.cubin, source.name)
            if sass is not None:
                dumps["kernel.sass"] = sass
                _log_sass.debug("SASS of %s: %s", source.name, os.path.join(entry, "kernel.sass"))
        return result.cubin, dict(compiler=compiler.identity(), arch=arch, kernel=source.instantiation(),
                                  compile_seconds=result.seconds), dumps

    cubin, cached = get_or_build(cache, source.name, key, code, _compile)
    counters.add({"disk_hits" if cached else "compiled": 1})
    if cached:
        _log.debug("cache hit %s", entry)
    return cubin, cached, seconds[0]


def _sass(cubin: bytes, name: str) -> Optional[str]:
    """cuobjdump's SASS of `cubin`, or None (and why, logged) when it cannot run here."""
    try:
        return sass_text(cubin)
    except (FileNotFoundError, RuntimeError) as e:
        _log_sass.debug("no SASS of %s: %s", name, e)
        return None


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
