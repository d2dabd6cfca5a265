"""GPU correctness of `einsum` (the three BF16 expressions) and `fp8_einsum` on Hopper: DeepGEMM's test_einsum shapes,
ragged edges (one row, one head, a K walk whose splits end mid-batch, k not a multiple of 64 in the sum over
batches), guard bands around padded outputs, sliced operands, bitwise reruns and CUDA-graph replay. Skipped without
sm_90."""
import pytest
import torch

import deep_gemm
from deep_gemm.testing import calc_diff
from deep_gemm.utils import per_block_cast_to_fp8, per_token_cast_to_fp8
from gemm_cases import Guarded

pytestmark = pytest.mark.gpu


def _randn(shape, gen):
    return torch.randn(shape, device="cuda", generator=gen).to(torch.bfloat16)


def _sum_over_batches_ref(a, b, chunk=512):
    """sum_s a[s] @ b[s]^T in FP32, a few batches at a time (fits an 80 GB card at s = 8192)."""
    out = torch.zeros((a.shape[1], b.shape[1]), device="cuda")
    for s in range(0, a.shape[0], chunk):
        out += torch.bmm(a[s:s + chunk].float(), b[s:s + chunk].float().mT).sum(0)
    return out


@pytest.mark.parametrize("s", [1, 3, 129, 4096, 8192])
@pytest.mark.parametrize("mnk", [(128, 384, 128), (256, 256, 256), (384, 128, 384), (64, 64, 64), (200, 72, 136)],
                         ids=lambda v: "x".join(map(str, v)))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_bmk_bnk_mn(s, mnk, dtype):
    m, n, k = mnk
    gen = torch.Generator(device="cuda").manual_seed(s * 7 + m)
    a, b = _randn((s, m, k), gen), _randn((s, n, k), gen)
    g = Guarded((m, n), dtype, "cuda")
    ref = _sum_over_batches_ref(a, b)
    if dtype == torch.float32:
        init = torch.randn((m, n), device="cuda", generator=gen)
        g.set_initial(init)
        ref = ref + init
        deep_gemm.einsum("bmk,bnk->mn", a, b, g.out, c=g.out)
    else:
        deep_gemm.einsum("bmk,bnk->mn", a, b, g.out)
    torch.cuda.synchronize()
    g.check_guards()
    assert bool(torch.isfinite(g.out.float()).all())
    assert calc_diff(g.out.float(), ref) < 1e-5
    # Bitwise reproducible (DeepGEMM's atomics are not).
    first = g.bits()
    g.reset()
    deep_gemm.einsum("bmk,bnk->mn", a, b, g.out, c=g.out if dtype == torch.float32 else None)
    torch.cuda.synchronize()
    assert torch.equal(first, g.bits())


def test_k_split_partials_cover_every_element():
    """The K splits' partial sums cover every element of every split's plane (ragged m and n: tiles clipped on both
    sides; the buffer poisoned with NaN), and their buffer must be contiguous."""
    from deep_gemm.ops.einsum import _EINSUM
    from deep_gemm.runtime import call, k_split_count
    s, m, n, k = 4096, 200, 72, 136
    gen = torch.Generator(device="cuda").manual_seed(11)
    a, b = _randn((s, m, k), gen), _randn((s, n, k), gen)
    splits = k_split_count(m, n, s, k, a.device.index)
    assert splits > 1
    partial = torch.full((splits, m, n), float("nan"), device="cuda")
    call(_EINSUM, a, b, partial, 1)
    torch.cuda.synchronize()
    assert bool(torch.isfinite(partial).all())
    assert calc_diff(partial.sum(0), _sum_over_batches_ref(a, b)) < 1e-5
    with pytest.raises(ValueError, match="contiguous"):
        call(_EINSUM, a, b, torch.empty((splits, m, n + 4), device="cuda")[..., :n], 1)


# The sum over batches in one launch whose clusters cut the (batch, K block) walk (forced here; the heuristic's own
# picks run in test_bmk_bnk_mn at s = 129): FP32 d written or accumulated, ragged m / n / k, more splits than K blocks
# (s = 1, k = 64), bitwise reruns.
@pytest.mark.parametrize("s,mnk", [(129, (128, 384, 128)), (129, (256, 256, 256)), (3, (200, 72, 136)),
                                   (1, (64, 64, 64)), (129, (384, 128, 384))], ids=lambda v: str(v))
