"""On-disk kernel cache.

Layout: ``<DG_JIT_CACHE_DIR>/cache/<name>.<key>/{kernel.cubin, kernel.cu, meta.json}`` and one empty lock file per
key in ``<DG_JIT_CACHE_DIR>/locks/``. The key hashes the generated code, the contents of every project header, the
compiler identity, its flags and the arch.

Concurrency: a process that misses takes the key's lock (``flock``; the kernel releases it when the holder dies,
even by SIGKILL), looks again, and only then compiles; so N processes wanting the same kernel compile it once and
the others wait and load it. An entry is written into a private temp directory and published with one atomic
rename, so nobody ever sees a half-written entry. Temp and discarded directories left by a killed writer are
removed by the next holder of that key's lock. Where locking is unavailable (no fcntl, a file system refusing
locks, a lock held past ``LOCK_TIMEOUT_S``), processes compile concurrently and the first rename wins.
An entry that fails its integrity check (size + sha256 recorded in meta.json, ELF magic) is moved aside and rebuilt.
A cache directory that cannot be written raises `CacheError` naming DG_JIT_CACHE_DIR when a kernel is missing;
hits need no write access (a read-only, pre-filled cache works).

Use: a hit sets the entry directory's mtime to now (at most once per `TOUCH_INTERVAL_S`, and only where it may
write), so the mtime is the entry's last use; `python -m deep_gemm cache prune` removes the least recently used.
Removal (`KernelCache.remove`) is rename-then-delete; see there why that, and not the key's lock.
"""
import contextlib
import glob
import hashlib
import json
import os
import shutil
import stat
import tempfile
import time
import uuid
from dataclasses import dataclass
from typing import Callable, Dict, Iterator, List, Mapping, Optional, Tuple

try:
    import fcntl
except ImportError:  # not POSIX: no locks, the rename race decides
    fcntl = None

from .. import _package_digest
from ..envs import read_env
from .paths import project_headers, project_include_dir

CUBIN = "kernel.cubin"
META = "meta.json"
SOURCE = "kernel.cu"
_FORMAT = 1
LOCK_TIMEOUT_S = 900.0  # longer than any compile; a holder stuck beyond it is ignored
TOUCH_INTERVAL_S = 3600.0  # pruning works in days: one mtime write per hour of use is plenty


class CacheError(RuntimeError):
    """The cache directory is unusable (e.g. not writable)."""


def _headers_digest() -> str:
    return _package_digest.headers_digest(project_include_dir())


def _headers_digest_cached():
    # NOTES: an installed package's headers are hashed once, when it is built (_package_digest.recorded()); a
    # checkout's only change between processes (edits), so they are hashed once per process, keyed by their sizes and
    # mtimes so that a test editing a header in-process still sees the change.
    installed = _package_digest.recorded()
    if installed is not None:
        return installed["headers"]
    root = project_include_dir()
    stamp = tuple((rel, st.st_size, st.st_mtime_ns)
                  for rel in project_headers() for st in (os.stat(os.path.join(root, rel)),))
    if _HEADERS.get("stamp") != stamp:
        _HEADERS["stamp"] = stamp
        _HEADERS["digest"] = _remembered_headers_digest(root, stamp)
    return _HEADERS["digest"]


def _remembered_headers_digest(root: str, stamp: tuple) -> str:
    """The headers' digest, remembered in the cache directory under a name made of their paths, sizes and mtimes.
    NOTES: hashing the headers took 3-6 ms, the largest piece of a process's first call after a warm-up; like the
    NVRTC identity, it is read back from one small file while the headers are unchanged."""
    path = os.path.join(read_env().jit_cache_dir, "headers_digest",
                        hashlib.sha256(repr((root, stamp)).encode()).hexdigest()[:32])
    try:
        with open(path) as f:
            digest = f.read().strip()
        if len(digest) == 64 and all(c in "0123456789abcdef" for c in digest):
            return digest
    except OSError:
        pass
    digest = _headers_digest()
    tmp = f"{path}.tmp.{uuid.uuid4().hex}"
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(tmp, "w") as f:
            f.write(digest)
        os.replace(tmp, path)
    except OSError:  # a read-only cache directory: hash again next time
        with contextlib.suppress(OSError):
            os.remove(tmp)
    return digest


_HEADERS: dict = {}


def headers_digest() -> str:
    """The digest of every project header as it is now (re-hashed when a header's mtime changes)."""
    return _headers_digest_cached()


