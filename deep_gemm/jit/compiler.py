"""Compilers: NVRTC (default, in-process through cuda-bindings) and nvcc (DG_JIT_USE_NVCC=1)."""
import functools
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import List, Optional, Tuple

from ..envs import read_env
from .paths import ToolchainError, include_dirs

# NOTES: -DNDEBUG matters for speed: device `assert`s make ptxas serialise WGMMA (warning C7510).
_COMMON_FLAGS = ("-std=c++17", "-DNDEBUG", "--diag-suppress=39,161,174,177,186,940")
SUPPORTED_ARCHS = ("sm_90a", "sm_100a", "sm_100f")


class CompileError(RuntimeError):
    """The kernel failed to compile; the message carries the compiler log."""


@dataclass(frozen=True)
class CompileResult:
    cubin: bytes
    ptx: Optional[str]
    log: str
    seconds: float


def check_arch(arch: str) -> str:
    if arch not in SUPPORTED_ARCHS:
        raise ValueError(f"arch must be one of {SUPPORTED_ARCHS}, got {arch!r}")
    return arch


class Compiler:
    name = "base"

    def identity(self) -> str:
        """Name + version; part of the cache key."""
        raise NotImplementedError

    def flags(self, arch: str, ptxas_verbose: bool = False, lineinfo: bool = False) -> List[str]:
        raise NotImplementedError

    def compile(self, code: str, arch: str, want_ptx: bool = False, ptxas_verbose: bool = False,
                lineinfo: bool = False) -> CompileResult:
        raise NotImplementedError


def compile_options(env) -> dict:
    """The keyword options of `Compiler.flags` / `compile` that the DG_* variables ask for (one place, so that the
    cache keys of jit.build and of parallel.missing agree)."""
    # NOTES: DG_JIT_PTXAS_CHECK needs the ptxas report, hence -v.
    return dict(ptxas_verbose=env.ptxas_verbose or env.jit_ptxas_check, lineinfo=env.jit_with_lineinfo)


_PTXAS_FRAME = re.compile(r"Function properties for (\S+)\s*\n[^\n]*?(\d+) bytes stack frame, (\d+) bytes spill stores, "
                          r"(\d+) bytes spill loads")


def check_ptxas_report(log: str, what: str) -> None:
    """DG_JIT_PTXAS_CHECK: raise CompileError if ptxas reports local memory (stack frame, spills) in any function
    of `log` (a compile log with ptxas -v), or if the log holds no ptxas report at all."""
    frames = _PTXAS_FRAME.findall(log)
    if not frames:
        raise CompileError(f"DG_JIT_PTXAS_CHECK: no ptxas report in the compile log of {what}:\n{log}")
    bad = [f"{fn}: {stack} bytes stack frame, {stores} bytes spill stores, {loads} bytes spill loads"
           for fn, stack, stores, loads in frames if int(stack) or int(stores) or int(loads)]
    if bad:
        raise CompileError(f"DG_JIT_PTXAS_CHECK: {what} uses local memory:\n" + "\n".join(bad))


def _check_nvrtc(result, prog=None, what: str = "NVRTC call") -> None:
    from cuda.bindings import nvrtc
    if result != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        log = _nvrtc_log(prog) if prog is not None else ""
        raise CompileError(f"{what} failed: {result.name}\n{log}")


def _nvrtc_log(prog) -> str:
    from cuda.bindings import nvrtc
    err, size = nvrtc.nvrtcGetProgramLogSize(prog)
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS or size <= 1:
        return ""
    # NOTES: output buffers must be fresh bytearrays (an immutable b" " * n buffer once corrupted CPython's cache).
    buf = bytearray(size)
    nvrtc.nvrtcGetProgramLog(prog, buf)
    return bytes(buf).rstrip(b"\0").decode(errors="replace")


# NOTES: 12.8 is the oldest NVRTC verified to compile every kernel (tests/jit/test_compile*.py); the cubins of CUDA 12.x
# need an R525+ driver, those of 13.x R580+.
MIN_NVRTC = (12, 8)
_NVRTC_INSTALL = ("install the CUDA extra matching your driver: `pip install deepgemm-sm90[cu13]` (CUDA 13.0, driver "
                  "R580+) or `pip install deepgemm-sm90[cu12]` (CUDA 12.8+)")


def check_nvrtc_version(major: int, minor: int) -> None:
    if (major, minor) < MIN_NVRTC:
        raise ToolchainError(f"NVRTC {major}.{minor} is too old: deep_gemm needs NVRTC "
                             f"{MIN_NVRTC[0]}.{MIN_NVRTC[1]}+ (CUDA 12.8+ or 13.x); {_NVRTC_INSTALL}")


