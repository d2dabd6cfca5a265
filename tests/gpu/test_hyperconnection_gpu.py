"""GPU correctness of `tf32_hc_prenorm_gemm` on Hopper: DeepGEMM's test_hyperconnection shapes against a TF32 reference
(PyTorch's matmul with TF32 allowed) and an FP32 one, splits that do not divide the K blocks, more splits than
blocks, ragged m and k, every n, guard bands, bitwise reruns and CUDA-graph replay. Skipped without sm_90."""
import pytest
import torch

import deep_gemm
from deep_gemm.testing import calc_diff
from gemm_cases import Guarded

pytestmark = pytest.mark.gpu


def _tf32_matmul(a, b):
    previous = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = True
    try:
        return a.float() @ b.T
    finally:
        torch.backends.cuda.matmul.allow_tf32 = previous


def _call(m, n, k, splits, seed):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn((m, k), device="cuda", generator=gen).to(torch.bfloat16)
    b = torch.randn((n, k), device="cuda", generator=gen)
    lead = () if splits is None else (splits,)
    d = Guarded(lead + (m, n) if splits else (m, n), torch.float32, "cuda")
    s = torch.full(lead + (m,), float("nan"), device="cuda")
    deep_gemm.tf32_hc_prenorm_gemm(a, b, d.out, s, num_splits=splits)
    torch.cuda.synchronize()
    return a, b, d, s


@pytest.mark.parametrize("m", [13, 137, 4096, 8192])
@pytest.mark.parametrize("nk", [(24, 28672), (24, 7680), (24, 7168)], ids=lambda v: "x".join(map(str, v)))
@pytest.mark.parametrize("splits", [None, 16])
def test_deepgemm_shapes(m, nk, splits):
    n, k = nk
    a, b, d, s = _call(m, n, k, splits, m + k)
    d.check_guards()
    final_d = d.out if splits is None else d.out.sum(0)
    final_s = s if splits is None else s.sum(0)
    assert max(calc_diff(final_d, _tf32_matmul(a, b)), calc_diff(final_s, a.float().square().sum(-1))) < 1e-8
    assert calc_diff(final_d.double(), a.double() @ b.double().T) < 1e-6   # and close to the exact product


@pytest.mark.parametrize("mnk,splits", [((1, 8, 64), None), ((65, 16, 200), 3), ((130, 32, 1000), 7),
                                        ((64, 4, 128), 5), ((200, 28, 4096), 1), ((77, 24, 576), 64)],
                         ids=lambda v: "x".join(map(str, v)) if isinstance(v, tuple) else str(v))
def test_ragged(mnk, splits):
    m, n, k = mnk
    a, b, d, s = _call(m, n, k, splits, 3 * m + n)
    d.check_guards()
    final_d = d.out if splits is None else d.out.sum(0)
    final_s = s if splits is None else s.sum(0)
    assert bool(torch.isfinite(final_d).all()) and bool(torch.isfinite(final_s).all())
    assert calc_diff(final_d, _tf32_matmul(a, b)) < 1e-8
    assert calc_diff(final_s, a.float().square().sum(-1)) < 1e-8
    if splits is not None and splits > (k + 63) // 64:
        assert bool((d.out[(k + 63) // 64:] == 0).all()) and bool((s[(k + 63) // 64:] == 0).all())


def test_bitwise_rerun_and_graph():
    gen = torch.Generator(device="cuda").manual_seed(11)
    a = torch.randn((1000, 7168), device="cuda", generator=gen).to(torch.bfloat16)
    b = torch.randn((24, 7168), device="cuda", generator=gen)
    d = torch.empty((16, 1000, 24), device="cuda")
    s = torch.empty((16, 1000), device="cuda")
    deep_gemm.tf32_hc_prenorm_gemm(a, b, d, s, num_splits=16)
    first = (d.clone(), s.clone())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        deep_gemm.tf32_hc_prenorm_gemm(a, b, d, s, num_splits=16)
    d.zero_(), s.zero_()
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(first[0], d) and torch.equal(first[1], s)


def test_k_zero_and_m_zero():
    a = torch.empty((5, 0), device="cuda", dtype=torch.bfloat16)
    b = torch.empty((8, 0), device="cuda")
    d = torch.full((5, 8), 7.0, device="cuda")
    s = torch.full((5,), 7.0, device="cuda")
    deep_gemm.tf32_hc_prenorm_gemm(a, b, d, s)
    assert bool((d == 0).all()) and bool((s == 0).all())
    deep_gemm.tf32_hc_prenorm_gemm(torch.empty((0, 64), device="cuda", dtype=torch.bfloat16),
                                   torch.ones((8, 64), device="cuda"), torch.empty((0, 8), device="cuda"),
                                   torch.empty((0,), device="cuda"))
