"""GPU correctness of the weight-gradient GEMMs (dense and k-grouped, FP32 accumulate) on Hopper; skipped without
sm_90."""
import random

import pytest
import torch

import deep_gemm
from deep_gemm.testing import calc_diff
from gemm_cases import k_grouped_inputs, quant_rows

pytestmark = pytest.mark.gpu

SENTINEL = 1234.5  # guard-band value around the FP32 outputs


def _quant(rows: int, k: int, gen: torch.Generator):
    """(e4m3 [rows, k], scales [rows, ceil(k/128)], dequantised FP32, BF16 original)."""
    return quant_rows(rows, k, gen, "cuda")


class GuardedF32:
    """A [lead, rows, n] FP32 output inside a buffer with guard rows and columns holding SENTINEL; the inside holds
    random initial values (the accumulation input)."""

    def __init__(self, lead: int, rows: int, n: int, gen: torch.Generator, guard: int = 4, pad: int = 0):
        self.stride = n + 2 * guard + pad
        self.buf = torch.full((lead * rows + 2, self.stride), SENTINEL, device="cuda")
        self.inner = torch.zeros_like(self.buf, dtype=torch.bool)
        self.inner[1:lead * rows + 1, guard:guard + n] = True
        self.out3 = self.buf[1:lead * rows + 1, guard:guard + n].view(lead, rows, n)
        self.out3.copy_(torch.randn((lead, rows, n), device="cuda", generator=gen))
        self.initial = self.out3.clone()

    def check_guards(self) -> None:
        assert bool((self.buf[~self.inner] == SENTINEL).all()), "kernel wrote outside the output (guard band changed)"


def _check(out: torch.Tensor, initial: torch.Tensor, ref: torch.Tensor, ref_bf16: torch.Tensor = None) -> None:
    assert not out.isnan().any() and not out.isinf().any()
    added = out - initial
    assert calc_diff(out, initial + ref) < 1e-5
    assert calc_diff(added, ref) < 1e-5, calc_diff(added, ref)
    # Every element received its (single) contribution: no tile missing or added twice.
    tol = 1e-3 * float(ref.abs().max()) + 1e-6
    assert float((added - ref).abs().max()) <= tol
    if ref_bf16 is not None:
        assert calc_diff(added, ref_bf16) < 1e-3


def run_dense(m: int, n: int, k: int, seed: int, sa_form: str = "rows", sb_form: str = "rows",
              check_bf16: bool = True, pad: int = 0):
    torch.backends.cuda.matmul.allow_tf32 = False
    gen = torch.Generator(device="cuda").manual_seed(seed)
    a8, sa, a_deq, a = _quant(m, k, gen)
    b8, sb, b_deq, b = _quant(n, k, gen)
    forms = {"rows": lambda s: s, "transposed": lambda s: s.t().contiguous(),
             "col_major": lambda s: deep_gemm.get_col_major_tma_aligned_tensor(s)}
    g = GuardedF32(1, m, n, gen, pad=pad)
    out = g.out3[0]
    deep_gemm.wgrad_gemm_fp8_fp8_fp32_nt((a8, forms[sa_form](sa)), (b8, forms[sb_form](sb)), out)
    torch.cuda.synchronize()
    ref = a_deq @ b_deq.t()
    _check(out, g.initial[0], ref, a.float() @ b.float().t() if check_bf16 else None)
    g.check_guards()
    return (a8, sa), (b8, sb), g


# The bench shapes (m, n) x k of the issue, and ragged ones.
BENCH_MN = [(7168, 2112), (1536, 24576), (512, 32768), (16384, 7168), (7168, 4096), (2048, 7168)]


@pytest.mark.parametrize("mn", BENCH_MN)
@pytest.mark.parametrize("k", [4096, 8192])
def test_wgrad_bench_shapes(mn, k):
    run_dense(mn[0], mn[1], k, seed=hash((mn, k)) % 1000)


@pytest.mark.parametrize("m,n,k", [(1, 1, 128), (1, 7168, 4096), (65, 100, 208), (129, 4100, 16), (300, 7, 4000),
                                   (1000, 1000, 1008), (64, 16, 128), (4096, 2112, 130 * 16)])
def test_wgrad_ragged(m, n, k):
    run_dense(m, n, k, seed=m + n + k)


@pytest.mark.parametrize("sa_form,sb_form", [("transposed", "transposed"), ("col_major", "rows"),
                                             ("rows", "transposed"), ("transposed", "col_major")])
def test_wgrad_scale_layouts(sa_form, sb_form):
    run_dense(512, 1024, 1536, seed=7, sa_form=sa_form, sb_form=sb_form)


