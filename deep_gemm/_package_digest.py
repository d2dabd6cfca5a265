"""Digests of the package's own files: its Python code (names a group marker's installation) and its kernel headers
(part of every kernel cache key). Standard library only, with no package imports, so that setup.py can load this file
by path and record both digests in the built package's `_build_info.py` (`BuildPyWithHeaders`).

An installed package is taken as built: `recorded()` returns the digests setup.py wrote into the copy it installed, so a
process's first call reads them instead of walking and hashing ~100 files (about 1-2 ms). A source checkout never has
them (setup.py writes them into the build copy only), so an edited checkout is always re-examined."""
import hashlib
import os
from typing import List, Optional

CODE_SKIPS = ("_build_info.py",)  # rewritten by every build (including in-place rebuilds of _C)
HEADER_SUFFIXES = (".cuh", ".h", ".hpp")

try:
    from ._build_info import PACKAGE_DIGEST as _RECORDED
except ImportError:  # a checkout (its record has no digests), a tree never built, or setup.py loading this file
    _RECORDED = None


def header_files(include_dir: str) -> List[str]:
    """Every header under include_dir/deep_gemm, as sorted paths relative to include_dir."""
    out = []
    for dirpath, _, files in os.walk(os.path.join(include_dir, "deep_gemm")):
        out += [os.path.relpath(os.path.join(dirpath, f), include_dir) for f in files if f.endswith(HEADER_SUFFIXES)]
    return sorted(out)


def headers_digest(include_dir: str) -> str:
    """sha256 over every header's relative path and contents."""
    h = hashlib.sha256()
    for rel in header_files(include_dir):
        h.update(rel.encode() + b"\0")
        with open(os.path.join(include_dir, rel), "rb") as f:
            h.update(f.read())
    return h.hexdigest()


def code_digest(package_dir: str) -> str:
    """sha256 over every Python module's relative path and contents (the build record excepted)."""
    h = hashlib.sha256()
    for dirpath, dirnames, files in os.walk(package_dir):
        dirnames.sort()
        for f in sorted(files):
            if f.endswith(".py") and f not in CODE_SKIPS:
                path = os.path.join(dirpath, f)
                h.update(os.path.relpath(path, package_dir).encode() + b"\0")
                with open(path, "rb") as fh:
                    h.update(fh.read())
    return h.hexdigest()


def recorded() -> Optional[dict]:
    """{"code": ..., "headers": ...} recorded at build time in an installed package; None in a source checkout."""
    ok = isinstance(_RECORDED, dict) and all(isinstance(_RECORDED.get(k), str) for k in ("code", "headers"))
    return _RECORDED if ok else None
