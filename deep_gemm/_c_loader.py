"""Loads `deep_gemm._C`, the C++ launch module, and when it cannot, says why in terms a user can act on.

The common failure is not a broken install: running Python inside a source checkout puts the checkout's `deep_gemm/`
first on sys.path (the current directory), and it shadows the installed package; its `_C` was never built there, so
reinstalling changes nothing. A leaf module (standard library only) so that any layer may use it.
"""
import importlib
import importlib.machinery
import os
import sys
from types import ModuleType
from typing import Optional

__all__ = ["load_c", "diagnose"]

PACKAGE = __name__.rpartition(".")[0]
PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


def load_c() -> ModuleType:
    """Import and return `deep_gemm._C`; on failure raise ImportError with `diagnose`'s explanation."""
    try:
        return importlib.import_module(f"{PACKAGE}._C")
    except ImportError as e:
        # NOTES: `from None`: Python's own message for a missing submodule blames "a circular import", which is
        # never the cause here; the diagnosis quotes the original error where it says something.
        raise ImportError(diagnose(e, PACKAGE_DIR)) from None


def _built_module(package_dir: str) -> Optional[str]:
    """The `_C` extension file in `package_dir`, if any."""
    suffixes = tuple(importlib.machinery.EXTENSION_SUFFIXES)
    for name in sorted(os.listdir(package_dir)):
        if name.startswith("_C.") and name.endswith(suffixes):
            return os.path.join(package_dir, name)
    return None


def _is_checkout(root: str) -> bool:
    return os.path.isfile(os.path.join(root, "setup.py")) and os.path.isdir(os.path.join(root, "csrc"))


def _installed_elsewhere(package_dir: str) -> Optional[str]:
    """Where `import deep_gemm` would lead without the entry of sys.path that holds `package_dir` (None if
    nowhere): the installed package the checkout shadows."""
    root = os.path.realpath(os.path.dirname(package_dir))
    others = [p for p in sys.path if os.path.realpath(p or os.getcwd()) != root]
    spec = importlib.machinery.PathFinder.find_spec(PACKAGE, others)
    if spec is None:  # an editable install is found by its own finder, not through sys.path
        for finder in sys.meta_path:
            if finder is importlib.machinery.PathFinder or not hasattr(finder, "find_spec"):
                continue
            try:
                spec = finder.find_spec(PACKAGE, None)
            except Exception:  # a third-party finder's failure is not ours to report
                spec = None
            if spec is not None:
                break
    if spec is None or not spec.submodule_search_locations:
        return None
    location = os.path.realpath(list(spec.submodule_search_locations)[0])
    return None if location == os.path.realpath(package_dir) else location


def diagnose(error: BaseException, package_dir: str = PACKAGE_DIR) -> str:
    """Why `_C` of the package in `package_dir` did not import (`error`), and what to do about it."""
    built = _built_module(package_dir)
    root = os.path.dirname(package_dir)
    if built is None and _is_checkout(root):
        other = _installed_elsewhere(package_dir)
        shadow = (f"; it shadows the installed deep_gemm at {other}" if other else
                  "; no installed deep_gemm was found elsewhere on sys.path")
        return (f"deep_gemm was imported from the source checkout {root}, whose C++ launch module _C is not built "
                f"(the checkout is first on sys.path, e.g. as the current directory){shadow}. Either run from another "
                f"directory (so the installed package is imported), or build the checkout in place with "
                f"`pip install -e .` in {root}")
    if built is None:
        return (f"deep_gemm._C, the C++ launch module, is missing from {package_dir}; reinstall deep_gemm with a "
                f"C++17 compiler available (pip install . builds it): {error}")
    return (f"deep_gemm._C, the C++ launch module ({built}), does not load: {error}. Rebuild it against this "
            f"Python and torch: reinstall deep_gemm (pip install .), or in a checkout `pip install -e .`")