def test_wgrad_unaligned_transposed_scales_and_padded_out():
    # m = 130: a transposed [kb, 130] SA has a row stride of 130 floats, not 16-byte aligned: copied, still right.
    # The output rows are padded (a strided view), so the kernel adds into it directly.
    run_dense(130, 250, 512, seed=11, sa_form="transposed", sb_form="transposed", pad=6)


def test_wgrad_k_not_multiple_of_16_with_padded_rows():
    # k = 100: allowed when A and B rows are 16-byte aligned views (the TMA boxes stop at k).
    torch.backends.cuda.matmul.allow_tf32 = False
    gen = torch.Generator(device="cuda").manual_seed(3)
    m, n, k = 96, 200, 100
    a8, sa, a_deq, _ = _quant(m, k, gen)
    b8, sb, b_deq, _ = _quant(n, k, gen)
    a_pad = torch.zeros((m, 112), device="cuda", dtype=torch.float8_e4m3fn)
    b_pad = torch.zeros((n, 112), device="cuda", dtype=torch.float8_e4m3fn)
    a_pad[:, :k] = a8
    b_pad[:, :k] = b8
    # Poison the padding: the kernel must not read past k.
    a_pad.view(torch.uint8)[:, k:] = 0x7E
    b_pad.view(torch.uint8)[:, k:] = 0x7E
    out = torch.randn((m, n), device="cuda", generator=gen)
    initial = out.clone()
    deep_gemm.wgrad_gemm_fp8_fp8_fp32_nt((a_pad[:, :k], sa), (b_pad[:, :k], sb), out)
    torch.cuda.synchronize()
    _check(out, initial, a_deq @ b_deq.t())


def test_wgrad_k_not_multiple_of_16_contiguous_is_refused():
    a = torch.zeros((64, 100), device="cuda", dtype=torch.float8_e4m3fn)
    b = torch.zeros((64, 100), device="cuda", dtype=torch.float8_e4m3fn)
    s = torch.ones((64, 1), device="cuda")
    out = torch.zeros((64, 64), device="cuda")
    with pytest.raises(ValueError, match="lhs\\[0\\] \\(A\\)'s row stride"):
        deep_gemm.wgrad_gemm_fp8_fp8_fp32_nt((a, s), (b, s), out)


def test_wgrad_k_zero_leaves_out_unchanged():
    a = torch.empty((64, 0), device="cuda", dtype=torch.float8_e4m3fn)
    b = torch.empty((32, 0), device="cuda", dtype=torch.float8_e4m3fn)
    out = torch.randn((64, 32), device="cuda")
    before = out.clone()
    deep_gemm.wgrad_gemm_fp8_fp8_fp32_nt((a, torch.empty((64, 0), device="cuda")),
                                         (b, torch.empty((32, 0), device="cuda")), out)
    torch.cuda.synchronize()
    assert torch.equal(out, before)


def test_wgrad_accumulates_and_is_deterministic():
    lhs, rhs, g = run_dense(1024, 2048, 4096, seed=5)
    out = g.out3[0]
    first = out.clone()
    # The same call from the same starting value gives bitwise the same result.
    out.copy_(g.initial[0])
    deep_gemm.wgrad_gemm_fp8_fp8_fp32_nt(lhs, rhs, out)
    torch.cuda.synchronize()
    assert torch.equal(out, first)
    # A second call adds the product again.
    deep_gemm.wgrad_gemm_fp8_fp8_fp32_nt(lhs, rhs, out)
    torch.cuda.synchronize()
    assert calc_diff(out - first, first - g.initial[0]) < 1e-6


# ---------------------------------------------------------------- k-grouped

def make_k_grouped(m: int, n: int, ks, seed: int):
    """Flat A / B, stacked transposed scales, the FP32 reference [G, m, n] and the BF16 one."""
    return k_grouped_inputs(m, n, ks, torch.Generator(device="cuda").manual_seed(seed), "cuda")


def run_k_grouped(m: int, n: int, ks, seed: int, check_bf16: bool = True):
    torch.backends.cuda.matmul.allow_tf32 = False
    lhs, rhs, ref, ref_bf16 = make_k_grouped(m, n, ks, seed)
    gen = torch.Generator(device="cuda").manual_seed(seed + 1)
    g = GuardedF32(len(ks), m, n, gen)
    deep_gemm.k_grouped_wgrad_gemm_fp8_fp8_fp32_nt(lhs, rhs, g.out3, list(ks))
    torch.cuda.synchronize()
    _check(g.out3, g.initial, ref, ref_bf16 if check_bf16 else None)
    for i, k in enumerate(ks):
        if k == 0:
            assert torch.equal(g.out3[i], g.initial[i]), f"empty group {i} was written"
    g.check_guards()
    return lhs, rhs, g


