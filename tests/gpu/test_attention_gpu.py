"""GPU correctness of the attention-indexer ops on Hopper: `fp8_gemm_nt_skip_head_mid` at DeepGEMM test_attention's
shapes and ragged head splits, the skipped middles left untouched (tests/gemm_cases.py's builder and checker: the
dequantised FP32 and BF16 references, poisoned output and guard bands), bitwise reruns; `fp8_fp4_mqa_logits` against
an FP32 reference of the FP8 values: every head count and head dim, ragged query and key counts, empty ranges, ranges
at block edges, one-key contexts, the compressed and BF16 forms, exact -inf outside the ranges, bitwise reruns and a
CUDA graph. Skipped without sm_90."""
import pytest
import torch

import deep_gemm
from deep_gemm.testing import calc_diff
from gemm_cases import build_skip_head_mid, mqa_inputs, mqa_reference, paged_mqa_inputs, paged_mqa_reference

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("m", [1, 128, 4096])
@pytest.mark.parametrize("n,k", [(32768, 512), (8192, 512)])
def test_deepgemm_skip_head_mid_shapes(m, n, k):
    left, mid, right = 128, 64, 128   # DeepGEMM's test_attention
    case = build_skip_head_mid(dict(m=m, heads=n // (left + right), left=left, mid=mid, right=right, k=k),
                               torch.device("cuda"), m)
    case.run()
    case.check()
    first = case.guarded.bits()
    case.reset()
    case.run()
    case.check()
    assert torch.equal(first, case.guarded.bits()), "not bitwise reproducible"


@pytest.mark.parametrize("heads,left,mid,right,m,k", [(3, 48, 8, 16, 77, 1000), (5, 16, 0, 112, 300, 128),
                                                      (2, 64, 200, 64, 1, 7168), (17, 32, 24, 96, 129, 200)])
def test_ragged_head_splits(heads, left, mid, right, m, k):
    case = build_skip_head_mid(dict(m=m, heads=heads, left=left, mid=mid, right=right, k=k), torch.device("cuda"), 3)
    case.run()
    case.check()


def _mqa_inputs(seq_len, seq_len_kv, heads, head_dim, seed):
    return mqa_inputs(seq_len, seq_len_kv, heads, head_dim, torch.device("cuda"), seed)


@pytest.mark.parametrize("heads", [32, 64])
@pytest.mark.parametrize("head_dim", [32, 64, 128])
@pytest.mark.parametrize("seq_len,seq_len_kv", [(67, 300), (1, 1), (9, 1000)])
def test_mqa_logits_clean(heads, head_dim, seq_len, seq_len_kv):
    q, kv, kv_sf, weights, ks, ke = _mqa_inputs(seq_len, seq_len_kv, heads, head_dim, heads + head_dim + seq_len)
    ref, inside = mqa_reference(q, kv, kv_sf, weights, ks, ke)
    logits = deep_gemm.fp8_fp4_mqa_logits((q, None), (kv, kv_sf), weights, ks, ke, clean_logits=True)
    assert logits.shape == (seq_len, seq_len_kv) and logits.dtype == torch.float32
    assert logits.stride(0) % 256 == 0 and logits.stride(1) == 1
    assert torch.equal(logits == float("-inf"), ~inside), "-inf exactly outside the ranges"
    assert calc_diff(logits.masked_fill(~inside, 0), ref.masked_fill(~inside, 0)) < 1e-6
    again = deep_gemm.fp8_fp4_mqa_logits((q, None), (kv, kv_sf), weights, ks, ke, clean_logits=True)
    assert torch.equal(logits, again), "not bitwise reproducible"


@pytest.mark.parametrize("heads,head_dim", [(64, 128), (32, 64)])
def test_mqa_logits_compressed_and_bf16(heads, head_dim):
    seq_len, seq_len_kv = 130, 777
    q, kv, kv_sf, weights, ks, ke = _mqa_inputs(seq_len, seq_len_kv, heads, head_dim, 7)
    ref, inside = mqa_reference(q, kv, kv_sf, weights, ks, ke)
    width = int((ke - ks).max())
    for dtype in (torch.float32, torch.bfloat16):
        logits = deep_gemm.fp8_fp4_mqa_logits(q, (kv, kv_sf), weights, ks, ke, clean_logits=False,
                                              max_seqlen_k=width, logits_dtype=dtype)
        assert logits.shape == (seq_len, width) and logits.dtype == dtype
        cols = torch.arange(width, device="cuda")
        valid = cols[None, :] < (ke - ks)[:, None]
        # Column c of row i is key ks[i] + c.
        keys = (ks[:, None] + cols[None, :]).clamp(max=seq_len_kv - 1).long()
        expected = torch.gather(ref.masked_fill(~inside, 0), 1, keys).masked_fill(~valid, 0)
        got = logits.float().masked_fill(~valid, 0)
        assert calc_diff(got, expected) < (1e-5 if dtype == torch.bfloat16 else 1e-6), dtype
    unclean = deep_gemm.fp8_mqa_logits(q, (kv, kv_sf), weights, ks, ke, clean_logits=False)
    assert calc_diff(unclean.masked_fill(~inside, 0), ref.masked_fill(~inside, 0)) < 1e-6


@pytest.mark.parametrize("heads,head_dim", [(64, 32), (32, 128)])
def test_mqa_logits_range_checked_form(heads, head_dim):
    # The op pads its own logits and lets the kernel write every walked key; into a caller's tensor (logits_padded 0)
    # the kernel writes the keys in range only: the poison elsewhere survives.
    from deep_gemm.runtime import Op, call
    seq_len, seq_len_kv = 67, 300
    q, kv, kv_sf, weights, ks, ke = _mqa_inputs(seq_len, seq_len_kv, heads, head_dim, 21)
    ref, inside = mqa_reference(q, kv, kv_sf, weights, ks, ke)
    logits = torch.full((seq_len, seq_len_kv), 1234.5, device="cuda")
    call(int(Op.MQA_LOGITS), q, kv, kv_sf, weights, ks, ke, logits, 0, 0, 0)
    assert torch.all(logits[~inside] == 1234.5), "a key outside its query's range was written"
    assert calc_diff(logits.masked_fill(~inside, 0), ref.masked_fill(~inside, 0)) < 1e-6


def test_mqa_logits_cuda_graph():
    q, kv, kv_sf, weights, ks, ke = _mqa_inputs(40, 500, 64, 128, 11)
    ref, inside = mqa_reference(q, kv, kv_sf, weights, ks, ke)
    deep_gemm.fp8_fp4_mqa_logits(q, (kv, kv_sf), weights, ks, ke)  # compiled and planned before the capture
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        with torch.cuda.graph(graph):
            out = deep_gemm.fp8_fp4_mqa_logits(q, (kv, kv_sf), weights, ks, ke)
    # New inputs in place, then a replay.
    q2, kv2, kv_sf2, weights2, ks2, ke2 = _mqa_inputs(40, 500, 64, 128, 12)
    for dst, src in ((q, q2), (kv, kv2), (kv_sf, kv_sf2), (weights, weights2), (ks, ks2), (ke, ke2)):
        dst.copy_(src)
    graph.replay()
    torch.cuda.synchronize()
    ref2, inside2 = mqa_reference(q, kv, kv_sf, weights, ks, ke)
    assert torch.equal(out == float("-inf"), ~inside2)
    assert calc_diff(out.masked_fill(~inside2, 0), ref2.masked_fill(~inside2, 0)) < 1e-6


def test_mqa_logits_refusals():
    q, kv, kv_sf, weights, ks, ke = _mqa_inputs(4, 64, 64, 128, 1)
    with pytest.raises(ValueError, match="q"):
        deep_gemm.fp8_fp4_mqa_logits((q, torch.ones(4, 64, device="cuda")), (kv, kv_sf), weights, ks, ke)
    with pytest.raises(ValueError, match="weights"):
        deep_gemm.fp8_fp4_mqa_logits(q, (kv, kv_sf), weights.bfloat16(), ks, ke)
    with pytest.raises(ValueError, match="heads"):
        deep_gemm.fp8_fp4_mqa_logits(q[:, :16].contiguous(), (kv, kv_sf), weights[:, :16].contiguous(), ks, ke)
    with pytest.raises(ValueError, match="clean_logits"):
        deep_gemm.fp8_fp4_mqa_logits(q, (kv, kv_sf), weights, ks, ke, clean_logits=True, max_seqlen_k=8)
    with pytest.raises(ValueError, match="cu_seq_len_k_end"):
        deep_gemm.fp8_fp4_mqa_logits(q, (kv, kv_sf), weights, ks, ke[:3])


@pytest.mark.parametrize("heads", [32, 64])
@pytest.mark.parametrize("next_n", [1, 2])
@pytest.mark.parametrize("batch,max_blocks,num_sms", [(9, 7, 132), (40, 3, 5), (1, 1, 132)])
def test_paged_mqa_logits(heads, next_n, batch, max_blocks, num_sms):
    q, kv_cache, weights, context_lens, table = paged_mqa_inputs(batch, next_n, heads, max_blocks,
                                                                 torch.device("cuda"), heads + next_n + batch)
    ref, written = paged_mqa_reference(q, kv_cache, weights, context_lens, table)
    meta = deep_gemm.get_paged_mqa_logits_metadata(context_lens, 64, num_sms)
    assert meta.shape == (num_sms + 1, 2) and meta.dtype == torch.int32
    for dtype in (torch.float32, torch.bfloat16):
        logits = deep_gemm.fp8_fp4_paged_mqa_logits((q, None), kv_cache, weights, context_lens, table, meta,
                                                    max_blocks * 64, logits_dtype=dtype)
        assert logits.shape == (batch * next_n, max_blocks * 64) and logits.dtype == dtype
        got = logits.float().masked_fill(~written, 0)
        assert torch.isfinite(got).all()
        assert calc_diff(got, ref.masked_fill(~written, 0)) < (1e-5 if dtype == torch.bfloat16 else 1e-6), dtype
        again = deep_gemm.fp8_fp4_paged_mqa_logits(q, kv_cache, weights, context_lens, table, meta, max_blocks * 64,
                                                    logits_dtype=dtype)
        assert torch.equal(again.masked_fill(~written, 0), logits.masked_fill(~written, 0)), "not reproducible"


def test_paged_mqa_logits_cuda_graph():
    q, kv_cache, weights, context_lens, table = paged_mqa_inputs(16, 2, 64, 5, torch.device("cuda"), 3)
    meta = deep_gemm.get_paged_mqa_logits_metadata(context_lens, 64, deep_gemm.get_num_sms())
    deep_gemm.fp8_paged_mqa_logits(q, kv_cache, weights, context_lens, table, meta, 320)
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        with torch.cuda.graph(graph):
            meta_g = deep_gemm.get_paged_mqa_logits_metadata(context_lens, 64, deep_gemm.get_num_sms())
            out = deep_gemm.fp8_paged_mqa_logits(q, kv_cache, weights, context_lens, table, meta_g, 320)
    q2, kv2, w2, ctx2, table2 = paged_mqa_inputs(16, 2, 64, 5, torch.device("cuda"), 4)
    for dst, src in ((q, q2), (kv_cache, kv2), (weights, w2), (context_lens, ctx2), (table, table2)):
        dst.copy_(src)
    graph.replay()
    torch.cuda.synchronize()
    ref, written = paged_mqa_reference(q, kv_cache, weights, context_lens, table)
    assert calc_diff(out.masked_fill(~written, 0), ref.masked_fill(~written, 0)) < 1e-6