@pytest.mark.parametrize("splits", [2, 8])
@pytest.mark.parametrize("accumulate", [False, True])
def test_bmk_bnk_mn_in_clusters(s, mnk, splits, accumulate):
    from deep_gemm.heuristics.sm90_bf16 import build_bf16_config
    from deep_gemm.testing import forced_config
    m, n, k = mnk
    gen = torch.Generator(device="cuda").manual_seed(s + m + splits)
    a, b = _randn((s, m, k), gen), _randn((s, n, k), gen)
    g = Guarded((m, n), torch.float32, "cuda")
    ref = _sum_over_batches_ref(a, b)
    init = torch.randn((m, n), device="cuda", generator=gen)
    if accumulate:
        g.set_initial(init)
        ref = ref + init
    config = build_bf16_config(m, n, 128, 128 if n >= 128 else 64, deep_gemm.get_num_sms(), 4,
                               cluster_k_splits=splits)
    with forced_config(config):
        deep_gemm.einsum("bmk,bnk->mn", a, b, g.out, g.out if accumulate else None)
        torch.cuda.synchronize()
        g.check_guards()
        assert calc_diff(g.out, ref) < 1e-5
        first = g.bits()
        g.reset()
        deep_gemm.einsum("bmk,bnk->mn", a, b, g.out, g.out if accumulate else None)
        torch.cuda.synchronize()
        assert torch.equal(first, g.bits()), "not bitwise reproducible"


def test_bmk_bnk_mn_other_c_and_graph():
    gen = torch.Generator(device="cuda").manual_seed(5)
    a, b = _randn((129, 128, 128), gen), _randn((129, 384, 128), gen)
    c = torch.randn((128, 384), device="cuda", generator=gen)
    d = torch.empty_like(c)
    deep_gemm.einsum("bmk,bnk->mn", a, b, d, c=c)
    ref = c + _sum_over_batches_ref(a, b)
    assert calc_diff(d, ref) < 1e-5
    # Captured in a CUDA graph (the partial sums' buffer comes from the graph's pool) and replayed on new inputs.
    d2 = torch.empty_like(c)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        deep_gemm.einsum("bmk,bnk->mn", a, b, d2)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        deep_gemm.einsum("bmk,bnk->mn", a, b, d2)
    a.copy_(_randn(a.shape, gen))
    graph.replay()
    torch.cuda.synchronize()
    assert calc_diff(d2, _sum_over_batches_ref(a, b)) < 1e-5


def _heads_case(expr, b_, h, r, d, gen):
    """Operands as DeepGEMM's test builds them: x contiguous, y a slice [h, d, r] of a [h, d, r + 128] tensor."""
    x = _randn((b_, h, r if expr == "bhr,hdr->bhd" else d), gen)
    y = _randn((h, d, r + 128), gen)[:, :, :r]
    out_cols = d if expr == "bhr,hdr->bhd" else r
    return x, y, out_cols


DG_HEAD_SHAPES = [(128, 512, 128), (8, 4096, 1024)]   # DeepGEMM's test_einsum (h, r, d)
EDGE_HEAD_SHAPES = [(1, 64, 64), (3, 192, 128), (5, 128, 200)]


@pytest.mark.parametrize("expr", ["bhr,hdr->bhd", "bhd,hdr->bhr"])
@pytest.mark.parametrize("hrd", DG_HEAD_SHAPES + EDGE_HEAD_SHAPES, ids=lambda v: "x".join(map(str, v)))
@pytest.mark.parametrize("b_", [1, 4, 32, 128, 4096, 8192])
def test_per_head(expr, hrd, b_):
    h, r, d = hrd
    if expr == "bhd,hdr->bhr":
        r, d = (r, d) if d % 64 == 0 else (d, r)   # its contracted dimension is d: a multiple of 64
    gen = torch.Generator(device="cuda").manual_seed(b_ * 31 + h)
    x, y, out_cols = _heads_case(expr, b_, h, r, d, gen)
    g = Guarded((b_, h, out_cols), torch.bfloat16, "cuda")   # head rows padded: d's strides are not packed
    deep_gemm.einsum(expr, x, y, g.out)
    torch.cuda.synchronize()
    g.check_guards()
    assert calc_diff(g.out.float(), torch.einsum(expr, x.float(), y.float())) < 1e-5
    if hrd in DG_HEAD_SHAPES:
        # DeepGEMM's check: against PyTorch's BF16 einsum, as good as bitwise (both round one FP32 sum per element).
        assert calc_diff(g.out, torch.einsum(expr, x, y)) < 1e-10
    first = g.bits()
    g.reset()
    deep_gemm.einsum(expr, x, y, g.out)
    torch.cuda.synchronize()
    assert torch.equal(first, g.bits())