def _ks(num_groups: int, base: int, spread: int, rng: random.Random):
    return [base + rng.randint(-spread // 16, spread // 16) * 16 for _ in range(num_groups)]


@pytest.mark.parametrize("groups", [4, 8])
@pytest.mark.parametrize("mn", [(7168, 4096), (2048, 7168)])
@pytest.mark.parametrize("base", [4096, 8192])
def test_k_grouped_bench_shapes(groups, mn, base):
    rng = random.Random(hash((groups, mn, base)))
    run_k_grouped(mn[0], mn[1], _ks(groups, base, 128, rng), seed=groups + base)


@pytest.mark.parametrize("groups", [16, 64])
def test_k_grouped_small_groups(groups):
    rng = random.Random(groups)
    run_k_grouped(2048, 1536, _ks(groups, 512, 256, rng), seed=groups)


@pytest.mark.parametrize("ks", [[0, 256, 0, 384], [0], [0, 0], [16, 0, 48, 4000, 128, 0, 1008],
                                [128] * 100, [rng_k * 16 for rng_k in range(1, 130)]])
def test_k_grouped_empty_and_many_groups(ks):
    # 100 and 129 groups take two launches (96 groups per launch).
    run_k_grouped(192, 272, ks, seed=len(ks))


@pytest.mark.parametrize("m,n", [(1, 1), (65, 100), (130, 7), (300, 4100)])
def test_k_grouped_ragged_mn(m, n):
    run_k_grouped(m, n, [256, 16, 1000 // 16 * 16, 2048], seed=m * n)


def test_k_grouped_cuda_graph_replays_by_value():
    lhs, rhs, g = run_k_grouped(512, 768, [1024, 0, 512, 2048], seed=3)
    eager = g.out3.clone()
    ks = [1024, 0, 512, 2048]
    g.out3.copy_(g.initial)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
        deep_gemm.k_grouped_wgrad_gemm_fp8_fp8_fp32_nt(lhs, rhs, g.out3, ks)
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    for _ in range(2):
        g.out3.copy_(g.initial)
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(g.out3, eager)
    g.check_guards()


def test_dense_cuda_graph():
    lhs, rhs, g = run_dense(640, 896, 1024, seed=9)
    eager = g.out3[0].clone()
    out = g.out3[0]
    out.copy_(g.initial[0])
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
        deep_gemm.wgrad_gemm_fp8_fp8_fp32_nt(lhs, rhs, out)
    torch.cuda.current_stream().wait_stream(stream)
    out.copy_(g.initial[0])
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, eager)


def test_k_grouped_fresh_seed():
    seed = random.SystemRandom().randrange(1 << 30)
    rng = random.Random(seed)
    ks = [rng.choice([0, 16, 128, 512, 1040, 2048]) for _ in range(rng.randint(1, 12))]
    m, n = rng.randint(1, 700), rng.randint(1, 700)
    print(f"fresh seed {seed}: m={m} n={n} ks={ks}")
    run_k_grouped(m, n, ks, seed=seed)


def test_wgrad_fresh_seed():
    seed = random.SystemRandom().randrange(1 << 30)
    rng = random.Random(seed)
    m, n, k = rng.randint(1, 3000), rng.randint(1, 3000), rng.randint(1, 200) * 16
    print(f"fresh seed {seed}: m={m} n={n} k={k}")
    run_dense(m, n, k, seed=seed)


def test_k_grouped_no_host_sync():
    lhs, rhs, g = run_k_grouped(256, 512, [512, 256], seed=1)
    torch.cuda.set_sync_debug_mode("error")
    try:
        deep_gemm.k_grouped_wgrad_gemm_fp8_fp8_fp32_nt(lhs, rhs, g.out3, [512, 256])
        deep_gemm.wgrad_gemm_fp8_fp8_fp32_nt((lhs[0][:256 * 512].view(256, 512), lhs[1][:4].t()),
                                             (rhs[0][:512 * 512].view(512, 512), rhs[1][:4].t()), g.out3[0])
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()


def test_k_grouped_cuda_batch_sizes_refused():
    lhs, rhs, g = run_k_grouped(128, 256, [256, 128], seed=2)
    before = g.out3.clone()
    with pytest.raises(TypeError, match="batch_sizes must be a host list"):
        deep_gemm.k_grouped_wgrad_gemm_fp8_fp8_fp32_nt(lhs, rhs, g.out3, torch.tensor([256, 128], device="cuda"))
    assert torch.equal(g.out3, before)
