"""Malformed calls of every public GEMM, table-driven: each starts from a valid call (tests/gemm_cases.py `small`
problem) and breaks one thing. Each must raise ValueError/TypeError whose message names the argument, before
anything is launched: on the GPU, `out` (poisoned, inside guard bands) is bitwise unchanged afterwards and the CUDA
context is healthy (the valid call that follows succeeds and is correct). On CPU (CI) the cases whose check does
not need CUDA tensors run too; on CPU the device check would otherwise answer first.
"""
from dataclasses import dataclass
from typing import Callable

import pytest
import torch

import deep_gemm
from gemm_cases import SPEC_BY_NAME, SPECS, Case, assert_cast_equal, cast_reference

DENSE = "gemm_fp8_fp8_bf16_nt"
CONTIGUOUS = "m_grouped_gemm_fp8_fp8_bf16_nt_contiguous"
MASKED = "m_grouped_gemm_fp8_fp8_bf16_nt_masked"
WGRAD = "wgrad_gemm_fp8_fp8_fp32_nt"
K_GROUPED = "k_grouped_wgrad_gemm_fp8_fp8_fp32_nt"
BMM = "bmm_fp8_fp8_bf16_nt"
ARG_NAMES = {BMM: ["lhs", "rhs", "out"], DENSE: ["lhs", "rhs", "out"], CONTIGUOUS: ["lhs", "rhs", "out", "m_indices"],
             MASKED: ["lhs", "rhs", "out", "masked_m", "expected_m"], WGRAD: ["lhs", "rhs", "out"],
             K_GROUPED: ["lhs", "rhs", "out", "batch_sizes"]}
ARG_NAMES.update({s.name: list(s.arg_names) for s in SPECS if s.arg_names})


@dataclass(frozen=True)
class Bad:
    id: str
    fn: str
    change: Callable[[dict], None]   # edits the named arguments (lhs/rhs are lists [tensor, scales])
    exc: type
    names: str                        # the argument the message must name
    cpu: bool = True                  # False: on CPU tensors the device check answers first


def _retype(t: torch.Tensor, dtype) -> torch.Tensor:
    return torch.zeros(t.shape, dtype=dtype, device=t.device)


def _set(key, index=None, value=None, fn=None):
    def change(d):
        old = d[key] if index is None else d[key][index]
        new = fn(old) if fn is not None else value
        if index is None:
            d[key] = new
        else:
            d[key][index] = new
    return change


def _alias_out_with(key, index):
    """`out` placed in memory that also holds an input (both views of one buffer, the input's bytes kept)."""
    def change(d):
        src, out = d[key][index], d["out"]
        nbytes = max(src.untyped_storage().nbytes(), out.numel() * out.element_size()) + 64
        buf = torch.zeros(nbytes, dtype=torch.uint8, device=out.device)
        view = torch.empty(0, dtype=src.dtype, device=out.device).set_(
            buf.untyped_storage(), 0, src.shape, src.stride())
        view.copy_(src)
        d[key][index] = view
        d["out"] = torch.empty(0, dtype=out.dtype, device=out.device).set_(buf.untyped_storage(), 0, out.shape)
    return change


def _to_cpu(key, index=None):
    return _set(key, index, fn=lambda t: t.cpu())


def _transposed(t: torch.Tensor) -> torch.Tensor:
    """Same shape, column-major storage (inner stride != 1)."""
    return t.t().contiguous().t()


def _ragged_bmm_n(d):
    """n = 997 for y and out alike (y_scales keep their ceil(n/128) blocks)."""
    d["rhs"][0] = d["rhs"][0][:, :-3]
    d["out"] = d["out"][:, :, :-3]


