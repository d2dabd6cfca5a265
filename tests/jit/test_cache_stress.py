"""The kernel cache under stress, with the real compiler (CPU only, so CI runs it): 16 processes compiling the same
set of kernels at once, processes SIGKILLed while compiling and while publishing, corrupted entries of every kind,
and read-only / unwritable cache directories."""
import hashlib
import json
import os
import signal
import stat
import subprocess
import sys
import textwrap
import time

import pytest

from deep_gemm import jit
from deep_gemm.jit.cache import CUBIN, META, KernelCache

from test_cache import (ARCH, REPO, build_key, cache_dir, default_toolchain, entries, race,  # noqa: F401
                        seed_cache, seeded, subprocess_env)

# The set: one small kernel of each family (dense, masked grouped, weight gradient).
SOURCES = textwrap.dedent("""
    from deep_gemm.heuristics import GemmProblem, KernelType, get_config
    from deep_gemm.heuristics.sm90_wgrad import get_wgrad_config
    from deep_gemm.families import sm90_fp8_gemm_1d2d as dense, sm90_fp8_wgrad_1d1d as wgrad
    def sources():
        return [dense.kernel_source(128, 128, get_config(GemmProblem(64, 128, 128, 132))),
                dense.kernel_source(256, 256, get_config(GemmProblem(32, 256, 256, 132, "sm_90a",
                                    KernelType.M_GROUPED_MASKED, 2)), KernelType.M_GROUPED_MASKED),
                wgrad.kernel_source(128, get_wgrad_config(128, 128, 1, 132), 1)]
""")

WORKER = SOURCES + textwrap.dedent("""
    import hashlib, json, os, random, sys, time
    from deep_gemm import jit
    ready, go = sys.argv[1], sys.argv[2]
    todo = sources()
    random.Random(os.getpid()).shuffle(todo)
    open(ready, "w").close()
    deadline = time.time() + 300
    while not os.path.exists(go):
        if time.time() > deadline:
            sys.exit(3)
        time.sleep(0.01)
    result = {}
    for s in todo:
        cubin, cached, _ = jit.build(s, "sm_90a")
        assert cubin[:4] == b"\\x7fELF"
        result[s.instantiation()] = dict(cached=cached, sha=hashlib.sha256(cubin).hexdigest())
    print(json.dumps(result))
""")

# Builds the first kernel of the set, but stops forever at `where` ("compile": after the compiler returned, holding
# the key's lock; "publish": with the cubin half written into the temp directory), after touching `flag`.
STALLING_WORKER = SOURCES + textwrap.dedent("""
    import os, sys, time
    from deep_gemm import jit
    from deep_gemm.jit import cache, compiler
    where, flag = sys.argv[1], sys.argv[2]
    def stall():
        open(flag, "w").close()
        time.sleep(600)
    if where == "compile":
        real = compiler.NVRTCCompiler.compile
        def compile_then_stall(self, *a, **k):
            real(self, *a, **k)
            stall()
        compiler.NVRTCCompiler.compile = compile_then_stall
    else:
        real_open = open
        class HalfWritten:
            def __init__(self, f): self.f = f
            def __enter__(self): return self
            def __exit__(self, *a): self.f.close()
            def write(self, data):
                self.f.write(data[:len(data) // 2]); self.f.flush(); stall()
        def patched_open(path, mode="r", *a, **k):
            f = real_open(path, mode, *a, **k)
            return HalfWritten(f) if str(path).endswith("kernel.cubin") and "w" in mode else f
        cache.open = patched_open
    jit.build(sources()[0], "sm_90a")
""")


def _sources():
    namespace = {}
    exec(SOURCES, namespace)
    return namespace["sources"]()


def _wait_for(path, proc, timeout=300):
    deadline = time.time() + timeout
    while not os.path.exists(path):
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        assert time.time() < deadline, "worker never reached the stall point"
        time.sleep(0.02)


def test_sixteen_processes_one_compile_per_kernel(tmp_path, cache_dir):
    results = race(tmp_path, cache_dir, WORKER, 16)
    sources = _sources()
    cache = KernelCache(str(cache_dir))
    for s in sources:
        per_proc = [r[s.instantiation()] for r in results]
        assert sum(not r["cached"] for r in per_proc) == 1, "exactly one process compiles each kernel"
        assert len({r["sha"] for r in per_proc}) == 1, "every process got the same cubin"
        published = cache.load(s.name, build_key(s))
        assert published is not None and hashlib.sha256(published).hexdigest() == per_proc[0]["sha"]
    expected = sorted(f"{s.name}.{build_key(s)}" for s in sources)
    assert entries(cache_dir) == expected, "one valid entry per kernel and no .tmp.*/.bad.* leftovers"


