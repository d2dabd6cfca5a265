"""Compile many kernels at once in worker processes (used on the first sight of an (n, k), see launchers).

NOTES: NVRTC compiles do not overlap in threads (measured), so the work goes to `python` subprocesses. A worker
imports only `deep_gemm.jit` (a stub parent package keeps `deep_gemm/__init__`, and so torch, out of it): it
starts in ~0.1 s, and the caller's CUDA state never meets a fork. Workers publish into the disk cache with the
usual atomic rename; whatever a worker fails to build is simply built (and its error raised) by the caller later.
"""
import json
import logging
import os
import subprocess
import sys
import tempfile
from typing import List, Sequence

from .. import log
from ..envs import read_env
from .cache import KernelCache, cache_key
from .codegen import KernelSource
from .compiler import compile_options, get_compiler
from . import counters

_log = logging.getLogger("deep_gemm.jit")

_WORKER = r"""
import json, os, sys, types
pkg = types.ModuleType("deep_gemm")
pkg.__path__ = [sys.argv[1]]
sys.modules["deep_gemm"] = pkg
from deep_gemm.jit import build, stats
from deep_gemm.jit.codegen import KernelSource
work = json.load(sys.stdin)
try:
    for item in work["sources"]:
        build(KernelSource.from_json(item), work["arch"])
finally:
    print(json.dumps(stats()))  # the parent adds these to its own counters
"""


def missing(sources: Sequence[KernelSource], arch: str) -> List[KernelSource]:
    """The sources whose cubin is not in the disk cache (for the current compiler and flags)."""
    env = read_env()
    compiler = get_compiler(env.jit_use_nvcc, env.jit_nvcc_path)
    flags = compiler.flags(arch, **compile_options(env))
    cache = KernelCache(env.jit_cache_dir)
    out = []
    for s in sources:
        key = cache_key(s.code(), compiler.identity(), flags, arch)
        if not os.path.isfile(os.path.join(cache.entry_dir(s.name, key), "meta.json")):
            out.append(s)
    return out


def build_many(sources: Sequence[KernelSource], arch: str, jobs: int = 0) -> int:
    """Build every source not yet cached, in up to `jobs` processes (default: CPUs, at most 16). Returns how many
    were missing. Never raises for a failed compile (the caller's own build reports it)."""
    todo = missing(sources, arch)
    if not todo:
        return 0
    log.apply_env(read_env())
    jobs = max(1, min(len(todo), jobs or min(16, os.cpu_count() or 1)))
    package_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    procs = []
    for i in range(jobs):
        chunk = todo[i::jobs]
        work = dict(arch=arch, sources=[s.to_json() for s in chunk])
        errors = tempfile.TemporaryFile("w+")  # a file, not a pipe: a chatty worker cannot block on it
        proc = subprocess.Popen([sys.executable, "-c", _WORKER, package_dir], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=errors, text=True)
        proc.stdin.write(json.dumps(work))
        proc.stdin.close()
        procs.append((proc, errors))
    for proc, errors in procs:
        report = proc.stdout.read().strip().splitlines()
        try:
            counters.add(json.loads(report[-1]))
        except (ValueError, IndexError):
            pass  # a worker that died early reports nothing; the caller builds what it missed
        if proc.wait() != 0 and _log.isEnabledFor(logging.DEBUG):
            errors.seek(0)
            _log.debug("a precompile worker failed:\n%s", errors.read())
        errors.close()
    return len(todo)
