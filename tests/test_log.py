"""deep_gemm/log.py: diagnostics through `logging`; the DG_* flags show them on stderr without any configuration."""
import logging

import pytest

from deep_gemm import log
from deep_gemm.envs import VARIABLES, read_env

FLAG_LOGGERS = [("DG_JIT_DEBUG", "deep_gemm.jit"), ("DG_JIT_DEBUG", "deep_gemm.jit.command"),
                ("DG_JIT_PRINT_COMPILER_COMMAND", "deep_gemm.jit.command"), ("DG_JIT_PTXAS_VERBOSE", "deep_gemm.jit.ptxas"),
                ("DG_JIT_DUMP_PTX", "deep_gemm.jit.ptx"), ("DG_JIT_DUMP_SASS", "deep_gemm.jit.sass"),
                ("DG_PRINT_CONFIGS", "deep_gemm.configs")]


@pytest.fixture(autouse=True)
def no_flags(monkeypatch):
    for v in VARIABLES:
        if v.is_flag and v.name != "DG_JIT_PRECOMPILE":
            monkeypatch.delenv(v.name, raising=False)
    yield monkeypatch
    monkeypatch.undo()
    log.apply_env(read_env())  # give the levels back for the next tests


def emit(monkeypatch, flags, logger_name, message="hello"):
    for name in flags:
        monkeypatch.setenv(name, "1")
    log.apply_env(read_env())
    logging.getLogger(logger_name).debug("%s", message)


@pytest.mark.parametrize("flag,logger_name", FLAG_LOGGERS)
def test_flag_shows_its_logger_on_stderr(no_flags, capsys, flag, logger_name):
    emit(no_flags, [flag], logger_name)
    assert capsys.readouterr().err == f"[{logger_name}] hello\n"


@pytest.mark.parametrize("flag,logger_name", [("DG_PRINT_CONFIGS", "deep_gemm.jit"),
                                              ("DG_JIT_PTXAS_VERBOSE", "deep_gemm.jit.command"),
                                              ("DG_JIT_DUMP_PTX", "deep_gemm.configs")])
def test_flag_shows_only_its_loggers(no_flags, capsys, flag, logger_name):
    emit(no_flags, [flag], logger_name)
    assert capsys.readouterr().err == ""


def test_no_flag_no_output_but_user_config_sees_records(no_flags, capsys, caplog):
    caplog.set_level(logging.DEBUG, logger="deep_gemm")
    emit(no_flags, [], "deep_gemm.jit", "compiled x")
    assert capsys.readouterr().err == ""
    assert [(r.name, r.levelno, r.getMessage()) for r in caplog.records] == [("deep_gemm.jit", logging.DEBUG,
                                                                              "compiled x")]


def test_unsetting_a_flag_gives_the_level_back(no_flags, capsys):
    jit = logging.getLogger("deep_gemm.jit")
    assert jit.level == logging.NOTSET
    emit(no_flags, ["DG_JIT_DEBUG"], "deep_gemm.jit")
    assert jit.level == logging.DEBUG
    no_flags.delenv("DG_JIT_DEBUG")
    emit(no_flags, [], "deep_gemm.jit")
    assert jit.level == logging.NOTSET and capsys.readouterr().err == "[deep_gemm.jit] hello\n"


def test_child_flag_survives_parent_flag_going_off(no_flags, capsys):
    emit(no_flags, ["DG_JIT_DEBUG", "DG_JIT_PTXAS_VERBOSE"], "deep_gemm.jit.ptxas", "one")
    no_flags.delenv("DG_JIT_DEBUG")
    emit(no_flags, [], "deep_gemm.jit.ptxas", "two")
    assert capsys.readouterr().err == "[deep_gemm.jit.ptxas] one\n[deep_gemm.jit.ptxas] two\n"


def test_user_level_is_kept_when_already_verbose(no_flags):
    logging.getLogger("deep_gemm").setLevel(logging.DEBUG)
    try:
        emit(no_flags, ["DG_JIT_DEBUG"], "deep_gemm.jit")
        assert logging.getLogger("deep_gemm.jit").level == logging.NOTSET
    finally:
        logging.getLogger("deep_gemm").setLevel(logging.NOTSET)


def test_never_configures_the_root_logger(no_flags):
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    emit(no_flags, ["DG_JIT_DEBUG"], "deep_gemm.jit")
    assert root.handlers == handlers and root.level == level
    assert logging.getLogger("deep_gemm").handlers.count(log._handler) == 1


class _Stop(Exception):
    pass


def test_families_log_the_chosen_config(no_flags, capsys, monkeypatch):
    """DG_PRINT_CONFIGS through the real families (stopped before they need a GPU)."""
    from deep_gemm.heuristics import KernelType
    from deep_gemm.families import sm90_fp8_gemm_1d2d as dense, sm90_fp8_wgrad_1d1d as wgrad

    def stop(device_index):
        raise _Stop

    for module in (dense, wgrad):
        monkeypatch.setattr(module, "ensure_context", stop)
    no_flags.setenv("DG_JIT_PRECOMPILE", "0")
    no_flags.setenv("DG_PRINT_CONFIGS", "1")
    with pytest.raises(_Stop):
        dense._kernel(4096, 7168, 2048, 132, 0, "sm_90a", KernelType.NORMAL, 1)
    with pytest.raises(_Stop):
        wgrad._kernel(4096, 7168, 1, 132, 0, "sm_90a")
    lines = capsys.readouterr().err.splitlines()
    assert [line.split(":")[0] for line in lines] == ["[deep_gemm.configs] dense m=4096 n=7168 k=2048 groups=1",
                                                      "[deep_gemm.configs] wgrad m=4096 n=7168 groups=1"]
    assert all(": GemmConfig(block_m=" in line for line in lines)
