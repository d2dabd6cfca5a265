"""On-disk kernel cache (deep_gemm/jit/cache.py) and jit.build on top of it (the AOT CLI: tests/test_cli.py)."""
import functools
import importlib.util
import hashlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
import uuid

import pytest

import deep_gemm
from deep_gemm import _package_digest, jit
from deep_gemm.envs import read_env
from deep_gemm.heuristics import GemmProblem, get_config
from deep_gemm.jit.cache import META, CUBIN, SOURCE, TOUCH_INTERVAL_S, Entry, KernelCache, cache_key, get_or_build, prune_plan
from deep_gemm.jit.compiler import compile_options, get_compiler
from deep_gemm.jit.paths import project_include_dir
from deep_gemm.families.sm90_fp8_gemm_1d2d import kernel_source

ARCH = "sm_90a"
REPO = os.path.dirname(os.path.dirname(os.path.abspath(deep_gemm.__file__)))
# The cheapest real kernel: one math warpgroup, a 16-wide tile, a single K block.
SMALL_MNK = (64, 128, 128)


def small_source() -> jit.KernelSource:
    m, n, k = SMALL_MNK
    return kernel_source(n, k, get_config(GemmProblem(m, n, k, 132)))


def build_key(source: jit.KernelSource) -> str:
    """The key jit.build uses for `source` under the current environment."""
    env = read_env()
    compiler = get_compiler(env.jit_use_nvcc, env.jit_nvcc_path)
    return cache_key(source.code(), compiler.identity(), compiler.flags(ARCH, **compile_options(env)), ARCH)


def fake_cubin(tag: bytes = b"") -> bytes:
    return b"\x7fELF" + tag + os.urandom(64)


def entries(root) -> list:
    path = os.path.join(str(root), "cache")
    return sorted(os.listdir(path)) if os.path.isdir(path) else []


def subprocess_env(cache_dir) -> dict:
    env = dict(os.environ)
    env["DG_JIT_CACHE_DIR"] = str(cache_dir)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (REPO, env.get("PYTHONPATH", "")) if p)
    for name in ("DG_JIT_USE_NVCC", "DG_JIT_DEBUG", "DG_JIT_PTXAS_VERBOSE"):
        env.pop(name, None)
    return env


