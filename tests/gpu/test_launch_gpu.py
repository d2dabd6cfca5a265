"""The one launch path on the GPU, for every public GEMM: after a layout's first call, calls launch from C++ without
entering Python (new tensors and pointers included), results stay right, the set_num_sms cap keeps a plan per cap
warm, and per-call pointer checks still hold after warm-up."""
import pytest
import torch

import deep_gemm
from deep_gemm.testing import calc_diff, clear_plans, launch_stats

from gemm_cases import contiguous_inputs, k_grouped_inputs, masked_inputs, quant_blocks, quant_rows

pytestmark = pytest.mark.gpu


def _gen(seed):
    return torch.Generator(device="cuda").manual_seed(seed)


def _dense(seed, m=256, n=512, k=384):
    gen = _gen(seed)
    a8, sa, a_deq, _ = quant_rows(m, k, gen, "cuda")
    b8, sb, b_deq, _ = quant_blocks(1, n, k, gen, "cuda")
    out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
    ref = a_deq @ b_deq[0].t()
    args = ((a8, deep_gemm.get_col_major_tma_aligned_tensor(sa)), (b8[0], sb[0]), out)
    return deep_gemm.gemm_fp8_fp8_bf16_nt, args, lambda: calc_diff(out, ref)


def _contiguous(seed, n=512, k=384):
    (a8, sa), rhs, m_indices, ref, _ = contiguous_inputs([128, 0, 200], n, k, _gen(seed), "cuda")
    out = torch.full(ref.shape, float("nan"), dtype=torch.bfloat16, device="cuda")
    args = ((a8, deep_gemm.get_col_major_tma_aligned_tensor(sa)), rhs, out, m_indices)
    return deep_gemm.m_grouped_gemm_fp8_fp8_bf16_nt_contiguous, args, lambda: calc_diff(out, ref)


def _masked(seed, n=256, k=384):
    (a8, sa), rhs, ref, _ = masked_inputs(3, 64, n, k, _gen(seed), "cuda")
    masked_m = torch.tensor([64, 0, 33], dtype=torch.int32, device="cuda")
    out = torch.full(ref.shape, float("nan"), dtype=torch.bfloat16, device="cuda")
    args = ((a8, deep_gemm.get_col_major_tma_aligned_tensor(sa)), rhs, out, masked_m, 40)

    def diff():
        rows = [(g, int(c)) for g, c in enumerate(masked_m.tolist()) if c]
        return max(calc_diff(out[g, :c], ref[g, :c]) for g, c in rows)
    return deep_gemm.m_grouped_gemm_fp8_fp8_bf16_nt_masked, args, diff


def _wgrad(seed, m=256, n=384, k=512):
    gen = _gen(seed)
    a8, sa, a_deq, _ = quant_rows(m, k, gen, "cuda")
    b8, sb, b_deq, _ = quant_rows(n, k, gen, "cuda")
    out = torch.randn((m, n), device="cuda", generator=gen)
    ref = out + a_deq @ b_deq.t()
    args = ((a8, sa.t().contiguous()), (b8, sb.t().contiguous()), out)  # the transposed scale form: used as is
    return deep_gemm.wgrad_gemm_fp8_fp8_fp32_nt, args, lambda: calc_diff(out, ref)


def _k_grouped(seed, m=128, n=256, ks=(128, 0, 256)):
    lhs, rhs, ref, _ = k_grouped_inputs(m, n, ks, _gen(seed), "cuda")
    out = torch.zeros((len(ks), m, n), device="cuda")
    return (deep_gemm.k_grouped_wgrad_gemm_fp8_fp8_fp32_nt, (lhs, rhs, out, list(ks)),
            lambda: calc_diff(out[[0, 2]], ref[[0, 2]]))


def _bf16(seed, m=200, n=576, k=7168):
    gen = _gen(seed)
    a = torch.randn((m, k), device="cuda", generator=gen).bfloat16()
    b = torch.randn((n, k), device="cuda", generator=gen).bfloat16()
    out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
    return deep_gemm.bf16_gemm_nt, (a, b, out), lambda: calc_diff(out, a.float() @ b.float().t())


def _einsum_heads(seed, b_=32, h=16, r=512, d=128):
    """SGLang's MLA absorbed query product."""
    gen = _gen(seed)
    x = torch.randn((b_, h, r), device="cuda", generator=gen).bfloat16()
    y = torch.randn((h, d, r), device="cuda", generator=gen).bfloat16()
    out = torch.full((b_, h, d), float("nan"), dtype=torch.bfloat16, device="cuda")
    return (deep_gemm.einsum, ("bhr,hdr->bhd", x, y, out),
            lambda: calc_diff(out, torch.einsum("bhr,hdr->bhd", x.float(), y.float())))


