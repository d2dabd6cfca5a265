"""Compile many kernels at once in worker processes (used on the first sight of an (n, k), see deep_gemm/families), and
remember which groups of kernels are complete in the disk cache (`build_group`).

NOTES: NVRTC compiles do not overlap in threads (measured), so the work goes to `python` subprocesses. A worker
imports only `deep_gemm.jit` (a stub parent package keeps `deep_gemm/__init__`, and so torch, out of it): it
starts in ~0.1 s, and the caller's CUDA state never meets a fork. Workers publish into the disk cache with the
usual atomic rename; whatever a worker fails to build is simply built (and its error raised) by the caller later.
"""
import contextlib
import functools
import hashlib
import json
import logging
import os
import subprocess
import sys
import tempfile
import uuid
from typing import Callable, List, Optional, Sequence

from .. import _package_digest, log
from .._version import __version__
from ..envs import read_env
from .cache import META, KernelCache, cache_key, headers_digest
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


def _entry_names(sources: Sequence[KernelSource], arch: str) -> List[str]:
    """The cache entry (directory name) of each source, for the current compiler, flags and headers."""
    env = read_env()
    compiler = get_compiler(env.jit_use_nvcc, env.jit_nvcc_path)
    flags = compiler.flags(arch, **compile_options(env))
    identity, headers = compiler.identity(), headers_digest()
    return [f"{s.name}.{cache_key(s.code(), identity, flags, arch, headers)}" for s in sources]


def _present(cache: KernelCache, entry: str) -> bool:
    # NOTES: existence only (one stat): a hit is verified (size, sha256) when the kernel is loaded, where a corrupted
    # entry is moved aside and rebuilt.
    return os.path.isfile(os.path.join(cache.root, entry, META))


def missing(sources: Sequence[KernelSource], arch: str) -> List[KernelSource]:
    """The sources whose cubin is not in the disk cache (for the current compiler and flags)."""
    cache = KernelCache(read_env().jit_cache_dir)
    return [s for s, entry in zip(sources, _entry_names(sources, arch)) if not _present(cache, entry)]


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


# ---------------------------------------------------------------- complete groups

GROUPS_DIR = "groups"  # beside cache/ and locks/ in DG_JIT_CACHE_DIR


@functools.lru_cache(maxsize=None)
def _code_stamp() -> str:
    """This installation of deep_gemm: an installed package's code digest recorded at build time, else (a checkout)
    its version and every module's path, size and mtime (one stat each, once per process: a process runs the code it
    imported). Part of a group's marker name, so that another version or an edited checkout, whose heuristics may
    pick other kernels, does not trust a marker written by this one.
    NOTES: not the build record setup.py writes (`_build_info.py`): rebuilding `_C` in place rewrote it and so
    dropped every marker the warm-up had written (measured: the first call enumerated again, 300 ms)."""
    installed = _package_digest.recorded()
    if installed is not None:
        return f"{__version__} {installed['code']}"
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    h = hashlib.sha256(__version__.encode())
    for dirpath, dirnames, files in os.walk(root):
        dirnames.sort()
        for f in sorted(files):
            if f.endswith(".py") and f not in _package_digest.CODE_SKIPS:
                st = os.stat(os.path.join(dirpath, f))
                h.update(f"{os.path.relpath(os.path.join(dirpath, f), root)} {st.st_size} {st.st_mtime_ns}\0".encode())
    return h.hexdigest()


def _marker_path(group: tuple, arch: str) -> str:
    env = read_env()
    compiler = get_compiler(env.jit_use_nvcc, env.jit_nvcc_path)
    stable_flags = [f for f in compiler.flags(arch, **compile_options(env)) if not f.startswith("-I")]
    h = hashlib.sha256()
    for part in (repr(group), arch, compiler.identity(), " ".join(stable_flags), headers_digest(), _code_stamp()):
        h.update(part.encode() + b"\0")
    return os.path.join(env.jit_cache_dir, GROUPS_DIR, h.hexdigest()[:32] + ".json")


def _read_marker(path: str) -> Optional[List[str]]:
    try:
        with open(path) as f:
            entries = json.load(f)["entries"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return entries if isinstance(entries, list) and all(isinstance(e, str) for e in entries) else None


def _write_marker(path: str, group: tuple, entries: List[str]) -> None:
    """Atomically (write aside, rename); a cache directory we may not write simply keeps no marker."""
    tmp = f"{path}.tmp.{uuid.uuid4().hex}"
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(tmp, "w") as f:
            json.dump(dict(group=repr(group), entries=entries), f)
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.remove(tmp)


def build_group(group: tuple, make_sources: Callable[[], Sequence[KernelSource]], arch: str, jobs: int = 0) -> int:
    """`build_many(make_sources(), arch, jobs)` for a group of kernels that `group` (a tuple of plain values) names
    completely, e.g. every kernel a family's heuristic can pick for one (n, k). Once all of them are in the disk
    cache, a marker (DG_JIT_CACHE_DIR/groups/) lists their entries; while the marker's entries all exist, later
    calls, in any process, check those entries (one stat each) instead of enumerating, generating and hashing the
    kernels, which is most of a first call's host time. A marker never vouches for a cubin: a kernel is verified
    when it is loaded, as always; a stale or wrong marker can only skip a precompile, and the kernel is then built
    when first used. Returns how many kernels were missing (0 when the marker held)."""
    path = _marker_path(group, arch)
    entries = _read_marker(path)
    cache = KernelCache(read_env().jit_cache_dir)
    if entries is not None and all(_present(cache, e) for e in entries):
        return 0
    sources = list(make_sources())
    count = build_many(sources, arch, jobs)
    entries = _entry_names(sources, arch)
    if all(_present(cache, e) for e in entries):
        _write_marker(path, group, entries)
    return count
