"""GPU correctness of stream-K (the last partial wave split along K; TileScheduler in common/scheduler.cuh): shapes
whose launch splits (checked against the host mirror of the device's decision), the result against the FP32
reference and against the same GEMM computed whole (DG_STREAM_K=0), bitwise reruns, guard bands, CUDA-graph replay
and two streams at once (each has its own workspace). Skipped without an sm_90 device."""
import os

import pytest
import torch

import deep_gemm
from deep_gemm import runtime
from deep_gemm.heuristics import GemmProblem, KernelType, get_config
from deep_gemm.heuristics.common import ceil_div
from deep_gemm.heuristics.sm90 import stream_k_capable, stream_k_split
from deep_gemm.testing import calc_diff
from gemm_cases import contiguous_inputs
from test_gemm_gpu import GuardedOut, make_inputs

pytestmark = pytest.mark.gpu

# m, n, k: 2.67 waves at 128x192 (tail 88 tiles), 31 waves + 4 tiles, ragged m / k, odd n (aligned temporary).
DENSE = [(4096, 2112, 7168), (4096, 24576, 1536), (4200, 2112, 2048), (5000, 2111, 1000), (4096, 2112, 7000)]
# Contiguous: 5 experts of <= 384 rows (padding rows inside the 128-row segments), n = 7168, k = 2048.
CONTIGUOUS_SIZES = [384, 300, 384, 257, 384]


def _num_sms() -> int:
    return torch.cuda.get_device_properties(0).multi_processor_count


def _splits(m, n, k, kind=KernelType.NORMAL, groups=1) -> bool:
    config = get_config(GemmProblem(m, n, k, _num_sms(), "sm_90a", kind, groups))
    tiles = ceil_div(m, config.block_m) * ceil_div(n, config.block_n)
    return stream_k_capable(config, kind) and \
        stream_k_split(tiles, ceil_div(k, 128), _num_sms(), config.num_stages) is not None


class stream_k_off:
    """DG_STREAM_K=0 for the plans built inside (plans are dropped on entry and exit)."""

    def __enter__(self):
        os.environ["DG_STREAM_K"] = "0"
        runtime.clear_plans()

    def __exit__(self, *exc):
        os.environ.pop("DG_STREAM_K", None)
        runtime.clear_plans()


@pytest.mark.parametrize("m,n,k", DENSE)
def test_dense_split_matches_reference_and_whole_tiles(m, n, k):
    assert _splits(m, n, k), "the shape no longer splits: pick another one"
    torch.backends.cuda.matmul.allow_tf32 = False
    lhs, rhs, ref, ref_bf16 = make_inputs(m, n, k, seed=m + n + k)
    g = GuardedOut(m, n)
    deep_gemm.gemm_fp8_fp8_bf16_nt(lhs, rhs, g.out)
    torch.cuda.synchronize()
    g.check()
    assert calc_diff(g.out, ref) < 1e-5 and calc_diff(g.out, ref_bf16) < 1e-3
    split = g.out.clone()
    for _ in range(3):  # counters are left zero: later launches split the same way
        deep_gemm.gemm_fp8_fp8_bf16_nt(lhs, rhs, g.out)
        torch.cuda.synchronize()
        assert torch.equal(split.view(torch.int16), g.out.view(torch.int16)), "rerun is not bitwise identical"
    with stream_k_off():
        whole = GuardedOut(m, n)
        deep_gemm.gemm_fp8_fp8_bf16_nt(lhs, rhs, whole.out)
        torch.cuda.synchronize()
    # Only the FP32 summation order of the tail tiles differs.
    assert calc_diff(split, whole.out) < 1e-7


def test_contiguous_split_matches_reference():
    n, k = 7168, 2048
    rows = sum((s + 127) // 128 * 128 for s in CONTIGUOUS_SIZES)
    assert _splits(rows, n, k, KernelType.M_GROUPED_CONTIGUOUS, len(CONTIGUOUS_SIZES))
    gen = torch.Generator(device="cuda").manual_seed(7)
    lhs, rhs, m_indices, ref, ref_bf16 = contiguous_inputs(CONTIGUOUS_SIZES, n, k, gen, "cuda", 128)
    out = torch.full((rows, n), float("nan"), dtype=torch.bfloat16, device="cuda")
    deep_gemm.m_grouped_gemm_fp8_fp8_bf16_nt_contiguous(lhs, rhs, out, m_indices)
    torch.cuda.synchronize()
    assert calc_diff(out, ref) < 1e-5
    assert bool((out[m_indices < 0] == 0).all()), "padding rows must be written as zeros"
    first = out.clone()
    deep_gemm.m_grouped_gemm_fp8_fp8_bf16_nt_contiguous(lhs, rhs, out, m_indices)
    torch.cuda.synchronize()
    assert torch.equal(first.view(torch.int16), out.view(torch.int16))


def test_cuda_graph_replay_matches_eager():
    m, n, k = 4200, 2112, 2048
    assert _splits(m, n, k)
    lhs, rhs, ref, _ = make_inputs(m, n, k, seed=11)
    eager = torch.empty((m, n), dtype=torch.bfloat16, device="cuda")
    deep_gemm.gemm_fp8_fp8_bf16_nt(lhs, rhs, eager)
    out = torch.empty_like(eager)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        deep_gemm.gemm_fp8_fp8_bf16_nt(lhs, rhs, out)
    for _ in range(3):
        out.zero_()
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(out.view(torch.int16), eager.view(torch.int16))
    lhs2, rhs2, ref2, _ = make_inputs(m, n, k, seed=12)
    lhs[0].copy_(lhs2[0]), lhs[1].copy_(lhs2[1]), rhs[0].copy_(rhs2[0]), rhs[1].copy_(rhs2[1])
    graph.replay()
    eager_on_side = torch.empty_like(eager)
    deep_gemm.gemm_fp8_fp8_bf16_nt(lhs, rhs, eager_on_side)  # an eager call right after, on the current stream
    torch.cuda.synchronize()
    assert calc_diff(out, ref2) < 1e-5 and torch.equal(out.view(torch.int16), eager_on_side.view(torch.int16))


def test_two_streams_at_once():
    """The same split GEMM on two streams concurrently: each stream has its own workspace and counters."""
    m, n, k = 4096, 2112, 7168
    inputs = [make_inputs(m, n, k, seed=s) for s in (21, 22)]
    expected = []
    for lhs, rhs, _, _ in inputs:
        o = torch.empty((m, n), dtype=torch.bfloat16, device="cuda")
        deep_gemm.gemm_fp8_fp8_bf16_nt(lhs, rhs, o)
        expected.append(o)
    torch.cuda.synchronize()
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    outs = [torch.empty((m, n), dtype=torch.bfloat16, device="cuda") for _ in streams]
    for _ in range(5):
        for stream, (lhs, rhs, _, _), o in zip(streams, inputs, outs):
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                deep_gemm.gemm_fp8_fp8_bf16_nt(lhs, rhs, o)
        torch.cuda.synchronize()
        for o, e in zip(outs, expected):
            assert torch.equal(o.view(torch.int16), e.view(torch.int16))
