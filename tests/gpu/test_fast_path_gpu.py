"""The three launch paths (Python, pip-built C++ module, torch-built C++ module) on the GPU: same results, the
fast ones really used, and every per-call check still enforced."""
import pytest
import torch

import deep_gemm
from deep_gemm.ops import gemm as gemm_mod
from deep_gemm.testing import calc_diff

from test_gemm_gpu import make_inputs

pytestmark = pytest.mark.gpu


@pytest.fixture(params=["python", "cpython_api", "torch_ext"])
def path(request, monkeypatch):
    """Route calls through one path for the test (and no background build meanwhile)."""
    monkeypatch.setitem(gemm_mod._torch_ext_state, "started", True)
    if request.param == "python":
        module = None
    elif request.param == "cpython_api":
        from deep_gemm import _C
        module = gemm_mod._init_fast_module(_C)
    else:
        from deep_gemm.jit import torch_ext
        module = gemm_mod._init_fast_module(torch_ext.build())
    monkeypatch.setattr(gemm_mod, "_fast", module)
    if module is not None:
        module.clear()
    return module


def _fast_count(module):
    return module.stats()["fast"] if module is not None else 0


def test_fresh_tensors_every_call(path):
    """New activation/output tensors (new pointers) on every call of one layout: every result correct, and after
    the first call every call is a fast launch."""
    m, n, k = 333, 2112, 1280
    _, rhs, _, _ = make_inputs(m, n, k, seed=60)
    before = _fast_count(path)
    for i in range(4):
        (a, sa), _, _, _ = make_inputs(m, n, k, seed=61 + i)
        sa = deep_gemm.get_col_major_tma_aligned_tensor(sa)
        from deep_gemm.testing import dequant_per_block, dequant_per_token
        ref = dequant_per_token(a, sa) @ dequant_per_block(*rhs).t()
        out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
        deep_gemm.gemm_fp8_fp8_bf16_nt((a, sa), rhs, out)
        torch.cuda.synchronize()
        assert calc_diff(out, ref) < 1e-5, f"call {i}"
    if path is not None:
        assert _fast_count(path) - before == 3
        assert path.stats()["plans"] == 1


def test_bad_pointers_refused_after_warmup(path):
    lhs, rhs, ref, _ = make_inputs(256, 512, 512, seed=70)
    a, sa = lhs
    sa = deep_gemm.get_col_major_tma_aligned_tensor(sa)
    store = torch.zeros((256 * 512 + 8,), dtype=torch.bfloat16, device="cuda")
    out = store[:256 * 512].view(256, 512)
    for _ in range(2):
        deep_gemm.gemm_fp8_fp8_bf16_nt((a, sa), rhs, out)
    torch.cuda.synchronize()
    assert calc_diff(out, ref) < 1e-5
    with pytest.raises(ValueError, match="out"):
        deep_gemm.gemm_fp8_fp8_bf16_nt((a, sa), rhs, store[1:256 * 512 + 1].view(256, 512))
    # The same layout with A inside out's memory: refused, and out untouched.
    alias = torch.zeros((256 * 512,), dtype=torch.bfloat16, device="cuda")
    a_alias = alias.view(torch.float8_e4m3fn)[:256 * 512].view(256, 512)
    a_alias.copy_(a)
    with pytest.raises(ValueError, match="overlaps"):
        deep_gemm.gemm_fp8_fp8_bf16_nt((a_alias, sa), rhs, alias.view(256, 512))
    # A misaligned SA pointer with the cached layout: converted by the Python path, still correct.
    sa_store = torch.empty((sa.numel() + 1,), dtype=torch.float32, device="cuda")
    sa_shift = sa_store[1:].as_strided(sa.shape, sa.stride())
    sa_shift.copy_(sa)
    out2 = torch.empty_like(out)
    deep_gemm.gemm_fp8_fp8_bf16_nt((a, sa_shift), rhs, out2)
    torch.cuda.synchronize()
    assert torch.equal(out2.view(torch.int16), out.view(torch.int16))


def test_graph_capture(path):
    m, n, k = 300, 2112, 1024
    (a, sa), (b, sb), _, _ = make_inputs(m, n, k, seed=80)
    sa = deep_gemm.get_col_major_tma_aligned_tensor(sa)
    out = torch.empty((m, n), dtype=torch.bfloat16, device="cuda")
    deep_gemm.gemm_fp8_fp8_bf16_nt((a, sa), (b, sb), out)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        deep_gemm.gemm_fp8_fp8_bf16_nt((a, sa), (b, sb), out)
    (a2, sa2), (b2, sb2), ref, _ = make_inputs(m, n, k, seed=81)
    a.copy_(a2), sa.copy_(deep_gemm.get_col_major_tma_aligned_tensor(sa2)), b.copy_(b2), sb.copy_(sb2)
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    assert calc_diff(out, ref) < 1e-5


def test_set_num_sms_drops_plans(path):
    lhs, rhs, ref, _ = make_inputs(1024, 1024, 1024, seed=90)
    out = torch.empty((1024, 1024), dtype=torch.bfloat16, device="cuda")
    lhs = (lhs[0], deep_gemm.get_col_major_tma_aligned_tensor(lhs[1]))
    deep_gemm.gemm_fp8_fp8_bf16_nt(lhs, rhs, out)
    total = deep_gemm.get_num_sms()
    try:
        deep_gemm.set_num_sms(total - 20)
        if path is not None:
            assert path.stats()["plans"] == 0
        out.fill_(float("nan"))
        for _ in range(2):
            deep_gemm.gemm_fp8_fp8_bf16_nt(lhs, rhs, out)
        torch.cuda.synchronize()
        assert calc_diff(out, ref) < 1e-5
    finally:
        deep_gemm.set_num_sms(total)


def test_no_host_sync(path):
    lhs, rhs, _, _ = make_inputs(256, 1024, 512, seed=95)
    lhs = (lhs[0], deep_gemm.get_col_major_tma_aligned_tensor(lhs[1]))
    out = torch.empty((256, 1024), dtype=torch.bfloat16, device="cuda")
    deep_gemm.gemm_fp8_fp8_bf16_nt(lhs, rhs, out)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(3):
            deep_gemm.gemm_fp8_fp8_bf16_nt(lhs, rhs, out)
    finally:
        torch.cuda.set_sync_debug_mode("default")