@pytest.mark.parametrize("where", ["compile", "publish"])
def test_sigkill_leaves_nothing_to_trip_over(tmp_path, cache_dir, where):
    script = tmp_path / "stall.py"
    script.write_text(STALLING_WORKER)
    flag = tmp_path / "stalled"
    env = subprocess_env(cache_dir)
    victim = subprocess.Popen([sys.executable, str(script), where, str(flag)], env=env, cwd=REPO,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    waiter = None
    try:
        _wait_for(flag, victim)
        source = _sources()[0]
        key = build_key(source)
        root = os.path.join(str(cache_dir), "cache")
        if where == "publish":
            leftovers = [n for n in os.listdir(root) if n.startswith(".tmp.")]
            assert leftovers, "the victim should be stuck with a half-written temp directory"
        # A second process asks for the same kernel while the victim holds the lock; it must wait, not fail.
        waiter_script = tmp_path / "waiter.py"
        waiter_script.write_text(SOURCES + "from deep_gemm import jit\nimport sys\n"
                                 "c, cached, _ = jit.build(sources()[0], 'sm_90a')\nprint(cached, len(c))\n")
        waiter = subprocess.Popen([sys.executable, str(waiter_script)], env=env, cwd=REPO,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(8)
        assert waiter.poll() is None, "the waiter should block on the victim's lock"
        victim.send_signal(signal.SIGKILL)
        victim.wait(timeout=60)
        out, err = waiter.communicate(timeout=300)
        assert waiter.returncode == 0, err[-3000:]
        assert out.split()[0] == "False", "the waiter compiled the kernel itself after the victim died"
    finally:
        for p in (victim, waiter):
            if p is not None and p.poll() is None:
                p.kill()
    assert entries(cache_dir) == [f"{source.name}.{key}"], "no temp directory of the dead writer is left"
    cubin, cached, _ = jit.build(source, ARCH)
    assert cached and cubin[:4] == b"\x7fELF"


def _corrupt(entry: str, kind: str) -> None:
    cubin_path, meta_path = os.path.join(entry, CUBIN), os.path.join(entry, META)
    size = os.path.getsize(cubin_path)
    if kind == "truncated":
        with open(cubin_path, "r+b") as f:
            f.truncate(size // 3)
    elif kind == "empty-cubin":
        open(cubin_path, "wb").close()
    elif kind == "garbage-same-size":
        with open(cubin_path, "wb") as f:
            f.write(b"\x7fELF" + os.urandom(size - 4))
    elif kind == "missing-cubin":
        os.remove(cubin_path)
    elif kind == "missing-meta":
        os.remove(meta_path)
    elif kind == "meta-not-json":
        with open(meta_path, "w") as f:
            f.write("\0\0garbage")
    elif kind == "meta-other-key":
        with open(meta_path) as f:
            meta = json.load(f)
        meta["key"] = "0" * 32
        with open(meta_path, "w") as f:
            json.dump(meta, f)
    elif kind == "entry-is-a-file":
        for name in os.listdir(entry):
            os.remove(os.path.join(entry, name))
        os.rmdir(entry)
        with open(entry, "wb") as f:
            f.write(b"\x7fELF not a directory")
    else:
        raise AssertionError(kind)


CORRUPTIONS = ["truncated", "empty-cubin", "garbage-same-size", "missing-cubin", "missing-meta", "meta-not-json",
               "meta-other-key", "entry-is-a-file"]


@pytest.mark.parametrize("kind", CORRUPTIONS)
def test_corrupted_entry_is_detected_and_rebuilt(seeded, cache_dir, kind):
    entry, good = seeded
    _corrupt(entry, kind)
    source = _sources()[0]
    rebuilt, cached, _ = jit.build(source, ARCH)
    assert not cached, "a corrupted entry must not be served"
    assert rebuilt[:4] == b"\x7fELF" and abs(len(rebuilt) - len(good)) < len(good) // 10
    again, cached, _ = jit.build(source, ARCH)
    assert cached and again == rebuilt
    assert os.path.isdir(entry)
    assert entries(cache_dir) == [os.path.basename(entry)]


def test_read_only_prefilled_cache_serves_hits_without_writing(seeded, cache_dir):
    entry, good = seeded
    before = {p: os.stat(p).st_mtime_ns for p in _all_paths(cache_dir)}
    modes = {}
    for p in _all_paths(cache_dir):
        modes[p] = stat.S_IMODE(os.stat(p).st_mode)
        os.chmod(p, modes[p] & ~0o222)
    try:
        cubin, cached, _ = jit.build(_sources()[0], ARCH)
        assert cached and cubin == good
        after = {p: os.stat(p).st_mtime_ns for p in _all_paths(cache_dir)}
        assert after == before, "a cache hit must not write anything"
    finally:
        for p, mode in modes.items():
            os.chmod(p, mode)


def _all_paths(root):
    out = [str(root)]
    for dirpath, dirnames, filenames in os.walk(str(root)):
        out += [os.path.join(dirpath, n) for n in dirnames + filenames]
    return sorted(out)


def test_unwritable_cache_dir_miss_is_a_clear_error(tmp_path, monkeypatch):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")  # works as root too (permissions are not enforced for root)
    monkeypatch.setenv("DG_JIT_CACHE_DIR", str(blocker / "cache_root"))
    with pytest.raises(jit.CacheError, match="not writable.*set DG_JIT_CACHE_DIR"):
        jit.build(_sources()[0], ARCH)
