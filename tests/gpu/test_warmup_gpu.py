"""GPU: compile mode launches nothing and writes nothing (also for layouts `_C` already launches by itself), and
after deep_gemm.warmup of a shape set the first real calls compile nothing. Skipped without sm_90."""
import pytest
import torch

import deep_gemm
from deep_gemm import _C, jit, runtime
from deep_gemm.families import sm90_fp8_gemm_1d2d as gemm_1d2d
from gemm_cases import SPECS

pytestmark = pytest.mark.gpu


def _dense_fast_path_inputs(m=128, n=256, k=256):
    """A dense call `_C` can launch by itself (SA already MN-major and TMA-aligned, nothing converted)."""
    a8, sa = deep_gemm.per_token_cast_to_fp8(torch.randn((m, k), device="cuda", dtype=torch.bfloat16))
    b8, sb = deep_gemm.per_block_cast_to_fp8(torch.randn((n, k), device="cuda", dtype=torch.bfloat16))
    return (a8, deep_gemm.get_col_major_tma_aligned_tensor(sa)), (b8, sb)


def test_compile_mode_bypasses_the_fast_path():
    lhs, rhs = _dense_fast_path_inputs()
    out = torch.empty((128, 256), device="cuda", dtype=torch.bfloat16)
    deep_gemm.gemm_fp8_fp8_bf16_nt(lhs, rhs, out)
    fast = _C.stats()["fast"]
    deep_gemm.gemm_fp8_fp8_bf16_nt(lhs, rhs, out)
    assert _C.stats()["fast"] == fast + 1, "precondition: this layout is launched by `_C` itself"
    expected = out.clone()

    poisoned = torch.full_like(out, float("nan"))
    deep_gemm.set_compile_mode(True)
    try:
        before = _C.stats()
        deep_gemm.gemm_fp8_fp8_bf16_nt(lhs, rhs, poisoned)
        torch.cuda.synchronize()
        after = _C.stats()
    finally:
        deep_gemm.set_compile_mode(False)
    assert poisoned.isnan().all(), "compile mode wrote out"
    assert after["fast"] == before["fast"] and after["plans"] == 0 and after["registered"] == before["registered"]
    deep_gemm.gemm_fp8_fp8_bf16_nt(lhs, rhs, poisoned)
    torch.cuda.synchronize()
    assert torch.equal(poisoned, expected), "the first call after compile mode computes as before"


@pytest.mark.parametrize("spec", SPECS, ids=[s.name for s in SPECS])
def test_compile_mode_leaves_out_untouched(spec):
    case = spec.build(spec.small, "cuda", 0)
    snapshot = case.guarded.buf.clone()
    deep_gemm.set_compile_mode(True)
    try:
        case.run()
        torch.cuda.synchronize()
    finally:
        deep_gemm.set_compile_mode(False)
    assert torch.equal(case.guarded.buf, snapshot), f"{case.desc}: compile mode wrote into the output buffer"
    case.run()
    case.check()


def _contiguous_rows(sizes) -> int:
    """Rows of tests/gemm_cases.py's BF16 contiguous problem: every group's rows padded to 128."""
    return sum((size + 127) // 128 * 128 for size in sizes)


def test_first_calls_after_warmup_compile_nothing(tmp_path, monkeypatch):
    """The SPECS' small problems, first seen in this process with an empty cache and the first-sight precompile on:
    after warmup of their shapes, every kernel comes from the disk cache."""
    monkeypatch.setenv("DG_JIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("DG_JIT_PRECOMPILE", "1")
    runtime.clear_plans()
    jit._loaded.clear()
    gemm_1d2d._seen_nk.clear()
    small = {s.name: s.small for s in SPECS}
    d, c, mk = (small["gemm_fp8_fp8_bf16_nt"], small["m_grouped_gemm_fp8_fp8_bf16_nt_contiguous"],
                small["m_grouped_gemm_fp8_fp8_bf16_nt_masked"])
    w, kg = small["wgrad_gemm_fp8_fp8_fp32_nt"], small["k_grouped_wgrad_gemm_fp8_fp8_fp32_nt"]
    bm, shm = small["bmm_fp8_fp8_bf16_nt"], small["fp8_gemm_nt_skip_head_mid"]
    fo, cfo, mfo = (small["fp8_gemm_nt_fp8_out"], small["m_grouped_fp8_gemm_nt_contiguous_fp8_out"],
                    small["m_grouped_fp8_gemm_nt_masked_fp8_out"])
    csw, msw = small["m_grouped_fp8_gemm_nt_contiguous_swiglu"], small["m_grouped_fp8_gemm_nt_masked_swiglu"]
    summary = deep_gemm.warmup(dense=[(d["n"], d["k"])], contiguous=[(c["n"], c["k"], len(c["sizes"]))],
                               masked=[(mk["n"], mk["k"], mk["groups"], [mk["expected_m"]])],
                               wgrad=[(w["m"], w["n"])], k_grouped=[(kg["m"], kg["n"], len(kg["ks"]))],
                               bmm=[(bm["n"], bm["k"], bm["batches"], [bm["m"]])],
                               bf16=[(small["bf16_gemm_nt"]["m"], small["bf16_gemm_nt"]["n"], small["bf16_gemm_nt"]["k"])],
                               bf16_contiguous=[(_contiguous_rows(small["m_grouped_bf16_gemm_nt_contiguous"]["sizes"]),
                                                 small["m_grouped_bf16_gemm_nt_contiguous"]["n"])],
                               bf16_masked=[(small["m_grouped_bf16_gemm_nt_masked"]["expected_m"],
                                             small["m_grouped_bf16_gemm_nt_masked"]["n"],
                                             len(small["m_grouped_bf16_gemm_nt_masked"]["masked"]))],
                               einsum=[(small["einsum"]["m"], small["einsum"]["n"], small["einsum"]["batches"])],
                               tf32_hc_prenorm=[(small["tf32_hc_prenorm_gemm"]["m"], small["tf32_hc_prenorm_gemm"]["n"],
                                                 small["tf32_hc_prenorm_gemm"]["splits"])],
                               skip_head_mid=[(shm["heads"] * (shm["left"] + shm["right"]), shm["k"], shm["left"],
                                               shm["mid"], shm["right"])],
                               dense_fp8_out=[(fo["n"], fo["k"])],
                               contiguous_fp8_out=[(cfo["n"], cfo["k"], len(cfo["sizes"]))],
                               masked_fp8_out=[(mfo["n"], mfo["k"], mfo["groups"], [mfo["expected_m"]])],
                               contiguous_swiglu=[(csw["n"], csw["k"], len(csw["sizes"]))],
                               masked_swiglu=[(msw["n"], msw["k"], msw["groups"], [msw["expected_m"]])],
                               progress=False)
    assert summary["failures"] == [] and summary["compiled"] == summary["kernels"]
    # The inputs first: drawing them runs the FP8 cast kernels, which have no warm-up shapes.
    cases = [spec.build(spec.small, "cuda", 0) for spec in SPECS]
    before = jit.stats()
    for case in cases:
        case.run()
        case.check()
    after = jit.stats()
    # An activation clamp is a compile-time constant warm-up does not take: each clamped SwiGLU spec compiles one.
    clamped = sum(spec.small.get("clamp") is not None for spec in SPECS)
    assert after["compiled"] - before["compiled"] == clamped, "a first call compiled a kernel warmup did not build"
    assert after["disk_hits"] > before["disk_hits"], "the calls did load their kernels from the disk cache"
    runtime.clear_plans()
