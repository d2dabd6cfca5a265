"""GPU correctness of the batched GEMM (bmm_fp8_fp8_bf16_nt and the w8a8_block_fp8_bmm adapter) on Hopper: the MLA
shapes with ragged m, k from one K block to 7168, every per-token scale layout, every batch checked on its own,
guard bands, reruns bitwise equal, the C++ fast path with the caller's row-major scales, CUDA-graph replay.
Skipped without sm_90."""
import pytest
import torch

import deep_gemm
from deep_gemm import _C
from gemm_cases import BMM_SCALE_FORMS, bmm_inputs, build_bmm

pytestmark = pytest.mark.gpu


def _run(batches, m, n, k, sa_form="rows", seed=0):
    case = build_bmm(dict(batches=batches, m=m, n=n, k=k, sa_form=sa_form), "cuda", seed)
    case.run()
    case.check()
    first = case.guarded.bits()
    case.guarded.reset()
    case.run()
    torch.cuda.synchronize()
    assert torch.equal(first, case.guarded.bits()), f"{case.desc}: rerun is not bitwise identical"
    return case


# DeepSeek-V3's absorbed MLA products: (n, k) = (512, 128) (q_nope . W_UK) and (128, 512) (attn . W_UV), B = heads
# (128, or 16 per rank at TP 8); m = tokens, ragged.
@pytest.mark.parametrize("batches", [16, 128])
@pytest.mark.parametrize("n,k", [(512, 128), (128, 512)])
@pytest.mark.parametrize("m", [1, 3, 17, 64, 129])
def test_mla_shapes(batches, n, k, m):
    _run(batches, m, n, k, seed=batches * m + n)


@pytest.mark.parametrize("k", [16, 128, 256, 576, 2048, 7168])
def test_k_range(k):
    _run(3, 33, 256, k, seed=k)


@pytest.mark.parametrize("sa_form", BMM_SCALE_FORMS)
@pytest.mark.parametrize("m", [1, 100])
def test_scale_layouts(sa_form, m):
    _run(5, m, 1000, 576, sa_form, seed=m)


@pytest.mark.parametrize("batches,m,n,k", [(8, 1024, 4096, 4096), (4, 2048, 7168, 2048), (2, 4096, 512, 128)])
def test_large(batches, m, n, k):
    _run(batches, m, n, k, seed=m + k)


def test_adapter_allocates_and_matches():
    lhs, rhs, ref, _ = bmm_inputs(16, 4, 512, 128, torch.Generator(device="cuda").manual_seed(1), "cuda")
    z = deep_gemm.w8a8_block_fp8_bmm(lhs[0], rhs[0], lhs[1], rhs[1], block_size=[128, 128])
    assert z.shape == (16, 4, 512) and z.dtype == torch.bfloat16
    out = torch.empty_like(z)
    assert deep_gemm.w8a8_block_fp8_bmm(lhs[0], rhs[0], lhs[1], rhs[1], z=out) is out
    torch.cuda.synchronize()
    assert torch.equal(z, out)
    assert deep_gemm.calc_diff(z, ref) < 1e-5


def test_row_major_scales_take_the_fast_path():
    """The caller's row-major per-token scales are launched as they are: after the first call, `_C` launches
    the layout by itself (nothing converted, no Python)."""
    lhs, rhs, _, _ = bmm_inputs(128, 1, 512, 128, torch.Generator(device="cuda").manual_seed(2), "cuda")
    assert lhs[1].is_contiguous()
    out = torch.empty((128, 1, 512), dtype=torch.bfloat16, device="cuda")
    deep_gemm.bmm_fp8_fp8_bf16_nt(lhs, rhs, out)
    before = _C.stats()["fast"]
    for _ in range(3):
        deep_gemm.bmm_fp8_fp8_bf16_nt(lhs, rhs, out)
    assert _C.stats()["fast"] == before + 3


def test_cuda_graph_replay_with_new_inputs():
    gen = torch.Generator(device="cuda").manual_seed(3)
    lhs, rhs, _, _ = bmm_inputs(16, 17, 512, 128, gen, "cuda")
    out = torch.empty((16, 17, 512), dtype=torch.bfloat16, device="cuda")
    deep_gemm.bmm_fp8_fp8_bf16_nt(lhs, rhs, out)  # warm: compile and plan outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        deep_gemm.bmm_fp8_fp8_bf16_nt(lhs, rhs, out)
    new_lhs, new_rhs, new_ref, _ = bmm_inputs(16, 17, 512, 128, gen, "cuda")
    for dst, src in zip(lhs + rhs, new_lhs + new_rhs):
        dst.copy_(src)
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    assert deep_gemm.calc_diff(out, new_ref) < 1e-5


@pytest.mark.parametrize("batches,m,n,k", [(300, 1, 512, 128), (1, 5000, 4096, 512), (7, 65, 8, 16), (2, 129, 264, 7168)])
def test_batch_counts_and_ragged_edges(batches, m, n, k):
    _run(batches, m, n, k, seed=batches + m + n + k)


def test_broadcast_scales_with_zero_strides():
    """xs expanded from one row of scales per batch (stride 0 along m): read at the caller's strides as they are."""
    gen = torch.Generator(device="cuda").manual_seed(5)
    lhs, rhs, _, _ = bmm_inputs(4, 33, 256, 256, gen, "cuda")
    x8, xs = lhs
    xs_b = xs[:, :1].expand(-1, 33, -1)
    assert xs_b.stride(1) == 0
    out = torch.empty((4, 33, 256), dtype=torch.bfloat16, device="cuda")
    deep_gemm.bmm_fp8_fp8_bf16_nt((x8, xs_b), rhs, out)
    y8, ys = rhs
    from deep_gemm.testing import dequant_per_block, dequant_per_token
    xd = dequant_per_token(x8.reshape(-1, 256), xs_b.reshape(-1, 2)).view(4, 33, 256)
    yd = torch.stack([dequant_per_block(y8[b], ys[b]) for b in range(4)])
    torch.cuda.synchronize()
    assert deep_gemm.calc_diff(out, torch.bmm(xd, yd.transpose(1, 2))) < 1e-5


def test_empty_and_zero_k_calls():
    gen = torch.Generator(device="cuda").manual_seed(6)
    lhs, rhs, _, _ = bmm_inputs(3, 5, 64, 128, gen, "cuda")
    out = torch.full((3, 5, 64), float("nan"), dtype=torch.bfloat16, device="cuda")
    x0 = torch.empty((3, 5, 0), dtype=torch.float8_e4m3fn, device="cuda")
    y0 = torch.empty((3, 64, 0), dtype=torch.float8_e4m3fn, device="cuda")
    deep_gemm.bmm_fp8_fp8_bf16_nt((x0, lhs[1][:, :, :0]), (y0, rhs[1][:, :, :0]), out)  # k = 0: zeros
    torch.cuda.synchronize()
    assert bool((out == 0).all())
    empty = torch.empty((3, 0, 64), dtype=torch.bfloat16, device="cuda")
    deep_gemm.bmm_fp8_fp8_bf16_nt((lhs[0][:, :0], lhs[1][:, :0]), rhs, empty)  # m = 0: nothing to do