CASES = [
    # ---- dense
    Bad("dense-A-bf16", DENSE, _set("lhs", 0, fn=lambda t: _retype(t, torch.bfloat16)), TypeError, "lhs[0] (A)"),
    Bad("dense-SA-fp16", DENSE, _set("lhs", 1, fn=lambda t: t.half()), TypeError, "lhs[1] (SA)"),
    Bad("dense-out-fp32", DENSE, _set("out", fn=lambda t: t.float()), TypeError, "out"),
    Bad("dense-lhs-not-a-pair", DENSE, _set("lhs", fn=lambda p: p[0]), TypeError, "lhs"),
    Bad("dense-B-k-mismatch", DENSE, _set("rhs", 0, fn=lambda t: t[:, :128]), ValueError, "rhs[0] (B)"),
    Bad("dense-out-shape", DENSE, _set("out", fn=lambda t: t[:-1]), ValueError, "out"),
    Bad("dense-SA-shape", DENSE, _set("lhs", 1, fn=lambda t: t[:, :1]), ValueError, "lhs[1] (SA)"),
    Bad("dense-SB-shape", DENSE, _set("rhs", 1, fn=lambda t: t[:-1]), ValueError, "rhs[1] (SB)"),
    Bad("dense-A-column-major", DENSE, _set("lhs", 0, fn=_transposed), ValueError, "lhs[0] (A)", cpu=False),
    Bad("dense-A-rows-not-16B", DENSE, _set("lhs", 0, fn=lambda t: t.contiguous()), ValueError, "lhs[0] (A)",
        cpu=False),
    Bad("dense-out-aliases-A", DENSE, _alias_out_with("lhs", 0), ValueError, "out", cpu=False),
    Bad("dense-B-on-cpu", DENSE, _to_cpu("rhs", 0), ValueError, "rhs[0] (B)", cpu=False),
    Bad("dense-empty-k-scales", DENSE, _set("lhs", 1, fn=lambda t: t[:, :0]), ValueError, "lhs[1] (SA)"),
    # ---- contiguous
    Bad("contig-m_indices-int64", CONTIGUOUS, _set("m_indices", fn=lambda t: t.long()), TypeError, "m_indices"),
    Bad("contig-m_indices-short", CONTIGUOUS, _set("m_indices", fn=lambda t: t[:-1]), ValueError, "m_indices"),
    Bad("contig-m_indices-strided", CONTIGUOUS, _set("m_indices", fn=lambda t: t.repeat_interleave(2)[::2]),
        ValueError, "m_indices"),
    Bad("contig-m_indices-on-cpu", CONTIGUOUS, _to_cpu("m_indices"), ValueError, "m_indices", cpu=False),
    Bad("contig-m_indices-none", CONTIGUOUS, _set("m_indices", value=None), TypeError, "m_indices"),
    Bad("contig-B-2d", CONTIGUOUS, _set("rhs", 0, fn=lambda t: t[0]), ValueError, "rhs[0] (B)"),
    Bad("contig-SB-groups", CONTIGUOUS, _set("rhs", 1, fn=lambda t: t[:-1]), ValueError, "rhs[1] (SB)"),
    Bad("contig-out-rows", CONTIGUOUS, _set("out", fn=lambda t: t[1:]), ValueError, "out"),
    Bad("contig-out-aliases-B", CONTIGUOUS, _alias_out_with("rhs", 0), ValueError, "out", cpu=False),
    # ---- masked
    Bad("masked-masked_m-longer-than-G", MASKED, _set("masked_m", fn=lambda t: torch.cat([t, t[:1]])), ValueError,
        "masked_m"),
    Bad("masked-masked_m-shorter-than-G", MASKED, _set("masked_m", fn=lambda t: t[:-1]), ValueError, "masked_m"),
    Bad("masked-masked_m-float", MASKED, _set("masked_m", fn=lambda t: t.float()), TypeError, "masked_m"),
    Bad("masked-masked_m-on-cpu", MASKED, _to_cpu("masked_m"), ValueError, "masked_m", cpu=False),
    Bad("masked-expected_m-negative", MASKED, _set("expected_m", value=-1), ValueError, "expected_m"),
    Bad("masked-expected_m-float", MASKED, _set("expected_m", value=2.5), TypeError, "expected_m"),
    Bad("masked-expected_m-none", MASKED, _set("expected_m", value=None), TypeError, "expected_m"),
    Bad("masked-out-groups", MASKED, _set("out", fn=lambda t: t[:-1]), ValueError, "out"),
    Bad("masked-A-groups", MASKED, _set("lhs", 0, fn=lambda t: t[:-1]), ValueError, "lhs[0] (A)"),
    Bad("masked-SA-2d", MASKED, _set("lhs", 1, fn=lambda t: t[0]), ValueError, "lhs[1] (SA)"),
    Bad("masked-out-aliases-A", MASKED, _alias_out_with("lhs", 0), ValueError, "out", cpu=False),
    # ---- wgrad
    Bad("wgrad-out-bf16", WGRAD, _set("out", fn=lambda t: _retype(t, torch.bfloat16)), TypeError, "out"),
    Bad("wgrad-out-shape", WGRAD, _set("out", fn=lambda t: t[:, :-1]), ValueError, "out"),
    Bad("wgrad-B-k-mismatch", WGRAD, _set("rhs", 0, fn=lambda t: t[:, :512]), ValueError, "rhs[0] (B)"),
    Bad("wgrad-SB-shape", WGRAD, _set("rhs", 1, fn=lambda t: t[:-1]), ValueError, "rhs[1] (SB)"),
    Bad("wgrad-SA-int32", WGRAD, _set("lhs", 1, fn=lambda t: t.int()), TypeError, "lhs[1] (SA)"),
    Bad("wgrad-A-rows-not-16B", WGRAD, _set("lhs", 0, fn=lambda t: t[:, :1000].contiguous()), ValueError,
        "lhs[0] (A)", cpu=False),
    Bad("wgrad-out-aliases-B", WGRAD, _alias_out_with("rhs", 0), ValueError, "out", cpu=False),
    Bad("wgrad-SA-on-other-device", WGRAD, _to_cpu("lhs", 1), ValueError, "lhs[1] (SA)", cpu=False),
    # ---- k-grouped
    Bad("kgroup-batch_sizes-longer", K_GROUPED, _set("batch_sizes", fn=lambda ks: ks + [16]), ValueError,
        "batch_sizes"),
    Bad("kgroup-batch_sizes-negative", K_GROUPED, _set("batch_sizes", fn=lambda ks: [ks[0] + 16, -16, *ks[2:]]),
        ValueError, "batch_sizes[1]"),
    Bad("kgroup-batch_sizes-not-16", K_GROUPED, _set("batch_sizes", fn=lambda ks: [ks[0] - 8, 8, *ks[2:]]),
        ValueError, "batch_sizes[0]"),
    Bad("kgroup-batch_sizes-sum-mismatch", K_GROUPED, _set("batch_sizes", fn=lambda ks: [ks[0] + 16, *ks[1:]]),
        ValueError, "lhs[0] (A)"),
    Bad("kgroup-batch_sizes-float", K_GROUPED, _set("batch_sizes", fn=lambda ks: [float(k) for k in ks]),
        TypeError, "batch_sizes[0]"),
    Bad("kgroup-batch_sizes-cuda-tensor", K_GROUPED,
        _set("batch_sizes", fn=lambda ks: torch.tensor(ks, device="cuda")), TypeError, "batch_sizes", cpu=False),
    Bad("kgroup-A-strided", K_GROUPED, _set("lhs", 0, fn=lambda t: t.repeat_interleave(2)[::2]), ValueError,
        "lhs[0] (A)"),
    Bad("kgroup-SB-rows", K_GROUPED, _set("rhs", 1, fn=lambda t: t[1:]), ValueError, "rhs[1] (SB)"),
    Bad("kgroup-out-2d", K_GROUPED, _set("out", fn=lambda t: t[0]), ValueError, "out"),
    Bad("kgroup-out-aliases-SA", K_GROUPED, _alias_out_with("lhs", 1), ValueError, "out", cpu=False),
    # ---- bmm
    Bad("bmm-x-2d", BMM, _set("lhs", 0, fn=lambda t: t[0]), ValueError, "lhs[0] (x)"),
    Bad("bmm-xs-fp16", BMM, _set("lhs", 1, fn=lambda t: t.half()), TypeError, "lhs[1] (x_scales)"),
    Bad("bmm-xs-shape", BMM, _set("lhs", 1, fn=lambda t: t[:, :, :1]), ValueError, "lhs[1] (x_scales)"),
    Bad("bmm-y-batches", BMM, _set("rhs", 0, fn=lambda t: t[1:]), ValueError, "rhs[0] (y)"),
    Bad("bmm-y-k-mismatch", BMM, _set("rhs", 0, fn=lambda t: t[:, :, :128]), ValueError, "rhs[0] (y)"),
    Bad("bmm-ys-shape", BMM, _set("rhs", 1, fn=lambda t: t[:, :-1]), ValueError, "rhs[1] (y_scales)"),
    Bad("bmm-out-shape", BMM, _set("out", fn=lambda t: t[:, 1:]), ValueError, "out"),
    Bad("bmm-n-not-8", BMM, _ragged_bmm_n, ValueError, "rhs[0] (y)", cpu=False),
    Bad("bmm-out-fp32", BMM, _set("out", fn=lambda t: t.float()), TypeError, "out"),
    Bad("bmm-out-aliases-xs", BMM, _alias_out_with("lhs", 1), ValueError, "out", cpu=False),
    Bad("bmm-x-batches-interleaved", BMM, _set("lhs", 0, fn=lambda t: t.transpose(0, 1).contiguous().transpose(0, 1)),
        ValueError, "lhs[0] (x)", cpu=False),
]
CASES += [Bad(id, s.name, change, exc, names, cpu) for s in SPECS for id, change, exc, names, cpu in s.malformed]