@pytest.fixture(autouse=True)
def default_toolchain(monkeypatch):
    for name in ("DG_JIT_USE_NVCC", "DG_JIT_DEBUG", "DG_JIT_PTXAS_VERBOSE"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    root = tmp_path / "dg_cache"
    monkeypatch.setenv("DG_JIT_CACHE_DIR", str(root))
    return root


@pytest.fixture(scope="module")
def seed_cache(tmp_path_factory):
    """A cache holding one real build of the small kernel (compiled once for the module)."""
    root = tmp_path_factory.mktemp("seed_cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DG_JIT_CACHE_DIR", str(root))
        for name in ("DG_JIT_USE_NVCC", "DG_JIT_DEBUG", "DG_JIT_PTXAS_VERBOSE"):
            mp.delenv(name, raising=False)
        cubin, cached, seconds = jit.build(small_source(), ARCH)
    assert not cached and seconds > 0
    return root, cubin


@pytest.fixture
def seeded(seed_cache, cache_dir):
    """A private copy of the seed cache, selected by DG_JIT_CACHE_DIR."""
    root, cubin = seed_cache
    shutil.copytree(root / "cache", cache_dir / "cache")
    source = small_source()
    entry = KernelCache(str(cache_dir)).entry_dir(source.name, build_key(source))
    assert os.path.isdir(entry)
    return entry, cubin


# ---- cache_key ----

BASE = dict(code="#include <x.cuh>\n", compiler_identity="nvrtc-13.0", flags=["-std=c++17", "-DNDEBUG"], arch=ARCH)


def test_key_is_stable():
    assert cache_key(**BASE) == cache_key(**BASE)
    assert len(cache_key(**BASE)) == 32


@pytest.mark.parametrize("field,value", [
    ("code", "#include <x.cuh>\n// changed\n"),
    ("compiler_identity", "nvrtc-13.1"),
    ("flags", ["-std=c++17"]),
    ("flags", ["-std=c++17", "-DNDEBUG", "--ptxas-options=-v"]),
    ("arch", "sm_100a"),
])
def test_key_changes_with_each_input(field, value):
    assert cache_key(**{**BASE, field: value}) != cache_key(**BASE)


def test_key_ignores_include_paths():
    # An entry filled ahead of time on another machine (other install paths) must still hit.
    a = cache_key(**{**BASE, "flags": BASE["flags"] + ["-I/opt/a/include"]})
    b = cache_key(**{**BASE, "flags": BASE["flags"] + ["-I/home/b/site-packages/include"]})
    assert a == b == cache_key(**BASE)


def test_key_differs_between_real_compilers():
    source = small_source()
    nvrtc = get_compiler(False)
    nvcc = get_compiler(True)
    assert (cache_key(source.code(), nvrtc.identity(), nvrtc.flags(ARCH), ARCH)
            != cache_key(source.code(), nvcc.identity(), nvcc.flags(ARCH), ARCH))


def test_key_tracks_project_headers(monkeypatch):
    monkeypatch.setattr(_package_digest, "recorded", lambda: None)  # as in a checkout: an install is taken as built
    before = cache_key(**BASE)
    path = os.path.join(project_include_dir(), "deep_gemm", f"_pytest_tmp_{uuid.uuid4().hex}.cuh")
    try:
        with open(path, "w") as f:
            f.write("#pragma once\n// one\n")
        with_header = cache_key(**BASE)
        assert with_header != before, "a new project header must change the key"
        stat = os.stat(path)
        with open(path, "w") as f:
            f.write("#pragma once\n// two\n")
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
        edited = cache_key(**BASE)
        assert edited not in (before, with_header), "editing a header's contents must change the key"
    finally:
        os.remove(path)
    assert cache_key(**BASE) == before


# ---- KernelCache ----

def test_store_load_roundtrip(tmp_path):
    cache = KernelCache(str(tmp_path))
    cubin = fake_cubin()
    cache.store("toy", "k1", cubin, "// source\n", dict(compiler="nvrtc-x", arch=ARCH))
    assert cache.load("toy", "k1") == cubin
    assert cache.load("toy", "k2") is None
    assert entries(tmp_path) == ["toy.k1"]
    entry = cache.entry_dir("toy", "k1")
    with open(os.path.join(entry, SOURCE)) as f:
        assert f.read() == "// source\n"
    with open(os.path.join(entry, META)) as f:
        meta = json.load(f)
    assert meta["key"] == "k1" and meta["size"] == len(cubin)
    assert meta["sha256"] == hashlib.sha256(cubin).hexdigest()
    assert meta["compiler"] == "nvrtc-x" and meta["arch"] == ARCH


def test_store_keeps_first_publisher(tmp_path):
    cache = KernelCache(str(tmp_path))
    first, second = fake_cubin(b"1"), fake_cubin(b"2")
    cache.store("toy", "k", first, "", {})
    cache.store("toy", "k", second, "", {})
    assert cache.load("toy", "k") == first
    assert entries(tmp_path) == ["toy.k"], "the loser's temp dir must be removed"


def test_store_replaces_corrupt_entry(tmp_path):
    cache = KernelCache(str(tmp_path))
    entry = cache.entry_dir("toy", "k")
    os.makedirs(entry)
    with open(os.path.join(entry, META), "w") as f:
        f.write("garbage")
    cubin = fake_cubin()
    cache.store("toy", "k", cubin, "", {})
    assert cache.load("toy", "k") == cubin
    assert entries(tmp_path) == ["toy.k"]


def test_load_rejects_non_elf(tmp_path):
    cache = KernelCache(str(tmp_path))
    cache.store("toy", "k", b"not an ELF file", "", {})
    assert cache.load("toy", "k") is None
    assert entries(tmp_path) == [], "a corrupted entry is moved aside and deleted"


def test_load_rejects_flipped_byte(tmp_path):
    cache = KernelCache(str(tmp_path))
    cubin = fake_cubin()
    cache.store("toy", "k", cubin, "", {})
    path = os.path.join(cache.entry_dir("toy", "k"), CUBIN)
    with open(path, "r+b") as f:
        f.seek(len(cubin) - 1)
        f.write(bytes([cubin[-1] ^ 0xFF]))
    assert cache.load("toy", "k") is None


@pytest.mark.parametrize("meta", ["[]", "null", "1"])
def test_load_treats_non_object_meta_as_corrupt(tmp_path, meta):
    cache = KernelCache(str(tmp_path))
    cache.store("toy", "k", fake_cubin(), "", {})
    with open(os.path.join(cache.entry_dir("toy", "k"), META), "w") as f:
        f.write(meta)
    assert cache.load("toy", "k") is None
    assert entries(tmp_path) == []


def test_get_or_build_calls_build_once(tmp_path):
    cache = KernelCache(str(tmp_path))
    calls = []
    cubin = fake_cubin()

    def build():
        calls.append(1)
        return cubin, {}, {}

    assert get_or_build(cache, "toy", "k", "", build) == (cubin, False)
    assert get_or_build(cache, "toy", "k", "", build) == (cubin, True)
    assert len(calls) == 1


def test_unwritable_cache_dir_raises_cache_error(tmp_path, monkeypatch):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        if os.access(str(locked), os.W_OK):
            # Running as root: permissions are not enforced, so make directory creation itself fail.
            blocker = tmp_path / "a_file"
            blocker.write_text("not a directory")
            root = blocker / "cache_root"
        else:
            root = locked / "cache_root"
        monkeypatch.setenv("DG_JIT_CACHE_DIR", str(root))
        cache = KernelCache(read_env().jit_cache_dir)
        with pytest.raises(jit.CacheError, match="DG_JIT_CACHE_DIR"):
            get_or_build(cache, "toy", "k", "", lambda: (fake_cubin(), {}, {}))
        with pytest.raises(jit.CacheError, match="DG_JIT_CACHE_DIR"):
            cache.store("toy", "k", fake_cubin(), "", {})
    finally:
        locked.chmod(0o700)


# ---- jit.build against the real compiler ----

def test_build_hits_seeded_entry(seeded, capsys, monkeypatch):
    entry, cubin = seeded
    monkeypatch.setenv("DG_JIT_DEBUG", "1")
    got, cached, seconds = jit.build(small_source(), ARCH)
    assert cached and got == cubin and seconds == 0.0
    assert "cache hit" in capsys.readouterr().err


def test_truncated_cubin_is_rebuilt(seeded, cache_dir):
    entry, cubin = seeded
    path = os.path.join(entry, CUBIN)
    with open(path, "r+b") as f:
        f.truncate(len(cubin) // 2)
    source = small_source()
    assert KernelCache(str(cache_dir)).load(source.name, build_key(source)) is None
    assert not os.path.exists(entry)
    assert entries(cache_dir) == [], "the corrupted entry must not be left behind"

    rebuilt, cached, seconds = jit.build(source, ARCH)
    assert not cached and seconds > 0
    assert rebuilt[:4] == b"\x7fELF" and len(rebuilt) == len(cubin)
    again, cached, _ = jit.build(source, ARCH)
    assert cached and again == rebuilt
    assert entries(cache_dir) == [os.path.basename(entry)]


def test_garbage_meta_is_rebuilt(seeded, cache_dir):
    entry, cubin = seeded
    with open(os.path.join(entry, META), "w") as f:
        f.write("{ this is not json")
    rebuilt, cached, _ = jit.build(small_source(), ARCH)
    assert not cached and rebuilt[:4] == b"\x7fELF"
    _, cached, _ = jit.build(small_source(), ARCH)
    assert cached
    with open(os.path.join(entry, META)) as f:
        assert json.load(f)["size"] == len(rebuilt)


WORKER = textwrap.dedent("""
    import hashlib, json, os, sys, time
    from deep_gemm import jit
    from deep_gemm.heuristics import GemmProblem, get_config
    from deep_gemm.families.sm90_fp8_gemm_1d2d import kernel_source
    m, n, k = {mnk}
    source = kernel_source(n, k, get_config(GemmProblem(m, n, k, 132)))
    ready, go = sys.argv[1], sys.argv[2]
    open(ready, "w").close()
    deadline = time.time() + 120
    while not os.path.exists(go):
        if time.time() > deadline:
            sys.exit(3)
        time.sleep(0.01)
    cubin, cached, _ = jit.build(source, "sm_90a")
    print(json.dumps(dict(cached=cached, elf=cubin[:4] == b"\\x7fELF", sha=hashlib.sha256(cubin).hexdigest())))
""").format(mnk=SMALL_MNK)


def race(tmp_path, cache_dir, worker: str, num_procs: int) -> list:
    """Run `num_procs` copies of `worker` (argv: ready-file, go-file), released at once so that they race; returns
    each one's last stdout line parsed as JSON (every worker must exit 0)."""
    script = tmp_path / "worker.py"
    script.write_text(worker)
    go = tmp_path / "go"
    readies = [tmp_path / f"ready.{i}" for i in range(num_procs)]
    env = subprocess_env(cache_dir)
    procs = [subprocess.Popen([sys.executable, str(script), str(r), str(go)], env=env, cwd=REPO,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in readies]
    try:
        deadline = time.time() + 300
        while not all(r.exists() for r in readies) and time.time() < deadline:
            time.sleep(0.05)
        go.touch()  # release all workers at once so that they race on the same entries
        outputs = [p.communicate(timeout=900) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    failures = [(p.returncode, err[-2000:]) for p, (_, err) in zip(procs, outputs) if p.returncode != 0]
    assert not failures, failures
    return [json.loads(out.strip().splitlines()[-1]) for out, _ in outputs]


def test_concurrent_builds_publish_one_entry(tmp_path, cache_dir):
    results = race(tmp_path, cache_dir, WORKER, 8)
    assert all(r["elf"] for r in results)
    assert sum(not r["cached"] for r in results) == 1, "one process compiles (under the key's lock), the rest load"
    assert len({r["sha"] for r in results}) == 1

    source = small_source()
    key = build_key(source)
    assert entries(cache_dir) == [f"{source.name}.{key}"], "exactly one entry, no .tmp.*/.bad.* leftovers"
    published = KernelCache(str(cache_dir)).load(source.name, key)
    assert published is not None and published[:4] == b"\x7fELF"
    assert hashlib.sha256(published).hexdigest() in {r["sha"] for r in results}


def test_build_many_fills_the_cache_in_parallel(tmp_path, monkeypatch):
    """The first-sight precompile: workers (which never import torch) publish every missing kernel."""
    from deep_gemm.heuristics.sm90 import sm90_kernel_variants
    from deep_gemm.jit import build_many
    from deep_gemm.jit.parallel import missing
    from deep_gemm.families.sm90_fp8_gemm_1d2d import kernel_source
    monkeypatch.setenv("DG_JIT_CACHE_DIR", str(tmp_path))
    sources = [kernel_source(256, 128, c) for c in sm90_kernel_variants(256, 128, 132)[:2]]
    assert len(missing(sources, ARCH)) == 2
    before = jit.stats()
    assert build_many(sources, ARCH, jobs=2) == 2
    assert missing(sources, ARCH) == []
    assert build_many(sources, ARCH, jobs=2) == 0
    for s in sources:
        assert jit.build(s, ARCH)[1], "expected a disk-cache hit"
    # The workers' compiles are counted in this process (multi-process tests compare compiles with entries).
    after = jit.stats()
    assert after["compiled"] - before["compiled"] == 2
    assert after["disk_hits"] - before["disk_hits"] == 2


def test_nvrtc_identity_is_remembered_per_installation(tmp_path, monkeypatch):
    """A cache hit must not load NVRTC: its version is remembered per installation stamp (fresh process checks)."""
    env = dict(os.environ, DG_JIT_CACHE_DIR=str(tmp_path))
    code = ("import sys; from deep_gemm.jit.compiler import NVRTCCompiler; c = NVRTCCompiler(); "
            "print(c.identity(), 'cuda.bindings.nvrtc' in sys.modules)")
    # NOTES: cwd outside the checkout, so `python -c` imports the installed package (with its built _C module),
    # not the source tree.
    run = functools.partial(subprocess.run, [sys.executable, "-c", code], env=env, capture_output=True, text=True,
                            check=True, cwd=str(tmp_path))
    first = run()
    second = run()
    ident, loaded = first.stdout.split()
    assert ident.startswith("nvrtc-") and loaded == "True"
    assert second.stdout.split() == [ident, "False"]
    (stamp,) = os.listdir(tmp_path / "nvrtc_identity")
    (tmp_path / "nvrtc_identity" / stamp).write_text("garbage")
    third = run()
    assert third.stdout.split() == [ident, "True"]  # an unreadable record is replaced by the loaded version


# ---- use tracking, listing and removal (python -m deep_gemm cache) ----

def age(path, seconds: float) -> None:
    t = time.time() - seconds
    os.utime(path, (t, t))


def test_hit_marks_the_entry_used(tmp_path):
    cache = KernelCache(str(tmp_path))
    cubin = fake_cubin()
    cache.store("toy", "k" * 32, cubin, "", {})
    path = cache.entry_dir("toy", "k" * 32)
    age(path, TOUCH_INTERVAL_S / 2)
    before = os.stat(path).st_mtime
    assert cache.load("toy", "k" * 32) == cubin
    assert os.stat(path).st_mtime == before, "touched at most once per TOUCH_INTERVAL_S"
    age(path, 3 * 86400)
    assert cache.load("toy", "k" * 32) == cubin
    assert time.time() - os.stat(path).st_mtime < 60
    assert cache.entries()[0].last_used == os.stat(path).st_mtime


def test_hit_on_a_read_only_entry_does_not_touch_it(tmp_path):
    cache = KernelCache(str(tmp_path))
    cubin = fake_cubin()
    cache.store("toy", "k" * 32, cubin, "", {})
    path = cache.entry_dir("toy", "k" * 32)
    age(path, 3 * 86400)
    before = os.stat(path).st_mtime
    os.chmod(path, 0o555)
    try:
        assert cache.load("toy", "k" * 32) == cubin
        if not os.access(path, os.W_OK):  # root writes anyway
            assert os.stat(path).st_mtime == before
    finally:
        os.chmod(path, 0o755)


def test_entries_lists_published_entries_only(tmp_path):
    cache = KernelCache(str(tmp_path))
    cache.store("toy.v2", "a" * 32, fake_cubin(), "// src", dict(kernel="toy<Config{X=1}>"))
    cache.store("other", "b" * 32, fake_cubin(b"longer"), "", {})
    age(cache.entry_dir("other", "b" * 32), 100)
    os.makedirs(os.path.join(cache.root, f".tmp.toy.{'c' * 32}.xyz"))
    os.makedirs(os.path.join(cache.root, f"toy.{'d' * 32}.bad.0123"))
    got = cache.entries()
    assert [(e.name, e.key) for e in got] == [("toy.v2", "a" * 32), ("other", "b" * 32)], "most recent first"
    assert got[0].meta["kernel"] == "toy<Config{X=1}>"
    assert got[0].size == sum(os.path.getsize(os.path.join(got[0].path, f)) for f in os.listdir(got[0].path))
    assert KernelCache(str(tmp_path / "absent")).entries() == []


def test_remove_is_rename_then_delete(tmp_path):
    cache = KernelCache(str(tmp_path))
    cache.store("toy", "a" * 32, fake_cubin(), "", {})
    (entry,) = cache.entries()
    assert cache.remove(entry) is True
    assert os.listdir(cache.root) == [] and cache.load("toy", "a" * 32) is None
    assert cache.remove(entry) is False, "already gone"


def test_remove_under_concurrent_loads(tmp_path):
    """Loaders racing with removals get the whole cubin or None, never a partial one."""
    import threading
    cache = KernelCache(str(tmp_path))
    cubin = fake_cubin() * 1000
    bad, stop = [], threading.Event()

    def loader():
        while not stop.is_set():
            got = cache.load("toy", "a" * 32)
            if got not in (None, cubin):
                bad.append(got)

    threads = [threading.Thread(target=loader) for _ in range(2)]
    for t in threads:
        t.start()
    for _ in range(200):
        cache.store("toy", "a" * 32, cubin, "", {})
        for e in cache.entries():
            cache.remove(e)
    stop.set()
    for t in threads:
        t.join()
    assert bad == []


def entry(name: str, size: int, last_used: float) -> Entry:
    return Entry(name, "k" * 32, "/nowhere", size, last_used, None)


@pytest.mark.parametrize("older_than,max_size,removed", [
    (None, None, []),
    (2 * 86400, None, ["c"]),
    (None, 300, ["c"]),               # least recently used first, until the rest fits
    (None, 299, ["c", "b"]),
    (None, 600, []),
    (None, 0, ["c", "b", "a"]),
    (0.5 * 86400, 1000, ["b", "c"]),  # age first, then size
    (2 * 86400, 100, ["c", "b"]),
])
def test_prune_plan(older_than, max_size, removed):
    now = 10 * 86400
    entries = [entry("a", 100, now - 60), entry("b", 200, now - 86400), entry("c", 300, now - 3 * 86400)]
    assert [e.name for e in prune_plan(entries, now, older_than, max_size)] == removed


# ---------------------------------------------------------------- complete groups (jit.build_group)

def _fake_build_many(calls):
    """build_many without a compiler: publishes a fake cubin for every missing source (counts the calls)."""
    from deep_gemm.jit import parallel

    def fake(sources, arch, jobs=0):
        calls.append(len(sources))
        todo = parallel.missing(sources, arch)
        cache = KernelCache(read_env().jit_cache_dir)
        for s in todo:
            cache.store(s.name, build_key(s), b"\x7fELF" + s.name.encode(), s.code(), dict(kernel=s.instantiation()))
        return len(todo)
    return fake


def _variant_sources():
    from deep_gemm.families.sm90_fp8_gemm_1d2d import runtime_kernels
    return runtime_kernels(256, 128, 132, ARCH)


def test_build_group_marker_skips_enumeration_until_an_entry_is_gone(tmp_path, monkeypatch):
    """The first call enumerates and builds, then writes the marker; later calls (any process) only stat the listed
    entries, never enumerate; an entry removed (pruned, cleared) brings the enumeration and the build back."""
    from deep_gemm.jit import parallel
    monkeypatch.setenv("DG_JIT_CACHE_DIR", str(tmp_path))
    calls, enumerations = [], []
    monkeypatch.setattr(parallel, "build_many", _fake_build_many(calls))

    def make():
        enumerations.append(1)
        return _variant_sources()
    group = ("test", 256, 128, 132)
    variants = len(_variant_sources())
    assert variants > 1
    assert parallel.build_group(group, make, ARCH) == variants and len(enumerations) == 1
    markers = os.listdir(tmp_path / parallel.GROUPS_DIR)
    assert len(markers) == 1
    assert parallel.build_group(group, make, ARCH) == 0 and len(enumerations) == 1 and calls == [variants]
    # Another group (e.g. another n, or another SM count) has its own marker.
    assert parallel.build_group(("test", 256, 128, 114), make, ARCH) == 0 and len(enumerations) == 2
    assert len(os.listdir(tmp_path / parallel.GROUPS_DIR)) == 2
    # An entry disappears: the group is enumerated and that one kernel rebuilt.
    cache = KernelCache(str(tmp_path))
    shutil.rmtree(cache.entries()[0].path)
    assert parallel.build_group(group, make, ARCH) == 1 and len(enumerations) == 3
    assert parallel.build_group(group, make, ARCH) == 0 and len(enumerations) == 3


def test_build_group_marker_never_vouches_for_a_cubin(tmp_path, monkeypatch):
    """A corrupted entry under a valid marker: build_group (existence only) does not look at it, but loading the
    kernel verifies it, moves it aside and rebuilds it, and the group is then enumerated again."""
    from deep_gemm.jit import parallel
    monkeypatch.setenv("DG_JIT_CACHE_DIR", str(tmp_path))
    calls = []
    monkeypatch.setattr(parallel, "build_many", _fake_build_many(calls))
    group = ("test", 256, 128, 132)
    parallel.build_group(group, _variant_sources, ARCH)
    source = _variant_sources()[0]
    key = build_key(source)
    cache = KernelCache(str(tmp_path))
    with open(os.path.join(cache.entry_dir(source.name, key), CUBIN), "r+b") as f:
        f.write(b"XXXX")
    assert parallel.build_group(group, _variant_sources, ARCH) == 0
    assert cache.load(source.name, key) is None, "the corrupted cubin must not be served"
    assert parallel.build_group(group, _variant_sources, ARCH) == 1, "the discarded entry is rebuilt"


def test_build_group_marker_depends_on_the_code_and_compiler(tmp_path, monkeypatch):
    """Another deep_gemm (version or modules), compiler or headers reads other markers: their heuristics or keys may
    differ."""
    from deep_gemm.jit import parallel
    monkeypatch.setenv("DG_JIT_CACHE_DIR", str(tmp_path))
    group = ("test", 1, 2)
    base = parallel._marker_path(group, ARCH)
    monkeypatch.setattr(parallel, "_code_stamp", lambda: "another version")
    assert parallel._marker_path(group, ARCH) != base
    monkeypatch.undo()
    monkeypatch.setenv("DG_JIT_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(parallel, "headers_digest", lambda: "other headers")
    assert parallel._marker_path(group, ARCH) != base


def test_warmup_marks_the_dense_groups_so_first_calls_skip_enumeration(tmp_path, monkeypatch):
    """After `warmup(dense=...)`, the first call's precompile check of that (n, k) enumerates nothing."""
    from deep_gemm.jit import parallel
    from deep_gemm.families import sm90_fp8_gemm_1d2d as family
    from deep_gemm.warmup import warmup
    monkeypatch.setenv("DG_JIT_CACHE_DIR", str(tmp_path))
    calls = []
    monkeypatch.setattr(parallel, "build_many", _fake_build_many(calls))
    monkeypatch.setattr(jit, "build_many", parallel.build_many)
    summary = warmup(dense=[(256, 128)], num_sms=132, progress=False, leader=True)
    assert summary["failures"] == [] and summary["kernels"] == len(_variant_sources())
    monkeypatch.setattr(family, "runtime_kernels", lambda *a, **k: pytest.fail("enumerated despite the marker"))
    assert family.precompile_variants(256, 128, 132, ARCH) == 0


def test_headers_digest_is_remembered_across_processes_until_a_header_changes(tmp_path, monkeypatch):
    """A process whose headers are unchanged reads the digest back from the cache directory instead of hashing them
    (a first call's largest piece); a changed header (size or mtime) is hashed again."""
    from deep_gemm.jit import cache as cache_mod
    monkeypatch.setenv("DG_JIT_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(_package_digest, "recorded", lambda: None)  # as in a checkout
    monkeypatch.setattr(cache_mod, "_HEADERS", {})
    first = cache_mod.headers_digest()
    assert len(os.listdir(tmp_path / "headers_digest")) == 1
    monkeypatch.setattr(cache_mod, "_HEADERS", {})  # a new process
    monkeypatch.setattr(cache_mod, "_headers_digest", lambda: pytest.fail("hashed despite the remembered digest"))
    assert cache_mod.headers_digest() == first
    real_stat = os.stat

    def stat_one_header_changed(path, *a, **k):
        st = real_stat(path, *a, **k)
        if path.endswith("kernel_shell.cuh"):
            return os.stat_result((st.st_mode, st.st_ino, st.st_dev, st.st_nlink, st.st_uid, st.st_gid,
                                   st.st_size + 1, st.st_atime, st.st_mtime, st.st_ctime))
        return st
    monkeypatch.setattr(cache_mod, "_HEADERS", {})
    monkeypatch.setattr(cache_mod.os, "stat", stat_one_header_changed)
    monkeypatch.setattr(cache_mod, "_headers_digest", lambda: "f" * 64)
    assert cache_mod.headers_digest() == "f" * 64


def test_a_built_copy_records_its_digests_and_an_install_trusts_them(tmp_path, monkeypatch):
    """setup.py's build_py writes the copy's code and header digests into the copy's build record (never into the
    checkout's); the installed package under test, if it has a record, matches its own files, and then the cache key
    and the group markers use the record (no hashing on a first call)."""
    from deep_gemm.jit import cache as cache_mod, parallel
    installed = _package_digest.recorded()
    # NOTES: building needs setuptools, which a plain venv holding the installed package (CI) may lack; there the
    # installed package's own record is what is checked below.
    can_build = importlib.util.find_spec("setuptools") is not None
    assert can_build or installed is not None, "neither a build nor an installed package's record to check"
    checkout = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # not the installed copy
    if can_build:
        subprocess.run([sys.executable, "setup.py", "-q", "build_py", "--build-lib", str(tmp_path)], cwd=checkout,
                       check=True, capture_output=True)
        copy = tmp_path / "deep_gemm"
        namespace = {}
        exec((copy / "_build_info.py").read_text(), namespace)
        assert namespace["PACKAGE_DIGEST"] == dict(code=_package_digest.code_digest(str(copy)),
                                                   headers=_package_digest.headers_digest(str(copy / "include")))
        assert "PACKAGE_DIGEST" not in open(os.path.join(checkout, "deep_gemm", "_build_info.py")).read()

    package_dir = os.path.dirname(os.path.abspath(deep_gemm.__file__))
    if installed is not None:  # the suite runs against an installed package (CI)
        assert installed == dict(code=_package_digest.code_digest(package_dir),
                                 headers=_package_digest.headers_digest(project_include_dir()))
    record = dict(code="c" * 64, headers="h" * 64)
    monkeypatch.setattr(_package_digest, "recorded", lambda: record)
    monkeypatch.setattr(_package_digest, "headers_digest", lambda *a: pytest.fail("hashed despite the record"))
    assert cache_mod.headers_digest() == "h" * 64
    parallel._code_stamp.cache_clear()
    try:
        assert parallel._code_stamp().endswith("c" * 64)
    finally:
        parallel._code_stamp.cache_clear()
