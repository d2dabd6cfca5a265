"""Every ``DG_*`` environment variable the library reads, typed and with its default (listed in the README).

`VARIABLES` is the one table of them (name, field of `Env`, default, effect): `read_env` parses it and
`python -m deep_gemm doctor` reports it.
"""
import os
from dataclasses import dataclass
from typing import Tuple


def _flag(name: str, default: str = "0") -> bool:
    return os.environ.get(name, default).strip().lower() not in ("", "0", "false", "no", "off")


@dataclass(frozen=True)
class Variable:
    name: str
    field: str     # the `Env` field holding its value
    default: str   # as it would be written in the environment
    is_flag: bool  # parsed as a boolean ("", 0, false, no, off: off)
    effect: str


VARIABLES: Tuple[Variable, ...] = (
    Variable("DG_JIT_CACHE_DIR", "jit_cache_dir", "~/.deep_gemm", False,
             "Root of the on-disk kernel cache (`python -m deep_gemm cache` manages it)."),
    Variable("DG_JIT_USE_NVCC", "jit_use_nvcc", "0", True, "Compile with nvcc instead of NVRTC."),
    Variable("DG_JIT_NVCC_PATH", "jit_nvcc_path", "", False,
             "nvcc to use when DG_JIT_USE_NVCC=1 (default: $CUDA_HOME/bin/nvcc, /usr/local/cuda/bin/nvcc, PATH)."),
    Variable("DG_JIT_DEBUG", "jit_debug", "0", True,
             "Log every compile (command, time), cache hit and failed precompile worker (logger deep_gemm.jit)."),
    Variable("DG_PRINT_CONFIGS", "print_configs", "0", True,
             "Log the kernel configuration chosen for every new problem (logger deep_gemm.configs)."),
    Variable("DG_JIT_PTXAS_VERBOSE", "ptxas_verbose", "0", True,
             "Compile with ptxas -v and log its report: registers, spills, stack (logger deep_gemm.jit.ptxas)."),
    Variable("DG_JIT_PRECOMPILE", "jit_precompile", "1", True,
             "On the first sight of an (n, k), compile every kernel variant any m can pick (parallel processes)."),
    Variable("DG_JIT_PRINT_COMPILER_COMMAND", "jit_print_compiler_command", "0", True,
             "Log the compiler and options of every compile (logger deep_gemm.jit.command)."),
    Variable("DG_JIT_DUMP_PTX", "jit_dump_ptx", "0", True,
             "Write each compiled kernel's PTX to kernel.ptx in its cache entry and log the path "
             "(logger deep_gemm.jit.ptx)."),
    Variable("DG_JIT_DUMP_SASS", "jit_dump_sass", "0", True,
             "Disassemble each compiled kernel with cuobjdump into kernel.sass in its cache entry and log the path, "
             "or log that cuobjdump/nvdisasm are unavailable (logger deep_gemm.jit.sass)."),
    Variable("DG_JIT_WITH_LINEINFO", "jit_with_lineinfo", "0", True,
             "Compile with line information (NVRTC --generate-line-info, nvcc -lineinfo) for profilers and "
             "compute-sanitizer; part of the cache key."),
    Variable("DG_JIT_PTXAS_CHECK", "jit_ptxas_check", "0", True,
             "Fail a compile with CompileError when ptxas reports local-memory spills or a stack frame "
             "(implies ptxas -v)."),
    Variable("DG_SM100_SELFTEST", "sm100_selftest", "1", True,
             "Before the first launch of an sm100 kernel family (or of a Hopper kernel not yet run on a GPU: the "
             "paged MQA logits) on a device, run it on small problems against a reference and raise SelfTestError "
             "if it is wrong (deep_gemm/selftest.py); 0 skips the check."),
)


@dataclass(frozen=True)
class Env:
    """The parsed variables; see `VARIABLES` for what each does."""
    jit_cache_dir: str
    jit_use_nvcc: bool
    jit_nvcc_path: str
    jit_debug: bool
    print_configs: bool
    ptxas_verbose: bool
    jit_precompile: bool
    jit_print_compiler_command: bool
    jit_dump_ptx: bool
    jit_dump_sass: bool
    jit_with_lineinfo: bool
    jit_ptxas_check: bool
    sm100_selftest: bool


def read_env() -> Env:
    """Read the environment now (tests call this after changing ``os.environ``)."""
    values = {v.field: _flag(v.name, v.default) if v.is_flag else os.environ.get(v.name, "") for v in VARIABLES}
    values["jit_cache_dir"] = os.path.expanduser(values["jit_cache_dir"] or "~/.deep_gemm")
    return Env(**values)
