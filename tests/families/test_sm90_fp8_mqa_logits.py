"""The MQA logits family's host checks without a GPU: what SM90 refuses is refused with the argument's name before
any device work (CPU tensors reach every shape and dtype check)."""
import pytest
import torch

import deep_gemm
from deep_gemm.families.sm90_fp8_mqa_logits import normalise


def _args(seq_len=4, seq_len_kv=64, heads=64, head_dim=128):
    q = torch.zeros((seq_len, heads, head_dim), dtype=torch.float8_e4m3fn)
    kv = torch.zeros((seq_len_kv, head_dim), dtype=torch.float8_e4m3fn)
    return dict(q=q, kv=kv, kv_sf=torch.ones(seq_len_kv), weights=torch.ones(seq_len, heads),
                ks=torch.zeros(seq_len, dtype=torch.int32), ke=torch.ones(seq_len, dtype=torch.int32),
                logits=torch.empty(seq_len, seq_len_kv), clean=1, max_seqlen_k=0)


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
])
def test_refusals_name_the_argument(change, exc, name):
    args = _args()
    args.update(change)
    with pytest.raises(exc, match=name):
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
