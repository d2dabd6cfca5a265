"""GPU correctness of gemm_fp8_fp8_bf16_nt on Hopper (skipped without an sm_90 device)."""
import random

import pytest
import torch

import deep_gemm
from deep_gemm.testing import calc_diff, dequant_per_block, dequant_per_token
from gemm_cases import padded_rows

pytestmark = pytest.mark.gpu

DEEPSEEK_NK = [(2112, 7168), (24576, 1536), (32768, 512), (7168, 16384), (4096, 7168), (7168, 2048), (7168, 576)]
POISON = -1  # int16 pattern 0xFFFF = a BF16 NaN


def make_inputs(m: int, n: int, k: int, seed: int):
    g = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn((m, k), device="cuda", generator=g, dtype=torch.float32).to(torch.bfloat16)
    b = torch.randn((n, k), device="cuda", generator=g, dtype=torch.float32).to(torch.bfloat16)
    a_fp8, sa = deep_gemm.per_token_cast_to_fp8(a)
    b_fp8, sb = deep_gemm.per_block_cast_to_fp8(b)
    ref = dequant_per_token(a_fp8, sa) @ dequant_per_block(b_fp8, sb).t()
    ref_bf16 = a.float() @ b.float().t()
    return (padded_rows(a_fp8), sa), (padded_rows(b_fp8), sb), ref, ref_bf16


class GuardedOut:
    """An [m, n] BF16 output view inside a poisoned buffer with guard rows/columns on every side."""

    def __init__(self, m: int, n: int, guard: int = 8):
        self.stride = (n + 2 * guard + 7) // 8 * 8
        self.buf = torch.full((m + 2, self.stride), POISON, dtype=torch.int16, device="cuda")
        self.m, self.n, self.guard = m, n, guard
        self.out = self.buf.view(torch.bfloat16)[1:m + 1, guard:guard + n]

    def check(self) -> None:
        inner = torch.zeros_like(self.buf, dtype=torch.bool)
        inner[1:self.m + 1, self.guard:self.guard + self.n] = True
        outside = self.buf[~inner]
        assert bool((outside == POISON).all()), "kernel wrote outside the output (guard band changed)"
        assert bool(torch.isfinite(self.out.float()).all()), "output has NaN/Inf (unwritten or overflowed)"


def run_and_check(m: int, n: int, k: int, seed: int, stream=None):
    torch.backends.cuda.matmul.allow_tf32 = False
    lhs, rhs, ref, ref_bf16 = make_inputs(m, n, k, seed)
    g = GuardedOut(m, n)
    deep_gemm.gemm_fp8_fp8_bf16_nt(lhs, rhs, g.out)
    torch.cuda.synchronize()
    g.check()
    diff = calc_diff(g.out, ref)
    assert diff < 1e-5, f"m={m} n={n} k={k}: calc_diff vs dequantised FP32 = {diff:.3g}"
    diff_bf16 = calc_diff(g.out, ref_bf16)
    assert diff_bf16 < 1e-3, f"m={m} n={n} k={k}: calc_diff vs BF16 = {diff_bf16:.3g}"
    first = g.out.clone()
    deep_gemm.gemm_fp8_fp8_bf16_nt(lhs, rhs, g.out)
    torch.cuda.synchronize()
    assert torch.equal(first.view(torch.int16), g.out.view(torch.int16)), "rerun is not bitwise identical"
    return diff


@pytest.mark.parametrize("n,k", DEEPSEEK_NK)
@pytest.mark.parametrize("m", [1, 64, 128, 4096])
def test_deepseek_shapes(m, n, k):
    run_and_check(m, n, k, seed=m * 7 + n + k)


def _random_shapes(count: int, seed: int):
    rng = random.Random(seed)
    shapes = []
    for _ in range(count):
        m = int(round(2 ** rng.uniform(0, 13)))
        n = rng.choice([rng.randint(1, 512), rng.randint(1, 8192), 8 * rng.randint(1, 1024)])
        k = rng.choice([rng.randint(1, 600), 16 * rng.randint(1, 512), 128 * rng.randint(1, 40)])
        shapes.append((max(1, min(m, 8192)), n, k))
    return shapes


@pytest.mark.parametrize("m,n,k", _random_shapes(56, seed=2026))
def test_random_shapes(m, n, k):
    run_and_check(m, n, k, seed=m + 31 * n + 17 * k)


