"""Diagnostics go through the standard `logging` module: logger "deep_gemm" and its children, all at DEBUG level.

    deep_gemm.jit           compiles (time), cache hits, failed precompile workers   DG_JIT_DEBUG
    deep_gemm.jit.command   the compiler and its options of every compile           DG_JIT_PRINT_COMPILER_COMMAND
    deep_gemm.jit.ptxas     the compiler's log (ptxas report)                       DG_JIT_PTXAS_VERBOSE
    deep_gemm.jit.ptx       where each compiled kernel's PTX was written            DG_JIT_DUMP_PTX
    deep_gemm.jit.sass      where each compiled kernel's SASS was written           DG_JIT_DUMP_SASS
    deep_gemm.configs       the kernel configuration of every new problem           DG_PRINT_CONFIGS

A user who configures these loggers (e.g. "deep_gemm" at DEBUG) sees the messages through their own handlers.
Without any configuration, a flag of the right column shows its loggers' messages on stderr: `apply_env` lowers
those loggers to DEBUG and attaches one stderr handler to "deep_gemm" (never `logging.basicConfig`). A program that
both sets a flag and routes "deep_gemm" DEBUG records to its own stderr handler sees those messages twice.
"""
import logging
import sys
import threading

from .envs import Env, read_env

# The Env flag that shows a logger (and its children) on stderr.
_SHOWN_BY = (("jit_debug", "deep_gemm.jit"), ("jit_print_compiler_command", "deep_gemm.jit.command"),
             ("ptxas_verbose", "deep_gemm.jit.ptxas"), ("jit_dump_ptx", "deep_gemm.jit.ptx"),
             ("jit_dump_sass", "deep_gemm.jit.sass"), ("print_configs", "deep_gemm.configs"))


def _shown(logger_name: str, env: Env) -> bool:
    return any(getattr(env, field) and (logger_name == name or logger_name.startswith(name + "."))
               for field, name in _SHOWN_BY)


class _FlagHandler(logging.Handler):
    """Writes to sys.stderr as it is at each message (so redirections and pytest's capture see it), and only the
    records of loggers that a flag shows now: a user's own DEBUG configuration does not make it print."""

    def emit(self, record: logging.LogRecord) -> None:
        if not _shown(record.name, read_env()):
            return
        try:
            sys.stderr.write(self.format(record) + "\n")
            sys.stderr.flush()
        except Exception:  # the logging module's contract: report, never raise into the library
            self.handleError(record)


configs = logging.getLogger("deep_gemm.configs")
_handler = _FlagHandler(logging.DEBUG)
_handler.setFormatter(logging.Formatter("[%(name)s] %(message)s"))
_lowered = {}  # logger name -> the level it had before a flag lowered it
_lock = threading.Lock()


def apply_env(env: Env) -> None:
    """Make the loggers of the flags set in `env` emit DEBUG records, and give back the levels of those whose flag
    is no longer set. Cheap; called where the library reads the flags (a compile, a new problem)."""
    with _lock:
        # Restore first, so that a logger lowered for a flag now off does not hide a child whose flag is on.
        for field, name in _SHOWN_BY:
            if not getattr(env, field) and name in _lowered:
                logging.getLogger(name).setLevel(_lowered.pop(name))
        for field, name in _SHOWN_BY:
            logger = logging.getLogger(name)
            if getattr(env, field) and name not in _lowered and logger.getEffectiveLevel() > logging.DEBUG:
                _lowered[name] = logger.level
                logger.setLevel(logging.DEBUG)
        root = logging.getLogger("deep_gemm")
        if any(getattr(env, field) for field, _ in _SHOWN_BY) and _handler not in root.handlers:
            root.addHandler(_handler)