# A shared by each head's pairs of N blocks over 2-CTA clusters (forced: the heuristic does not pick it yet): the
# reference, and the unshared kernel's result bitwise. Ragged head rows (100 of a 128-row tile) included.
HEAD_MULTICAST = [("bhr,hdr->bhd", 512, (8, 1024, 512), 128), ("bhd,hdr->bhr", 512, (8, 512, 256), 128),
                  ("bhr,hdr->bhd", 100, (16, 256, 128), 64), ("bhd,hdr->bhr", 300, (4, 256, 192), 64)]


@pytest.mark.parametrize("expr,b_,hrd,block_n", HEAD_MULTICAST)
def test_per_head_a_multicast(expr, b_, hrd, block_n):
    from deep_gemm.heuristics import KernelType
    from deep_gemm.heuristics.sm90_bf16 import build_bf16_config
    from deep_gemm.testing import forced_config
    h, r, d = hrd
    gen = torch.Generator(device="cuda").manual_seed(b_ + h)
    x, y, out_cols = _heads_case(expr, b_, h, r, d, gen)
    outs = []
    for multicast in (1, 2):
        config = build_bf16_config(b_, out_cols, 128, block_n, deep_gemm.get_num_sms(), 2, groups=h,
                                   num_multicast=multicast, kind=KernelType.BATCHED)
        g = Guarded((b_, h, out_cols), torch.bfloat16, "cuda")
        with forced_config(config):
            deep_gemm.einsum(expr, x, y, g.out)
        torch.cuda.synchronize()
        g.check_guards()
        assert calc_diff(g.out.float(), torch.einsum(expr, x.float(), y.float())) < 1e-5, (expr, multicast)
        outs.append(g.bits())
    assert torch.equal(outs[0], outs[1]), "A multicast changed the result"


def test_per_head_refusals():
    gen = torch.Generator(device="cuda").manual_seed(1)
    x = _randn((4, 2, 100), gen)
    y = _randn((2, 64, 100), gen)
    with pytest.raises(ValueError, match="multiple of 64"):
        deep_gemm.einsum("bhr,hdr->bhd", x, y, torch.empty((4, 2, 64), device="cuda", dtype=torch.bfloat16))
    x = _randn((2, 4, 128), gen).transpose(0, 1)   # heads not side by side
    with pytest.raises(ValueError, match="side by side"):
        deep_gemm.einsum("bhr,hdr->bhd", x, _randn((2, 64, 128), gen),
                         torch.empty((4, 2, 64), device="cuda", dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="accumulator"):
        d = torch.empty((4, 2, 64), device="cuda", dtype=torch.bfloat16)
        deep_gemm.einsum("bhr,hdr->bhd", _randn((4, 2, 128), gen), _randn((2, 64, 128), gen), d, c=d)


def test_per_head_cublaslt_path_matches():
    gen = torch.Generator(device="cuda").manual_seed(2)
    x, y = _randn((32, 8, 512), gen), _randn((8, 128, 512), gen)
    z1 = torch.empty((32, 8, 128), device="cuda", dtype=torch.bfloat16)
    z2 = torch.empty_like(z1)
    deep_gemm.einsum("bhr,hdr->bhd", x, y, z1)
    deep_gemm.einsum("bhr,hdr->bhd", x, y, z2, use_cublaslt=True)
    assert calc_diff(z1.float(), z2.float()) < 1e-5


@pytest.mark.parametrize("b_", [1, 4, 32, 128, 4096])
def test_fp8_bhr_hdr_bhd(b_):
    h, r, d = 8, 4096, 1024
    gen = torch.Generator(device="cuda").manual_seed(b_)
    x = torch.randn((b_, h, r), device="cuda", generator=gen).to(torch.bfloat16)
    y = torch.randn((h, d, r), device="cuda", generator=gen).to(torch.bfloat16)
    xq, xs = per_token_cast_to_fp8(x.view(-1, r), use_ue8m0=True)
    xq, xs = xq.view(b_, h, r), xs.view(b_, h, r // 128)
    yq = torch.empty_like(y, dtype=torch.float8_e4m3fn)
    ys = torch.empty((h, d // 128, r // 128), device="cuda")
    for i in range(h):
        yq[i], ys[i] = per_block_cast_to_fp8(y[i], use_ue8m0=True)
    z = torch.empty((b_, h, d), device="cuda", dtype=torch.bfloat16)
    deep_gemm.fp8_einsum("bhr,hdr->bhd", (xq, xs), (yq, ys), z)
    ref = torch.einsum("bhr,hdr->bhd", x.float(), y.float())
    assert calc_diff(z.float(), ref) < 1e-3