class NVRTCCompiler(Compiler):
    name = "nvrtc"

    @functools.lru_cache(maxsize=None)
    def identity(self) -> str:
        # NOTES: importing cuda.bindings.nvrtc costs 30-60 ms (it loads cuda.pathfinder), which dominated a cache
        # hit in a fresh process; the version is remembered per installation stamp in the cache directory.
        path = os.path.join(read_env().jit_cache_dir, "nvrtc_identity", _install_stamp())
        try:
            with open(path) as f:
                remembered = f.read().strip()
            if remembered.startswith("nvrtc-"):
                return remembered
        except OSError:
            pass
        identity = self.loaded_identity()
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            tmp = f"{path}.{os.getpid()}.tmp"
            with open(tmp, "w") as f:
                f.write(identity)
            os.replace(tmp, path)
        except OSError:
            pass
        return identity

    @functools.lru_cache(maxsize=None)
    def loaded_identity(self) -> str:
        """The version reported by the NVRTC library itself (loads it)."""
        try:
            from cuda.bindings import nvrtc
        except ImportError as e:
            raise ToolchainError(f"cuda-bindings is required for NVRTC ({e}); {_NVRTC_INSTALL}") from e
        try:
            err, major, minor = nvrtc.nvrtcVersion()
        except RuntimeError as e:  # cuda-bindings (cuda.pathfinder) found no libnvrtc
            raise ToolchainError(f"NVRTC could not be loaded ({e}); {_NVRTC_INSTALL}") from e
        _check_nvrtc(err, what="nvrtcVersion")
        check_nvrtc_version(major, minor)
        return f"nvrtc-{major}.{minor}"

    def flags(self, arch: str, ptxas_verbose: bool = False, lineinfo: bool = False) -> List[str]:
        flags = [f"--gpu-architecture={check_arch(arch)}", "-default-device", *_COMMON_FLAGS]
        flags += [f"-I{d}" for d in include_dirs()]
        if ptxas_verbose:
            flags.append("--ptxas-options=-v")
        if lineinfo:
            flags.append("--generate-line-info")
        return flags

    def compile(self, code: str, arch: str, want_ptx: bool = False, ptxas_verbose: bool = False,
                lineinfo: bool = False) -> CompileResult:
        from cuda.bindings import nvrtc
        if self.loaded_identity() != self.identity():
            record = os.path.join(read_env().jit_cache_dir, "nvrtc_identity")
            raise ToolchainError(f"the loaded NVRTC is {self.loaded_identity()} but this installation was recorded "
                                 f"as {self.identity()}; remove {record}")
        start = time.perf_counter()
        err, prog = nvrtc.nvrtcCreateProgram(code.encode(), b"deep_gemm_kernel.cu", 0, [], [])
        _check_nvrtc(err, what="nvrtcCreateProgram")
        try:
            opts = [f.encode() for f in self.flags(arch, ptxas_verbose, lineinfo)]
            (err,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
            log = _nvrtc_log(prog)
            if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
                raise CompileError(f"NVRTC failed to compile the kernel ({err.name}):\n{log}")
            err, size = nvrtc.nvrtcGetCUBINSize(prog)
            _check_nvrtc(err, prog, "nvrtcGetCUBINSize")
            cubin = bytearray(size)
            _check_nvrtc(nvrtc.nvrtcGetCUBIN(prog, cubin)[0], prog, "nvrtcGetCUBIN")
            ptx = None
            if want_ptx:
                err, size = nvrtc.nvrtcGetPTXSize(prog)
                _check_nvrtc(err, prog, "nvrtcGetPTXSize")
                buf = bytearray(size)
                _check_nvrtc(nvrtc.nvrtcGetPTX(prog, buf)[0], prog, "nvrtcGetPTX")
                ptx = bytes(buf).rstrip(b"\0").decode()
        finally:
            nvrtc.nvrtcDestroyProgram(prog)
        return CompileResult(bytes(cubin), ptx, log, time.perf_counter() - start)


# Where, under a sys.path entry, the NVRTC wheels (CUDA 13, CUDA 12) and cuda-bindings keep their files.
_NVRTC_WHEEL_DIRS = ("nvidia/cu13/lib", "nvidia/cuda_nvrtc/lib", "cuda/bindings")


@functools.lru_cache(maxsize=None)
def _install_stamp() -> str:
    """A cheap fingerprint of where libnvrtc can come from: the NVRTC / cuda-bindings wheel directories under each
    sys.path entry and the CUDA toolkits' library directories, by path and mtime (a directory's mtime moves whenever
    a file in it is added, removed or replaced by rename, as every install and upgrade does).
    NOTES: listing every sys.path directory instead cost 0.5-0.9 ms of a process's first call; these stats (most of
    them of absent paths) cost ~0.05 ms."""
    parts = [sys.prefix]
    homes = [os.environ.get("CUDA_HOME", ""), os.environ.get("CUDA_PATH", ""), "/usr/local/cuda"]
    dirs = [os.path.join(entry, sub) for entry in sys.path if entry for sub in _NVRTC_WHEEL_DIRS]
    dirs += sorted({os.path.join(h, d) for h in homes if h for d in ("lib64", "lib")})
    for path in dirs:
        try:
            parts.append(f"{path}:{os.stat(path).st_mtime_ns}")
        except OSError:
            continue
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:24]


