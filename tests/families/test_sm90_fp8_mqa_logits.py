"""The MQA logits family's host checks without a GPU: what SM90 refuses is refused with the argument's name before
any device work (CPU tensors reach every shape and dtype check)."""
import pytest
import torch

import deep_gemm
from deep_gemm.families.sm90_fp8_mqa_logits import _padding_fits, normalise
from deep_gemm.heuristics.sm90_mqa import HEAD_COUNTS, HEAD_DIMS, get_mqa_logits_config, mqa_logits_padding


def _args(seq_len=4, seq_len_kv=64, heads=64, head_dim=128):
    q = torch.zeros((seq_len, heads, head_dim), dtype=torch.float8_e4m3fn)
    kv = torch.zeros((seq_len_kv, head_dim), dtype=torch.float8_e4m3fn)
    return dict(q=q, kv=kv, kv_sf=torch.ones(seq_len_kv), weights=torch.ones(seq_len, heads),
                ks=torch.zeros(seq_len, dtype=torch.int32), ke=torch.ones(seq_len, dtype=torch.int32),
                logits=torch.empty(seq_len, seq_len_kv), clean=1, max_seqlen_k=0, padded=0)


@pytest.mark.parametrize("change,exc,name", [
    (dict(q=torch.zeros((4, 16, 128), dtype=torch.float8_e4m3fn), weights=torch.ones(4, 16)), ValueError, "heads"),
    (dict(q=torch.zeros((4, 64, 96), dtype=torch.float8_e4m3fn)), ValueError, "head dim"),
    (dict(q=torch.zeros((4, 64, 128), dtype=torch.bfloat16)), TypeError, "q"),
    (dict(kv=torch.zeros((64, 64), dtype=torch.float8_e4m3fn)), ValueError, "kv"),
    (dict(kv_sf=torch.ones(63)), ValueError, "kv_sf"),
    (dict(weights=torch.ones(4, 32)), ValueError, "weights"),
    (dict(ks=torch.zeros(4, dtype=torch.int64)), TypeError, "cu_seq_len_k_start"),
    (dict(ke=torch.ones(3, dtype=torch.int32)), ValueError, "cu_seq_len_k_end"),
    (dict(logits=torch.empty(4, 64, dtype=torch.float16)), TypeError, "logits"),
    (dict(logits=torch.empty(4, 65)), ValueError, "logits"),
    (dict(max_seqlen_k=8, logits=torch.empty(4, 8)), ValueError, "clean_logits"),
    (dict(clean=0, max_seqlen_k=-1), ValueError, "max_seqlen_k"),
    (dict(padded=2), ValueError, "logits_padded"),
    (dict(clean=0, max_seqlen_k=8, logits=torch.empty(4, 8), padded=1), ValueError, "logits_padded"),
])
def test_refusals_name_the_argument(change, exc, name):
    args = _args()
    args.update(change)
    with pytest.raises(exc, match=name):
        normalise(*args.values())


def test_padding_must_exist():
    # The kernel skips range checks only where rows up to the query block and a key block past the end exist.
    config = get_mqa_logits_config(32, 128)
    assert config.block_q == 4 and config.block_kv == 256
    # What the op pads by covers every head count and head dim.
    rows, columns = mqa_logits_padding()
    assert all(rows % get_mqa_logits_config(h, d).block_q == 0 and columns >= get_mqa_logits_config(h, d).block_kv
               for h in HEAD_COUNTS for d in HEAD_DIMS)
    fits = torch.empty(8, 64 + 256)[:5, :64]
    assert _padding_fits(fits, 5, 64, config)
    assert not _padding_fits(torch.empty(5, 64 + 256)[:, :64], 5, 64, config)  # rows 5..7 missing
    assert not _padding_fits(torch.empty(8, 64 + 255)[:5, :64], 5, 64, config)
    assert not _padding_fits(torch.empty(9, 64 + 256)[1:6, :64], 5, 64, config)  # not the storage's start
    args = _args(seq_len=5, heads=32)
    args.update(logits=torch.empty(5, 64 + 256)[:, :64], padded=1)
    with pytest.raises(ValueError, match="logits_padded"):
        normalise(*args.values())