RAGGED = [(1, 1, 1), (1, 7, 100), (3, 129, 129), (65, 255, 576), (129, 136, 640), (257, 4095, 1000),
          (1000, 2111, 7168), (8191, 161, 130)]


@pytest.mark.parametrize("m,n,k", RAGGED)
def test_ragged_edges(m, n, k):
    run_and_check(m, n, k, seed=1)


def test_fresh_inputs_each_run():
    seed = random.SystemRandom().randrange(1 << 30)
    run_and_check(333, 2112, 7168, seed=seed)


def test_non_default_stream():
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        lhs, rhs, ref, _ = make_inputs(512, 1024, 1024, seed=5)
        out = torch.empty((512, 1024), dtype=torch.bfloat16, device="cuda")
        deep_gemm.gemm_fp8_fp8_bf16_nt(lhs, rhs, out)
    s.synchronize()
    assert calc_diff(out, ref) < 1e-5


def test_set_num_sms():
    total = deep_gemm.get_num_sms()
    try:
        deep_gemm.set_num_sms(64)
        assert deep_gemm.get_num_sms() == 64
        from deep_gemm.heuristics import GemmProblem, get_config
        assert get_config(GemmProblem(4096, 7168, 2048, deep_gemm.get_num_sms())).num_sms <= 64
        run_and_check(4096, 7168, 2048, seed=9)
        run_and_check(100, 2112, 576, seed=10)
    finally:
        deep_gemm.set_num_sms(total)


def test_row_major_and_col_major_sa_agree():
    lhs, rhs, ref, _ = make_inputs(300, 512, 768, seed=3)
    a, sa = lhs
    sa_col = deep_gemm.get_col_major_tma_aligned_tensor(sa)
    assert sa_col.stride(0) == 1
    assert deep_gemm.get_col_major_tma_aligned_tensor(sa_col) is sa_col
    out1 = torch.empty((300, 512), dtype=torch.bfloat16, device="cuda")
    out2 = torch.empty_like(out1)
    deep_gemm.gemm_fp8_fp8_bf16_nt((a, sa), rhs, out1)
    deep_gemm.gemm_fp8_fp8_bf16_nt((a, sa_col), rhs, out2)
    assert torch.equal(out1, out2)
    assert calc_diff(out1, ref) < 1e-5


def test_empty_m_and_zero_k():
    b = torch.zeros((256, 128), dtype=torch.float8_e4m3fn, device="cuda")
    sb = torch.ones((2, 1), device="cuda")
    out = torch.empty((0, 256), dtype=torch.bfloat16, device="cuda")
    deep_gemm.gemm_fp8_fp8_bf16_nt((torch.empty((0, 128), dtype=torch.float8_e4m3fn, device="cuda"),
                                    torch.empty((0, 1), device="cuda")), (b, sb), out)
    out = torch.full((4, 256), 7.0, dtype=torch.bfloat16, device="cuda")
    deep_gemm.gemm_fp8_fp8_bf16_nt((torch.empty((4, 0), dtype=torch.float8_e4m3fn, device="cuda"),
                                    torch.empty((4, 0), device="cuda")),
                                   (torch.empty((256, 0), dtype=torch.float8_e4m3fn, device="cuda"),
                                    torch.empty((2, 0), device="cuda")), out)
    assert bool((out == 0).all())


def test_new_m_reuses_kernels():
    """Different m with the same (n, k) and the same config share one compiled kernel."""
    from deep_gemm import jit
    run_and_check(4096, 4096, 7168, seed=11)
    before = len(jit._loaded)
    run_and_check(4000, 4096, 7168, seed=12)
    run_and_check(3900, 4096, 7168, seed=13)
    from deep_gemm.heuristics import GemmProblem, get_config
    configs = {get_config(GemmProblem(m, 4096, 7168, deep_gemm.get_num_sms())) for m in (4096, 4000, 3900)}
    assert len(jit._loaded) - before <= len(configs) - 1