def cache_key(code: str, compiler_identity: str, flags, arch: str, headers: Optional[str] = None) -> str:
    """The key of a kernel's cache entry. `headers`: `headers_digest()` when the caller already has it (a batch of
    keys checks the headers once instead of once per key)."""
    h = hashlib.sha256()
    # NOTES: include dirs differ between machines; hash what they hold instead (the project headers' contents, the
    # only headers the kernels include), so a cache filled ahead of time on a CPU-only machine hits on the GPU machine.
    stable_flags = [f for f in flags if not f.startswith("-I")]
    headers = _headers_digest_cached() if headers is None else headers
    for part in (f"format={_FORMAT}", code, headers, compiler_identity, " ".join(stable_flags), arch):
        h.update(part.encode() + b"\0")
    return h.hexdigest()[:32]


class KernelCache:
    def __init__(self, root: str):
        self.root = os.path.join(root, "cache")
        self.lock_root = os.path.join(root, "locks")

    @contextlib.contextmanager
    def lock(self, name: str, key: str, timeout: float = LOCK_TIMEOUT_S) -> Iterator[bool]:
        """Hold the key's exclusive lock; yields whether it is held (False: no locking possible here)."""
        fd = None
        if fcntl is not None:
            try:
                os.makedirs(self.lock_root, exist_ok=True)
                fd = os.open(os.path.join(self.lock_root, f"{name}.{key}.lock"), os.O_RDWR | os.O_CREAT, 0o666)
            except OSError:
                fd = None
        held = False
        try:
            if fd is not None:
                deadline = time.monotonic() + timeout
                delay = 0.005
                while True:
                    try:
                        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                        held = True
                        break
                    except BlockingIOError:
                        if time.monotonic() > deadline:
                            break
                        time.sleep(delay)
                        delay = min(delay * 2, 0.1)
                    except OSError:
                        break  # locks not supported by this file system
            yield held
        finally:
            if fd is not None:
                if held:
                    fcntl.flock(fd, fcntl.LOCK_UN)
                os.close(fd)

    def remove_leftovers(self, name: str, key: str) -> None:
        """Temp/discarded directories of this key left by a killed writer; call only while holding the key's lock
        (any live writer of the key would hold it)."""
        for pattern in (f".tmp.{name}.{key}.*", f"{name}.{key}.bad.*"):
            for path in glob.glob(os.path.join(glob.escape(self.root), pattern)):
                if os.path.isdir(path) and not os.path.islink(path):
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    with contextlib.suppress(OSError):
                        os.remove(path)

    def entry_dir(self, name: str, key: str) -> str:
        return os.path.join(self.root, f"{name}.{key}")

    def load(self, name: str, key: str) -> Optional[bytes]:
        """The cached cubin, or None when absent or corrupted (a corrupted entry is moved aside)."""
        path = self.entry_dir(name, key)
        try:
            st = os.stat(path)
        except OSError:
            return None
        if not stat.S_ISDIR(st.st_mode):
            return None
        try:
            with open(os.path.join(path, META)) as f:
                meta = json.load(f)
            with open(os.path.join(path, CUBIN), "rb") as f:
                cubin = f.read()
            ok = (isinstance(meta, dict) and meta.get("format") == _FORMAT and meta.get("key") == key
                  and len(cubin) == meta.get("size")
                  and cubin[:4] == b"\x7fELF" and hashlib.sha256(cubin).hexdigest() == meta.get("sha256"))
        except (OSError, ValueError):
            ok = False
        if ok:
            if time.time() - st.st_mtime > TOUCH_INTERVAL_S and os.access(path, os.W_OK):
                with contextlib.suppress(OSError):  # a cache we may not write still serves hits
                    os.utime(path)
            return cubin
        self._discard(path)
        return None

    def _discard(self, path: str) -> bool:
        """Rename `path` aside, then delete it; False if it was already gone (someone else moved or replaced it)."""
        trash = f"{path}.bad.{uuid.uuid4().hex}"
        try:
            os.rename(path, trash)
        except OSError:
            return False
        if os.path.isdir(trash) and not os.path.islink(trash):
            shutil.rmtree(trash, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                os.remove(trash)
        return True

    def entries(self) -> List["Entry"]:
        """The published entries, most recently used first (no temp or discarded directories)."""
        try:
            names = os.listdir(self.root)
        except OSError:
            return []
        out = []
        for dirname in names:
            name, _, key = dirname.rpartition(".")
            if dirname.startswith(".") or ".bad." in dirname or not name or len(key) != 32:
                continue
            path = os.path.join(self.root, dirname)
            try:
                st = os.stat(path)
                size = sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path))
            except OSError:
                continue  # removed meanwhile, or not a directory
            try:
                with open(os.path.join(path, META)) as f:
                    meta = json.load(f)
            except (OSError, ValueError):
                meta = None
            out.append(Entry(name, key, path, size, st.st_mtime, meta if isinstance(meta, dict) else None))
        return sorted(out, key=lambda e: e.last_used, reverse=True)

    def remove(self, entry: "Entry") -> bool:
        """Remove one entry; False if it was already gone.

        NOTES: rename-then-delete rather than the key's lock: hits take no lock (they must stay cheap and work on a
        read-only cache), so holding it would not keep a reader out. The rename makes the entry vanish in one step:
        a reader finds the whole entry or none (one whose read straddles the rename fails the integrity check and
        rebuilds, as for a corrupted entry), and a writer publishing meanwhile either lands after the rename (its
        entry stays) or before it (removed, as asked). The trash name is the one the key's next lock holder sweeps
        (`remove_leftovers`) should this process die mid-delete."""
        return self._discard(entry.path)

    def store(self, name: str, key: str, cubin: bytes, source: str, extra: dict,
              dumps: Optional[Mapping[str, str]] = None) -> None:
        """Publish an entry atomically; if another process published first, keep theirs. `dumps`: more text files
        of the entry (file name -> text: the DG_JIT_DUMP_* diagnostics)."""
        try:
            os.makedirs(self.root, exist_ok=True)
            tmp = tempfile.mkdtemp(prefix=f".tmp.{name}.{key}.", dir=self.root)
        except OSError as e:
            raise CacheError(f"kernel cache directory {self.root!r} is not writable ({e}); "
                             f"set DG_JIT_CACHE_DIR to a writable directory") from e
        try:
            with open(os.path.join(tmp, CUBIN), "wb") as f:
                f.write(cubin)
            with open(os.path.join(tmp, SOURCE), "w") as f:
                f.write(source)
            meta = dict(format=_FORMAT, key=key, size=len(cubin), sha256=hashlib.sha256(cubin).hexdigest(),
                        created=time.time(), **extra)
            with open(os.path.join(tmp, META), "w") as f:
                json.dump(meta, f, indent=1)
            for fname, text in (dumps or {}).items():
                with open(os.path.join(tmp, fname), "w") as f:
                    f.write(text)
            for fname in (CUBIN, SOURCE, META):
                fd = os.open(os.path.join(tmp, fname), os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
            final = self.entry_dir(name, key)
            try:
                os.rename(tmp, final)
                tmp = None
            except OSError:
                # Lost the race (final exists and is non-empty) or a corrupted entry is in the way.
                if self.load(name, key) is None:
                    self._discard(final)
                    try:
                        os.rename(tmp, final)
                        tmp = None
                    except OSError:
                        pass
        finally:
            if tmp is not None:
                shutil.rmtree(tmp, ignore_errors=True)


def get_or_build(cache: KernelCache, name: str, key: str, source: str,
                 build: Callable[[], Tuple[bytes, dict, Dict[str, str]]]) -> Tuple[bytes, bool]:
    """Return (cubin, was_cached). On a miss, compile under the key's lock (see the module docstring); `build`
    returns (cubin, meta.json extras, dumps) as `KernelCache.store` takes them."""
    cubin = cache.load(name, key)
    if cubin is not None:
        return cubin, True
    with cache.lock(name, key) as held:
        if held:
            cubin = cache.load(name, key)  # built by the holder we waited for
            if cubin is not None:
                return cubin, True
            cache.remove_leftovers(name, key)
        cubin, extra, dumps = build()
        cache.store(name, key, cubin, source, extra, dumps)
    return cubin, False


@dataclass(frozen=True)
class Entry:
    name: str
    key: str
    path: str
    size: int             # bytes on disk (the entry's files)
    last_used: float      # the directory's mtime: creation or last hit (see TOUCH_INTERVAL_S)
    meta: Optional[dict]  # meta.json (None if unreadable); "kernel" is the instantiation


def prune_plan(entries: List[Entry], now: float, older_than_s: Optional[float] = None,
               max_size: Optional[int] = None) -> List[Entry]:
    """The entries to remove: those unused for more than `older_than_s`, then the least recently used until the
    rest fits in `max_size` bytes."""
    keep = sorted(entries, key=lambda e: e.last_used, reverse=True)
    drop = []
    if older_than_s is not None:
        drop = [e for e in keep if now - e.last_used > older_than_s]
        keep = [e for e in keep if now - e.last_used <= older_than_s]
    if max_size is not None:
        total = sum(e.size for e in keep)
        while keep and total > max_size:
            total -= keep[-1].size
            drop.append(keep.pop())
    return drop