def find_nvcc(explicit: str = "") -> str:
    candidates = [explicit] if explicit else []
    if os.environ.get("CUDA_HOME"):
        candidates.append(os.path.join(os.environ["CUDA_HOME"], "bin", "nvcc"))
    candidates.append("/usr/local/cuda/bin/nvcc")
    on_path = shutil.which("nvcc")
    if on_path:
        candidates.append(on_path)
    for c in candidates:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    if explicit:
        raise ToolchainError(f"DG_JIT_NVCC_PATH={explicit!r} is not an executable file")
    raise ToolchainError("nvcc not found (DG_JIT_USE_NVCC=1): set DG_JIT_NVCC_PATH or CUDA_HOME")


class NVCCCompiler(Compiler):
    name = "nvcc"

    def __init__(self, path: str = ""):
        self.path = find_nvcc(path)

    @functools.lru_cache(maxsize=None)
    def identity(self) -> str:
        out = subprocess.run([self.path, "--version"], capture_output=True, text=True, check=True).stdout
        return "nvcc-" + out.strip().splitlines()[-1].strip()

    def flags(self, arch: str, ptxas_verbose: bool = False, lineinfo: bool = False) -> List[str]:
        arch = check_arch(arch)
        # NOTES: the -gencode form; `-arch=sm_90a` also ran a plain sm_90 pass on some nvcc versions.
        flags = [f"-gencode=arch=compute_{arch[3:]},code={arch}", "-O3", "--expt-relaxed-constexpr",
                 *_COMMON_FLAGS]
        flags += [f"-I{d}" for d in include_dirs()]
        if ptxas_verbose:
            flags.append("-Xptxas=-v")
        if lineinfo:
            flags.append("-lineinfo")
        return flags

    def _run(self, args: List[str]) -> Tuple[str, int]:
        proc = subprocess.run(args, capture_output=True, text=True)
        return proc.stdout + proc.stderr, proc.returncode

    def compile(self, code: str, arch: str, want_ptx: bool = False, ptxas_verbose: bool = False,
                lineinfo: bool = False) -> CompileResult:
        start = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix="deep_gemm_nvcc_") as tmp:
            src = os.path.join(tmp, "kernel.cu")
            with open(src, "w") as f:
                f.write(code)
            out = os.path.join(tmp, "kernel.cubin")
            flags = self.flags(arch, ptxas_verbose, lineinfo)
            log, rc = self._run([self.path, "-cubin", src, "-o", out, *flags])
            if rc != 0:
                raise CompileError(f"nvcc failed (exit {rc}): {' '.join([self.path, '-cubin', src, *flags])}\n{log}")
            with open(out, "rb") as f:
                cubin = f.read()
            ptx = None
            if want_ptx:
                ptx_path = os.path.join(tmp, "kernel.ptx")
                log2, rc = self._run([self.path, "-ptx", src, "-o", ptx_path, *flags])
                if rc != 0:
                    raise CompileError(f"nvcc -ptx failed (exit {rc}):\n{log2}")
                with open(ptx_path) as f:
                    ptx = f.read()
        return CompileResult(cubin, ptx, log, time.perf_counter() - start)


def get_compiler(use_nvcc: bool, nvcc_path: str = "") -> Compiler:
    return NVCCCompiler(nvcc_path) if use_nvcc else _nvrtc()


@functools.lru_cache(maxsize=None)
def _nvrtc() -> NVRTCCompiler:
    return NVRTCCompiler()