def test_cached_layout_still_checks_pointers():
    """The second call with a known layout takes the fast path; pointer problems must still be refused."""
    lhs, rhs, ref, _ = make_inputs(256, 512, 512, seed=21)
    store = torch.zeros((256 * 512 + 8,), dtype=torch.bfloat16, device="cuda")
    out = store[:256 * 512].view(256, 512)
    deep_gemm.gemm_fp8_fp8_bf16_nt(lhs, rhs, out)
    assert calc_diff(out, ref) < 1e-5
    misaligned = store[1:256 * 512 + 1].view(256, 512)  # same shape and strides, pointer off by 2 bytes
    with pytest.raises(ValueError, match="out"):
        deep_gemm.gemm_fp8_fp8_bf16_nt(lhs, rhs, misaligned)
    a, sa = lhs
    alias = torch.empty((256 * 512,), dtype=torch.bfloat16, device="cuda")
    a_alias = alias.view(torch.float8_e4m3fn)[:256 * 512].view(256, 512)[:, :a.shape[1]]
    a_alias.copy_(a)
    deep_gemm.gemm_fp8_fp8_bf16_nt((a_alias, sa), rhs, torch.empty_like(out))  # fine: no aliasing
    before = alias.clone()
    with pytest.raises(ValueError, match="overlaps"):
        deep_gemm.gemm_fp8_fp8_bf16_nt((a_alias, sa), rhs, alias.view(256, 512))
    assert torch.equal(before.view(torch.int16), alias.view(torch.int16)), "a refused call wrote to out"


def test_cuda_graph_capture_and_replay():
    """Captured once, replayed on new inputs written into the same buffers: equal to eager results."""
    m, n, k = 300, 2112, 1024
    (a, sa), (b, sb), _, _ = make_inputs(m, n, k, seed=31)
    sa = deep_gemm.get_col_major_tma_aligned_tensor(sa)
    out = torch.empty((m, n), dtype=torch.bfloat16, device="cuda")
    deep_gemm.gemm_fp8_fp8_bf16_nt((a, sa), (b, sb), out)  # compile and warm up outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        deep_gemm.gemm_fp8_fp8_bf16_nt((a, sa), (b, sb), out)
    for seed in (32, 33):
        (a2, sa2), (b2, sb2), ref, _ = make_inputs(m, n, k, seed=seed)
        a.copy_(a2), sa.copy_(sa2), b.copy_(b2), sb.copy_(sb2)
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        eager = torch.empty_like(out)
        deep_gemm.gemm_fp8_fp8_bf16_nt((a, sa), (b, sb), eager)
        assert torch.equal(out.view(torch.int16), eager.view(torch.int16))
        assert calc_diff(out, ref) < 1e-5


def test_no_host_sync_in_a_warm_call():
    (a, sa), (b, sb), _, _ = make_inputs(256, 1024, 512, seed=41)
    out = torch.empty((256, 1024), dtype=torch.bfloat16, device="cuda")
    deep_gemm.gemm_fp8_fp8_bf16_nt((a, sa), (b, sb), out)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        deep_gemm.gemm_fp8_fp8_bf16_nt((a, sa), (b, sb), out)  # row-major SA: includes the layout conversion
    finally:
        torch.cuda.set_sync_debug_mode("default")


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs a second GPU")
def test_tensors_on_second_device():
    """Tensors on cuda:1 while cuda:0 is current: runs on cuda:1, on cuda:1's current stream."""
    torch.cuda.set_device(0)
    with torch.cuda.device(1):
        lhs, rhs, ref, _ = make_inputs(1000, 2112, 7168, seed=51)
        stream = torch.cuda.Stream(device=1)
    assert lhs[0].device == torch.device("cuda", 1)
    out = torch.empty((1000, 2112), dtype=torch.bfloat16, device="cuda:1")
    with torch.cuda.stream(stream):
        deep_gemm.gemm_fp8_fp8_bf16_nt(lhs, rhs, out)
    stream.synchronize()
    assert torch.cuda.current_device() == 0
    assert calc_diff(out, ref) < 1e-5
    out_switch = torch.full_like(out, float("nan"))
    deep_gemm.gemm_fp8_fp8_bf16_nt(lhs, rhs, out_switch)  # no stream context: the library switches devices
    torch.cuda.synchronize(1)
    assert torch.cuda.current_device() == 0
    assert torch.equal(out_switch.view(torch.int16), out.view(torch.int16))
    out0 = torch.empty((1000, 2112), dtype=torch.bfloat16, device="cuda:0")
    deep_gemm.gemm_fp8_fp8_bf16_nt(tuple(t.to("cuda:0") for t in lhs), tuple(t.to("cuda:0") for t in rhs), out0)
    torch.cuda.synchronize()
    assert torch.equal(out0.cpu().view(torch.int16), out.cpu().view(torch.int16))


