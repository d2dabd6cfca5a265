"""On-disk kernel cache.

Layout: ``<DG_JIT_CACHE_DIR>/cache/<name>.<key>/{kernel.cubin, kernel.cu, meta.json}``.
The key hashes the generated code, the contents of every project header, the compiler identity, its flags and the
arch. An entry is written into a private temp directory and published with one atomic rename, so concurrent
processes never see a half-written entry; a loser of the rename race simply uses the winner's entry. An entry that
fails its integrity check (size + sha256 recorded in meta.json, ELF magic) is moved aside and rebuilt.
"""
import hashlib
import json
import os
import shutil
import tempfile
import time
import uuid
from typing import Callable, Optional, Tuple

from .paths import project_headers, project_include_dir

CUBIN = "kernel.cubin"
META = "meta.json"
SOURCE = "kernel.cu"
_FORMAT = 1


class CacheError(RuntimeError):
    """The cache directory is unusable (e.g. not writable)."""


def _headers_digest() -> str:
    h = hashlib.sha256()
    root = project_include_dir()
    for rel in project_headers():
        h.update(rel.encode() + b"\0")
        with open(os.path.join(root, rel), "rb") as f:
            h.update(f.read())
    return h.hexdigest()


def _headers_digest_cached():
    # NOTES: headers only change between processes (installs/edits), so hash them once per process, keyed by
    # their mtimes so that a test editing a header in-process still sees the change.
    root = project_include_dir()
    stamp = tuple((rel, os.stat(os.path.join(root, rel)).st_mtime_ns) for rel in project_headers())
    if _HEADERS.get("stamp") != stamp:
        _HEADERS["stamp"] = stamp
        _HEADERS["digest"] = _headers_digest()
    return _HEADERS["digest"]


_HEADERS: dict = {}


def cache_key(code: str, compiler_identity: str, flags, arch: str) -> str:
    h = hashlib.sha256()
    # NOTES: include dirs differ between machines; hash what they hold instead (the project headers' contents, the
    # only headers the kernels include), so a cache filled ahead of time on a CPU-only machine hits on the GPU machine.
    stable_flags = [f for f in flags if not f.startswith("-I")]
    for part in (f"format={_FORMAT}", code, _headers_digest_cached(), compiler_identity, " ".join(stable_flags),
                 arch):
        h.update(part.encode() + b"\0")
    return h.hexdigest()[:32]


class KernelCache:
    def __init__(self, root: str):
        self.root = os.path.join(root, "cache")

    def entry_dir(self, name: str, key: str) -> str:
        return os.path.join(self.root, f"{name}.{key}")

    def load(self, name: str, key: str) -> Optional[bytes]:
        """The cached cubin, or None when absent or corrupted (a corrupted entry is moved aside)."""
        path = self.entry_dir(name, key)
        if not os.path.isdir(path):
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
            return cubin
        self._discard(path)
        return None

    def _discard(self, path: str) -> None:
        trash = f"{path}.bad.{uuid.uuid4().hex}"
        try:
            os.rename(path, trash)
        except OSError:
            return  # someone else already moved or replaced it
        shutil.rmtree(trash, ignore_errors=True)

    def store(self, name: str, key: str, cubin: bytes, source: str, extra: dict) -> None:
        """Publish an entry atomically; if another process published first, keep theirs."""
        try:
            os.makedirs(self.root, exist_ok=True)
            tmp = tempfile.mkdtemp(prefix=f".tmp.{name}.", dir=self.root)
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
                 build: Callable[[], Tuple[bytes, dict]]) -> Tuple[bytes, bool]:
    """Return (cubin, was_cached)."""
    cubin = cache.load(name, key)
    if cubin is not None:
        return cubin, True
    cubin, extra = build()
    cache.store(name, key, cubin, source, extra)
    return cubin, False