def _named(case: Case) -> dict:
    d = dict(zip(ARG_NAMES[case.fn_name], case.args))
    for pair in ("lhs", "rhs"):
        if pair in d:
            d[pair] = list(d[pair])
    return d


def _call(case: Case, d: dict) -> None:
    args = [tuple(d[k]) if k in ("lhs", "rhs") and isinstance(d[k], list) else d[k] for k in ARG_NAMES[case.fn_name]]
    case.fn(*args)


def test_table_covers_every_public_gemm():
    assert len(CASES) >= 30
    assert {c.fn for c in CASES} == set(SPEC_BY_NAME) == set(ARG_NAMES)


def _run_bad(bad: Bad, device: str) -> Case:
    spec = SPEC_BY_NAME[bad.fn]
    case = spec.build(spec.small, torch.device(device), 0)
    d = _named(case)
    bad.change(d)
    before = case.guarded.buf.clone()
    # A substituted `out` (the aliasing cases) must be left alone too.
    other = d["out"] if isinstance(d["out"], torch.Tensor) and d["out"] is not case.out else None
    other_before = other.clone() if other is not None else None
    with pytest.raises(bad.exc) as info:
        _call(case, d)
    message = str(info.value)
    assert isinstance(info.value, (ValueError, TypeError))
    assert message.startswith(bad.names) or f" {bad.names} " in message, message
    assert torch.equal(case.guarded.buf, before), "a refused call changed out (or its guard bands)"
    if other is not None:
        assert torch.equal(other.view(torch.uint8), other_before.view(torch.uint8)), \
            "a refused call changed the substituted out"
    return case