def test_new_m_never_compiles(monkeypatch):
    """After the first call with an (n, k), no m needs a compile: the first call precompiled every variant."""
    from deep_gemm.jit import compiler
    monkeypatch.setenv("DG_JIT_PRECOMPILE", "1")
    n, k = 3080, 1664  # used by no other test, so this is the first sight
    run_and_check(200, n, k, seed=101)
    calls = []
    for cls in (compiler.NVRTCCompiler, compiler.NVCCCompiler):
        original = cls.compile

        def counting(self, *args, _original=original, **kwargs):
            calls.append(args)
            return _original(self, *args, **kwargs)
        monkeypatch.setattr(cls, "compile", counting)
    for m in (1, 64, 65, 128, 129, 700, 1537, 4096, 5000, 9001):
        run_and_check(m, n, k, seed=m)
    assert calls == [], f"{len(calls)} compiles after the first sight of (n, k)"


# Cluster K splits of the dense FP8 kernel (forced here; the heuristic picks them for few weight columns at m <= 32,
# heuristics/sm90.py decode_split, see test_decode_splits_picked): the split counts divide
# the K blocks; several tiles per cluster (1 x 2112 with 16-wide tiles), 2 M blocks, odd n, k not a multiple of 128,
# guard bands and bitwise reruns (run_and_check).
@pytest.mark.parametrize("m,n,k,block_m,block_n,splits", [
    (1, 2112, 7168, 64, 64, 4), (1, 2112, 7168, 64, 16, 8), (7, 2112, 7168, 64, 64, 7), (64, 576, 7168, 64, 64, 2),
    (100, 4096, 2048, 128, 128, 4), (33, 250, 1000, 64, 64, 8), (1, 256, 512, 64, 16, 4)])
def test_cluster_k_splits(m, n, k, block_m, block_n, splits):
    from deep_gemm.heuristics.sm90 import build_sm90_config
    from deep_gemm.testing import forced_config
    config = build_sm90_config(m, n, k, block_m, block_n, deep_gemm.get_num_sms(), cluster_k_splits=splits)
    with forced_config(config):
        run_and_check(m, n, k, seed=splits)


# Workspace K splits of the dense FP8 kernel (forced here; the heuristic's picks below): the last CTA of a tile adds
# the partial tiles up through the stream's workspace. Several tiles per CTA (7168 / 32 tiles x 2 > 132), 7 splits,
# odd n, k not a multiple of 128, m = 1 / 3 / 7 / 33 / 56; run_and_check's reference, guard bands and bitwise rerun
# (which also fails if a counter was left non-zero), and bitwise equal to cluster K splits of the same tile and
# count (the same sums in the same order).
@pytest.mark.parametrize("m,n,k,block_n,splits", [
    (1, 2112, 7168, 32, 2), (1, 2112, 7168, 64, 4), (7, 2112, 7168, 64, 7), (33, 4096, 7168, 64, 2),
    (56, 576, 7168, 16, 8), (3, 250, 1000, 64, 8), (1, 7168, 2048, 32, 2), (16, 256, 512, 16, 4)])
def test_workspace_k_splits(m, n, k, block_n, splits):
    from deep_gemm.heuristics.sm90 import build_sm90_config
    from deep_gemm.testing import forced_config
    sms = deep_gemm.get_num_sms()
    rows = (m + 7) // 8 * 8  # A boxes of the call's rows (one M block)
    lhs, rhs, _, _ = make_inputs(m, n, k, seed=splits)
    outs = []
    for config in (build_sm90_config(m, n, k, 64, block_n, sms, a_box_rows=rows, workspace_k_splits=splits),
                   build_sm90_config(m, n, k, 64, block_n, sms, a_box_rows=rows, cluster_k_splits=splits)):
        with forced_config(config):
            run_and_check(m, n, k, seed=splits)
            out = torch.empty((m, n), device="cuda", dtype=torch.bfloat16)
            deep_gemm.gemm_fp8_fp8_bf16_nt(lhs, rhs, out)
            outs.append(out)
    assert torch.equal(outs[0].view(torch.int16), outs[1].view(torch.int16))