def test_public_op_refuses_sm100_only_forms():
    a = _args()
    kv = (a["kv"], a["kv_sf"])
    with pytest.raises(ValueError, match="q"):
        deep_gemm.fp8_fp4_mqa_logits((a["q"], torch.ones(4, 64)), kv, a["weights"], a["ks"], a["ke"])
    with pytest.raises(ValueError, match="weights"):
        deep_gemm.fp8_fp4_mqa_logits(a["q"], kv, a["weights"].bfloat16(), a["ks"], a["ke"])
    with pytest.raises(ValueError, match="logits_dtype"):
        deep_gemm.fp8_fp4_mqa_logits(a["q"], kv, a["weights"], a["ks"], a["ke"], logits_dtype=torch.float16)
    with pytest.raises(ValueError, match="max_seqlen_k"):
        deep_gemm.fp8_fp4_mqa_logits(a["q"], kv, a["weights"], a["ks"], a["ke"], max_seqlen_k=-2)


def _paged_args(batch=3, next_n=2, heads=64):
    return dict(q=torch.zeros((batch, next_n, heads, 128), dtype=torch.float8_e4m3fn),
                kv_cache=torch.zeros((6, 64, 1, 132), dtype=torch.uint8), weights=torch.ones(batch * next_n, heads),
                context_lens=torch.ones(batch, next_n, dtype=torch.int32),
                block_table=torch.zeros(batch, 2, dtype=torch.int32),
                schedule_meta=torch.zeros(9, 2, dtype=torch.int32), logits=torch.empty(batch * next_n, 128))


@pytest.mark.parametrize("change,exc,name", [
    (dict(q=torch.zeros((3, 3, 64, 128), dtype=torch.float8_e4m3fn)), ValueError, "next_n"),
    (dict(q=torch.zeros((3, 2, 64, 64), dtype=torch.float8_e4m3fn)), ValueError, "head dim"),
    (dict(kv_cache=torch.zeros((6, 32, 1, 132), dtype=torch.uint8)), ValueError, "kv_cache"),
    (dict(context_lens=torch.ones(3, dtype=torch.int32)), ValueError, "context_lens"),
    (dict(block_table=torch.zeros(2, 2, dtype=torch.int32)), ValueError, "block_table"),
    (dict(schedule_meta=torch.zeros(9, 3, dtype=torch.int32)), ValueError, "schedule_meta"),
    (dict(logits=torch.empty(5, 128)), ValueError, "logits"),
    (dict(weights=torch.ones(6, 32)), ValueError, "weights"),
])
def test_paged_refusals_name_the_argument(change, exc, name):
    from deep_gemm.families.sm90_fp8_paged_mqa_logits import normalise as paged_normalise
    args = _paged_args()
    args.update(change)
    with pytest.raises(exc, match=name):
        paged_normalise(*args.values())


def test_paged_metadata_splits_the_items_evenly():
    # Items of 256 tokens per batch (its last next-n context): 2, 0, 3, 1 -> 6 items over 4 CTAs.
    ctx = torch.tensor([[10, 300], [0, 0], [600, 700], [5, 1]], dtype=torch.int32)
    meta = deep_gemm.get_paged_mqa_logits_metadata(ctx, 64, 4)
    assert meta.tolist() == [[0, 0], [0, 1], [2, 1], [2, 2], [4, 0]]  # items 0, 1, 3, 4 of (batch, item); end (B, 0)
    with pytest.raises(ValueError, match="indices"):
        deep_gemm.get_paged_mqa_logits_metadata(ctx, 64, 4, indices=torch.zeros(4, dtype=torch.int32))
    with pytest.raises(ValueError, match="block_kv"):
        deep_gemm.get_paged_mqa_logits_metadata(ctx, 32, 4)
    a = _paged_args()
    with pytest.raises(ValueError, match="clean_logits"):
        deep_gemm.fp8_fp4_paged_mqa_logits(a["q"], a["kv_cache"], a["weights"], a["context_lens"], a["block_table"],
                                           a["schedule_meta"], 128, clean_logits=True)


def test_paged_reference_matches_the_tests_reference():
    # The family's reference (benchmarks.attention checks with it) against the GPU tests' own (tests/gemm_cases.py).
    from deep_gemm.families.sm90_fp8_paged_mqa_logits import reference
    from gemm_cases import paged_mqa_inputs, paged_mqa_reference
    inputs = paged_mqa_inputs(7, 2, 32, 3, torch.device("cpu"), 5)
    ours, written = reference(*inputs)
    theirs, written_t = paged_mqa_reference(*inputs)
    assert torch.equal(written, written_t) and torch.allclose(ours, theirs, rtol=1e-6, atol=1e-5)