@pytest.mark.parametrize("bad", [c for c in CASES if c.cpu], ids=[c.id for c in CASES if c.cpu])
def test_refused_on_cpu_tensors(bad):
    _run_bad(bad, "cpu")


@pytest.mark.gpu
@pytest.mark.parametrize("bad", CASES, ids=[c.id for c in CASES])
def test_refused_on_gpu_then_context_healthy(bad):
    torch.backends.cuda.matmul.allow_tf32 = False
    case = _run_bad(bad, "cuda")
    torch.cuda.synchronize()
    case.run()
    case.check()


# ---- The FP8 casts (deep_gemm.utils.per_*_cast_to_fp8): not GEMMs, they allocate their outputs, so a malformed call
# has no `out` to spoil; each must raise naming the argument before anything runs, on CPU tensors (which reach every
# check: the checks come before the choice between the kernel and the torch definition) and on the GPU, where the
# valid call that follows must then give the torch definition's result.
CASTS = ("per_token_cast_to_fp8", "per_block_cast_to_fp8", "per_channel_cast_to_fp8")


@dataclass(frozen=True)
class BadCast:
    id: str
    fn: str
    change: Callable[[dict], None]   # edits the keyword arguments (x, use_ue8m0, gran_k, ...)
    exc: type
    names: str


