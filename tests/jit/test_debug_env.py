"""The JIT's debug variables (deep_gemm/envs.py), each through jit.build against the real NVRTC: the compiler
command, PTX / SASS dumps, line info (part of the cache key) and the ptxas local-memory check."""
import os

import pytest

from deep_gemm import jit, log
from deep_gemm.envs import VARIABLES, read_env
from deep_gemm.heuristics import GemmProblem, get_config
from deep_gemm.jit import disasm
from deep_gemm.jit.cache import KernelCache, cache_key
from deep_gemm.jit.compiler import NVCCCompiler, NVRTCCompiler, check_ptxas_report, compile_options, get_compiler
from deep_gemm.families.sm90_fp8_gemm_1d2d import kernel_source

ARCH = "sm_90a"
# A kernel whose dynamically indexed local array lives in local memory: ptxas reports a 1024-byte stack frame.
STACK_KERNEL = """extern "C" __global__ void stack_kernel(float* out, int i) {
    float a[256];
    for (int j = 0; j < 256; ++j) a[j] = out[j * i];
    out[i] = a[out[1] > 0 ? i & 255 : 3];
}
"""


class HandSource(jit.KernelSource):
    def code(self) -> str:
        return STACK_KERNEL


def small_source() -> jit.KernelSource:
    return kernel_source(128, 128, get_config(GemmProblem(64, 128, 128, 132)))


@pytest.fixture(autouse=True)
def env(tmp_path, monkeypatch):
    """A fresh cache and no debug variable set (each test sets its own)."""
    for v in VARIABLES:
        if v.is_flag and v.name != "DG_JIT_PRECOMPILE":
            monkeypatch.delenv(v.name, raising=False)
    monkeypatch.setenv("DG_JIT_CACHE_DIR", str(tmp_path / "cache"))
    yield monkeypatch
    monkeypatch.undo()
    log.apply_env(read_env())


def entry_of(source: jit.KernelSource) -> str:
    e = read_env()
    compiler = get_compiler(e.jit_use_nvcc, e.jit_nvcc_path)
    key = cache_key(source.code(), compiler.identity(), compiler.flags(ARCH, **compile_options(e)), ARCH)
    return KernelCache(e.jit_cache_dir).entry_dir(source.name, key)


def test_quiet_by_default(capsys):
    jit.build(small_source(), ARCH)
    assert capsys.readouterr().err == ""
    assert sorted(os.listdir(entry_of(small_source()))) == ["kernel.cu", "kernel.cubin", "meta.json"]


def test_print_compiler_command(env, capsys):
    env.setenv("DG_JIT_PRINT_COMPILER_COMMAND", "1")
    jit.build(small_source(), ARCH)
    err = capsys.readouterr().err
    assert err.startswith("[deep_gemm.jit.command] compiling deep_gemm::sm90::fp8_gemm_1d2d_impl<Config{")
    assert "with nvrtc: --gpu-architecture=sm_90a" in err and "-DNDEBUG" in err
    assert err.count("\n") == 1, "the command only, not DG_JIT_DEBUG's other messages"


def test_jit_debug_logs_compile_command_and_hit(env, capsys):
    env.setenv("DG_JIT_DEBUG", "1")
    jit.build(small_source(), ARCH)
    jit.build(small_source(), ARCH)
    err = capsys.readouterr().err
    assert "[deep_gemm.jit.command] compiling " in err and "[deep_gemm.jit] compiled " in err
    assert f"[deep_gemm.jit] cache hit {entry_of(small_source())}\n" in err


def test_ptxas_verbose_logs_the_report(env, capsys):
    env.setenv("DG_JIT_PTXAS_VERBOSE", "1")
    jit.build(small_source(), ARCH)
    err = capsys.readouterr().err
    assert err.startswith("[deep_gemm.jit.ptxas] compiler log of ") and "bytes stack frame" in err


def test_dump_ptx(env, capsys):
    env.setenv("DG_JIT_DUMP_PTX", "1")
    jit.build(small_source(), ARCH)
    path = os.path.join(entry_of(small_source()), "kernel.ptx")
    with open(path) as f:
        ptx = f.read()
    assert ".target sm_90a" in ptx and "wgmma.mma_async" in ptx
    assert capsys.readouterr().err == f"[deep_gemm.jit.ptx] PTX of {small_source().name}: {path}\n"


@pytest.mark.skipif(disasm.find_cuobjdump() is None, reason="cuobjdump/nvdisasm not installed")
def test_dump_sass(env, capsys):
    env.setenv("DG_JIT_DUMP_SASS", "1")
    jit.build(small_source(), ARCH)
    path = os.path.join(entry_of(small_source()), "kernel.sass")
    with open(path) as f:
        assert "QGMMA" in f.read()
    assert capsys.readouterr().err == f"[deep_gemm.jit.sass] SASS of {small_source().name}: {path}\n"


def test_dump_sass_without_cuobjdump_says_so(env, capsys, monkeypatch):
    monkeypatch.setattr(disasm, "find_cuobjdump", lambda: None)
    env.setenv("DG_JIT_DUMP_SASS", "1")
    _, cached, _ = jit.build(small_source(), ARCH)
    assert not cached
    assert not os.path.exists(os.path.join(entry_of(small_source()), "kernel.sass"))
    assert capsys.readouterr().err.startswith(f"[deep_gemm.jit.sass] no SASS of {small_source().name}: "
                                              "cuobjdump/nvdisasm not found")


def test_lineinfo_changes_flags_key_and_cubin(env):
    plain, cached, _ = jit.build(small_source(), ARCH)
    plain_entry = entry_of(small_source())
    env.setenv("DG_JIT_WITH_LINEINFO", "1")
    assert "--generate-line-info" in NVRTCCompiler().flags(ARCH, **compile_options(read_env()))
    lined, cached, _ = jit.build(small_source(), ARCH)
    assert not cached, "line info is part of the cache key"
    assert entry_of(small_source()) != plain_entry
    assert b".nv_debug_line_sass" in lined and b".nv_debug_line_sass" not in plain


def test_nvcc_lineinfo_flag():
    nvcc = NVCCCompiler()
    assert "-lineinfo" in nvcc.flags(ARCH, lineinfo=True) and "-lineinfo" not in nvcc.flags(ARCH)


def test_ptxas_check_fails_a_stack_frame(env):
    source = HandSource("stack_test", "none.cuh", "stack_kernel", {})
    cubin, _, _ = jit.build(source, ARCH)  # builds fine without the check
    env.setenv("DG_JIT_PTXAS_CHECK", "1")
    with pytest.raises(jit.CompileError, match=r"DG_JIT_PTXAS_CHECK: stack_kernel<Config\{\}> uses local memory:\n"
                                               r"stack_kernel: 1024 bytes stack frame, 0 bytes spill stores"):
        jit.build(source, ARCH)
    assert not os.path.exists(entry_of(source)), "a failed check stores nothing"
    _, cached, _ = jit.build(small_source(), ARCH)  # the real kernel uses no local memory
    assert not cached


def test_ptxas_check_without_a_report():
    with pytest.raises(jit.CompileError, match="no ptxas report"):
        check_ptxas_report("", "k")
    check_ptxas_report("ptxas info    : Function properties for k\n"
                       "ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n", "k")
    with pytest.raises(jit.CompileError, match="k: 0 bytes stack frame, 8 bytes spill stores, 8 bytes spill loads"):
        check_ptxas_report("ptxas info    : Function properties for k\n"
                           "ptxas         .     0 bytes stack frame, 8 bytes spill stores, 8 bytes spill loads\n", "k")