def _hc_prenorm(seed, m=64, n=24, k=7168, splits=16):
    """The hyper-connection pre-norm as SGLang calls it at decode: a few rows, K split over the SMs."""
    gen = _gen(seed)
    a = torch.randn((m, k), device="cuda", generator=gen).bfloat16()
    b = torch.randn((n, k), device="cuda", generator=gen)
    d = torch.full((splits, m, n), float("nan"), device="cuda")
    s = torch.full((splits, m), float("nan"), device="cuda")
    # The exact product: B's rounding to TF32 stays far inside 1e-5.
    ref_d, ref_s = a.double() @ b.double().t(), a.double().square().sum(-1)
    return (deep_gemm.tf32_hc_prenorm_gemm, (a, b, d, s, splits),
            lambda: max(calc_diff(d.sum(0).double(), ref_d), calc_diff(s.sum(0).double(), ref_s)))


OPS = {"dense": _dense, "contiguous": _contiguous, "masked": _masked, "wgrad": _wgrad, "k_grouped": _k_grouped,
       "bf16": _bf16, "einsum_heads": _einsum_heads, "hc_prenorm": _hc_prenorm}


@pytest.mark.parametrize("op", list(OPS))
def test_warm_calls_launch_without_python(op):
    """New tensors every call, one layout: every result right, one plan registered, every call after the first a
    C++-only launch."""
    # Inputs first: drawing them runs our cast kernels, whose plans would count here too.
    calls = [OPS[op](seed=10 + i) for i in range(4)]
    clear_plans()
    before = launch_stats()
    for i, (fn, args, diff) in enumerate(calls):
        fn(*args)
        torch.cuda.synchronize()
        assert diff() < 1e-5, f"{op} call {i}"
    after = launch_stats()
    assert after["registered"] - before["registered"] == 1
    assert after["fast"] - before["fast"] == 3
    assert after["slow"] - before["slow"] == 1


@pytest.mark.parametrize("op", list(OPS))
def test_alternating_num_sms_keeps_both_plans_warm(op):
    """SGLang's pattern: set_num_sms(part) / set_num_sms(all) around calls. One plan per cap, both stay warm."""
    clear_plans()
    fn, args, diff = OPS[op](seed=30)
    total = deep_gemm.get_num_sms()
    before = launch_stats()
    try:
        for i in range(8):
            deep_gemm.set_num_sms(total // 2 if i % 2 else total)
            fn(*args)
        torch.cuda.synchronize()
    finally:
        deep_gemm.reset_num_sms()
    after = launch_stats()
    assert after["registered"] - before["registered"] == 2, "one plan build per cap"
    assert after["fast"] - before["fast"] == 6
    if op not in ("wgrad", "k_grouped"):  # the weight gradients accumulate: 8 additions
        assert diff() < 1e-5


def test_bad_pointers_refused_after_warmup():
    fn, (lhs, rhs, out), diff = _dense(seed=70)
    for _ in range(2):
        fn(lhs, rhs, out)
    torch.cuda.synchronize()
    assert diff() < 1e-5
    m, n = out.shape
    store = torch.zeros((m * n + 8,), dtype=torch.bfloat16, device="cuda")
    with pytest.raises(ValueError, match="out"):
        fn(lhs, rhs, store[1:m * n + 1].view(m, n))  # misaligned out
    alias = torch.zeros((m * n,), dtype=torch.bfloat16, device="cuda")
    a_alias = alias.view(torch.float8_e4m3fn)[:lhs[0].numel()].view(lhs[0].shape)
    a_alias.copy_(lhs[0])
    with pytest.raises(ValueError, match="overlaps"):
        fn((a_alias, lhs[1]), rhs, alias.view(m, n))
    # A misaligned SA pointer with the warmed layout: converted by the Python path, still right.
    sa = lhs[1]
    sa_store = torch.empty((sa.numel() + 64,), dtype=torch.float32, device="cuda")
    sa_shift = sa_store[1:].as_strided(sa.shape, sa.stride())
    sa_shift.copy_(sa)
    out2 = torch.empty_like(out)
    fn((lhs[0], sa_shift), rhs, out2)
    torch.cuda.synchronize()
    assert torch.equal(out2.view(torch.int16), out.view(torch.int16))


def test_wgrad_out_at_a_misaligned_address_after_warmup():
    """A warmed wgrad layout whose out moves to a non-16-byte-aligned address goes through the aligned temporary."""
    fn, (lhs, rhs, out), diff = _wgrad(seed=80)
    fn(lhs, rhs, out)
    torch.cuda.synchronize()
    assert diff() < 1e-5
    m, n = out.shape
    store = torch.zeros((m * n + 4,), device="cuda")
    shifted = store[1:m * n + 1].view(m, n)
    shifted.copy_(out)
    fn(lhs, rhs, shifted)
    fn(lhs, rhs, out)
    torch.cuda.synchronize()
    assert torch.equal(shifted, out)
