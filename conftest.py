"""Test the installed deep_gemm, not the checkout's source tree, unless the checkout is itself a build.

`python -m pytest` puts the working directory on sys.path, and pytest's default import mode prepends this file's
directory too, so the checkout's `deep_gemm/` would shadow the installed package. Without a built `_C` next to its
sources (a fresh clone after `pip install .`) that copy cannot launch anything. So when the checkout has no `_C` and
an installed deep_gemm exists elsewhere:
- in this process, the checkout root moves to the end of sys.path before any test imports deep_gemm (`tools` and
  `benchmarks` still import from the checkout);
- the subprocesses tests start from the checkout root (`python -m deep_gemm`, `python -m tools.<name>`) would put the
  root first again: PYTHONSAFEPATH (Python 3.11+) stops that, and PYTHONPATH lists the installed package's directory
  before the root.
A checkout with `_C` built in place (`pip install -e .`) is used as it is.
"""
import importlib.machinery
import os
import sys

_ROOT = os.path.dirname(os.path.abspath(__file__))


def _is_root(entry: str) -> bool:
    return os.path.abspath(entry or os.curdir) == _ROOT


def _checkout_has_c() -> bool:
    pkg = os.path.join(_ROOT, "deep_gemm")
    return any(os.path.isfile(os.path.join(pkg, "_C" + suffix)) for suffix in importlib.machinery.EXTENSION_SUFFIXES)


if not _checkout_has_c():
    _others = [p for p in sys.path if not _is_root(p)]
    _installed = importlib.machinery.PathFinder.find_spec("deep_gemm", _others)
    if _installed is not None:
        sys.path[:] = _others + [_ROOT]
        _site = os.path.dirname(os.path.dirname(_installed.origin))
        os.environ["PYTHONSAFEPATH"] = "1"
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (_site, _ROOT, os.environ.get("PYTHONPATH")) if p)