def test_workspace_k_splits_in_graphs_and_streams():
    """Workspace K splits captured in two CUDA graphs (each with its own workspace) replayed at once on two streams,
    and eager calls on two streams at once: every result equal to the eager one on the default stream."""
    from deep_gemm.heuristics.sm90 import build_sm90_config
    from deep_gemm.testing import forced_config
    m, n, k = 4, 2112, 7168
    config = build_sm90_config(m, n, k, 64, 32, deep_gemm.get_num_sms(), a_box_rows=8, workspace_k_splits=2)
    inputs = [make_inputs(m, n, k, seed) for seed in (51, 52)]
    with forced_config(config):
        expected = []
        for lhs, rhs, ref, _ in inputs:
            out = torch.empty((m, n), device="cuda", dtype=torch.bfloat16)
            deep_gemm.gemm_fp8_fp8_bf16_nt(lhs, rhs, out)
            assert calc_diff(out, ref) < 1e-5
            expected.append(out)
        outs = [torch.empty((m, n), device="cuda", dtype=torch.bfloat16) for _ in inputs]
        graphs = [torch.cuda.CUDAGraph() for _ in inputs]
        for graph, (lhs, rhs, _, _), out in zip(graphs, inputs, outs):
            with torch.cuda.graph(graph):
                for _ in range(8):
                    deep_gemm.gemm_fp8_fp8_bf16_nt(lhs, rhs, out)
        streams = [torch.cuda.Stream() for _ in inputs]
        torch.cuda.synchronize()
        for _ in range(3):
            for out in outs:
                out.fill_(float("nan"))
            torch.cuda.synchronize()
            for graph, stream in zip(graphs, streams):
                with torch.cuda.stream(stream):
                    graph.replay()
            torch.cuda.synchronize()
            for out, want in zip(outs, expected):
                assert torch.equal(out.view(torch.int16), want.view(torch.int16))
        for _ in range(3):
            for (lhs, rhs, _, _), out, stream in zip(inputs, outs, streams):
                with torch.cuda.stream(stream):
                    for _ in range(8):
                        deep_gemm.gemm_fp8_fp8_bf16_nt(lhs, rhs, out)
            torch.cuda.synchronize()
            for out, want in zip(outs, expected):
                assert torch.equal(out.view(torch.int16), want.view(torch.int16))


# The heuristic's own cluster K splits (decode_split: m <= 32, few weight columns), checked through the picked plan
# (tests/heuristics/test_sm90.py checks the picks on the CPU): run_and_check's reference, guard bands, bitwise rerun.
@pytest.mark.parametrize("m,n,k", [(1, 576, 7168), (16, 576, 7168), (1, 256, 7168), (7, 576, 7168), (3, 200, 7168),
                                   (32, 576, 7168), (27, 256, 7168)])
def test_decode_splits_picked(m, n, k):
    from deep_gemm.heuristics.common import GemmProblem
    from deep_gemm.heuristics.sm90 import get_sm90_config
    config = get_sm90_config(GemmProblem(m, n, k, deep_gemm.get_num_sms()))
    assert config.cluster_k_splits > 1, config
    run_and_check(m, n, k, seed=m + n)


# Dense decode loading only m rows of A per stage (forced here; the heuristic's pick below 64 rows; the rest of the
# stage's A tile is stale and feeds only rows that are not written): the reference checks of run_and_check, and the
# result of the whole-box kernel, bitwise (the same sums in the same order).
@pytest.mark.parametrize("m,n,k,block_m,block_n", [
    (1, 2112, 7168, 64, 16), (7, 576, 1000, 64, 64), (20, 250, 7168, 64, 32), (33, 4096, 2048, 128, 128)])
def test_fewer_a_rows_per_stage(m, n, k, block_m, block_n):
    from deep_gemm.heuristics.common import a_rows_per_stage
    from deep_gemm.heuristics.sm90 import build_sm90_config
    from deep_gemm.testing import forced_config
    outs = []
    for a_box_rows in (0, a_rows_per_stage(m, block_m)):
        config = build_sm90_config(m, n, k, block_m, block_n, deep_gemm.get_num_sms(), a_box_rows=a_box_rows)
        with forced_config(config):
            run_and_check(m, n, k, seed=5)
            lhs, rhs, _, _ = make_inputs(m, n, k, 5)
            out = torch.empty((m, n), device="cuda", dtype=torch.bfloat16)
            deep_gemm.gemm_fp8_fp8_bf16_nt(lhs, rhs, out)
            outs.append(out)
    assert outs[1].shape == outs[0].shape and torch.equal(outs[0].view(torch.int16), outs[1].view(torch.int16))
