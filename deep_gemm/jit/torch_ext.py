"""The torch build of the launch fast path (csrc/fast_launch.cpp with DG_WITH_TORCH), compiled at run time.

It reads tensors from the at::Tensor directly, so it must be built against the torch that runs it; pip's isolated
build environment cannot do that, hence a build on first use, cached like the kernels:
``<DG_JIT_CACHE_DIR>/torch_ext/<key>/deep_gemm_torch_launch.so``, published by one atomic rename. The key hashes
the sources, the torch and Python versions, the C++ ABI flag and the compiler. Compiler: ``DG_JIT_CXX``, else
``$CXX``, else ``c++``. A compile takes ~10-25 s once per (machine, torch) and normally runs in a background
thread (see `deep_gemm.ops.gemm`), while calls take the other paths.
"""
import hashlib
import importlib.machinery
import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import threading
from typing import List, Optional

from ..envs import read_env
from .compiler import CompileError

MODULE = "deep_gemm_torch_launch"
_SOURCES = ("fast_launch.cpp", "cuda_abi.h")
_lock = threading.Lock()


def source_dir() -> str:
    """csrc/ in the installed package (copied by setup.py) or in the source checkout."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for candidate in (os.path.join(here, "csrc"), os.path.join(os.path.dirname(here), "csrc")):
        if os.path.isfile(os.path.join(candidate, _SOURCES[0])):
            return candidate
    raise CompileError(f"csrc/{_SOURCES[0]} not found next to {here}; reinstall the package")


def compiler() -> str:
    env = read_env()
    return env.jit_cxx or os.environ.get("CXX", "") or "c++"


def _code_flags() -> List[str]:
    """The flags that shape the binary (part of the cache key); no paths."""
    import torch
    abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    return ["-shared", "-fPIC", "-O2", "-fvisibility=hidden", "-DDG_WITH_TORCH", f"-D_GLIBCXX_USE_CXX11_ABI={abi}",
            "-w", "-ltorch_python", "-ltorch", "-ltorch_cpu", "-lc10", "-ldl"]


def _path_flags() -> List[str]:
    # NOTES: only a build needs these; torch.utils.cpp_extension costs ~60 ms to import, which a cache lookup at
    # `import deep_gemm` should not pay.
    from torch.utils.cpp_extension import include_paths, library_paths
    libs = library_paths()
    return ([f"-I{sysconfig.get_paths()['include']}"] + [f"-I{p}" for p in include_paths()]
            + [f"-L{p}" for p in libs] + [f"-Wl,-rpath,{p}" for p in libs])


def _key(cxx: str) -> str:
    import torch
    h = hashlib.sha256()
    src = source_dir()
    for name in _SOURCES:
        with open(os.path.join(src, name), "rb") as f:
            h.update(name.encode() + b"\0" + f.read())
    for part in (torch.__version__, sys.version, sysconfig.get_config_var("EXT_SUFFIX") or "", cxx,
                 " ".join(_code_flags())):
        h.update(part.encode() + b"\0")
    return h.hexdigest()[:24]


def _path(cxx: str) -> str:
    return os.path.join(read_env().jit_cache_dir, "torch_ext", _key(cxx), MODULE + ".so")


def _import(path: str):
    loader = importlib.machinery.ExtensionFileLoader(MODULE, path)
    spec = importlib.util.spec_from_file_location(MODULE, path, loader=loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def load_cached():
    """The built module if the cache holds it, else None (never compiles)."""
    path = _path(compiler())
    return _import(path) if os.path.isfile(path) else None


def build():
    """Compile (unless cached) and import the module. Raises CompileError with the compiler's output."""
    with _lock:
        cxx = compiler()
        path = _path(cxx)
        if not os.path.isfile(path):
            _compile(cxx, path)
        return _import(path)


def _compile(cxx: str, path: str) -> None:
    if shutil.which(cxx) is None and not os.path.isfile(cxx):
        raise CompileError(f"C++ compiler {cxx!r} not found (set DG_JIT_CXX or CXX)")
    final_dir = os.path.dirname(path)
    os.makedirs(os.path.dirname(final_dir), exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".tmp.", dir=os.path.dirname(final_dir))
    try:
        out = os.path.join(tmp, MODULE + ".so")
        last: Optional[str] = None
        # NOTES: recent torch headers need C++20; older compilers only know C++17 (enough for older torch).
        for std in ("-std=c++20", "-std=c++17"):
            args = [cxx, std, os.path.join(source_dir(), _SOURCES[0]), "-o", out, *_path_flags(), *_code_flags()]
            proc = subprocess.run(args, capture_output=True, text=True)
            if proc.returncode == 0:
                break
            last = f"{' '.join(args)}\n{proc.stdout}{proc.stderr}"
        else:
            raise CompileError(f"building the torch launch extension failed:\n{last}")
        try:
            os.rename(tmp, final_dir)
            tmp = None
        except OSError:
            if not os.path.isfile(path):  # neither ours nor a concurrent builder's entry is there
                raise
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