_EVERY_CAST = (
    ("x-not-a-tensor", lambda d: d.update(x=d["x"].tolist()), TypeError, "x"),
    ("x-3d", lambda d: d.update(x=d["x"][None]), ValueError, "x"),
    ("x-1d", lambda d: d.update(x=d["x"][0]), ValueError, "x"),
    ("gran_k-float", lambda d: d.update(gran_k=128.0), TypeError, "gran_k"),
    ("gran_k-bool", lambda d: d.update(gran_k=True), TypeError, "gran_k"),
    ("gran_k-zero", lambda d: d.update(gran_k=0), ValueError, "gran_k"),
    ("use_ue8m0-str", lambda d: d.update(use_ue8m0="yes"), TypeError, "use_ue8m0"))
CAST_CASES = [BadCast(f"{fn.split('_')[1]}-{id}", fn, change, exc, names)
              for fn in CASTS for id, change, exc, names in _EVERY_CAST]
CAST_CASES += [
    BadCast("token-packed-without-ue8m0", CASTS[0], lambda d: d.update(use_packed_ue8m0=True), ValueError,
            "use_packed_ue8m0"),
    BadCast("token-packed-mn-major", CASTS[0], lambda d: d.update(use_ue8m0=True, use_packed_ue8m0=True,
                                                                  mn_major_sf=True), ValueError, "mn_major_sf"),
    BadCast("token-mn-major-none", CASTS[0], lambda d: d.update(mn_major_sf=None), TypeError, "mn_major_sf"),
    BadCast("channel-rows-not-128", CASTS[2], lambda d: d.update(x=d["x"][:100]), ValueError, "x"),
]


def _run_bad_cast(bad: BadCast, device: str) -> dict:
    x = torch.randn((256, 200), device=device).to(torch.bfloat16)
    kwargs = dict(x=x, use_ue8m0=False, gran_k=128)
    bad.change(kwargs)
    fn = getattr(deep_gemm.utils, bad.fn)
    with pytest.raises(bad.exc) as info:
        fn(**kwargs)
    message = str(info.value)
    assert message.startswith(bad.names) or f" {bad.names} " in message, message
    return dict(x=x)


def test_cast_table_covers_every_cast():
    assert {c.fn for c in CAST_CASES} == set(CASTS) and len({c.id for c in CAST_CASES}) == len(CAST_CASES)


@pytest.mark.parametrize("bad", CAST_CASES, ids=[c.id for c in CAST_CASES])
def test_cast_refused_on_cpu_tensors(bad):
    _run_bad_cast(bad, "cpu")


@pytest.mark.gpu
@pytest.mark.parametrize("bad", CAST_CASES, ids=[c.id for c in CAST_CASES])
def test_cast_refused_on_gpu_then_context_healthy(bad):
    x = _run_bad_cast(bad, "cuda")["x"]
    torch.cuda.synchronize()
    kind = bad.fn[:-len("_cast_to_fp8")]
    got = getattr(deep_gemm.utils, bad.fn)(x)
    assert_cast_equal(got, cast_reference(kind, x, False), bad.id)
