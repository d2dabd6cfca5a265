"""torch.compile(fullgraph=True) of models calling the public GEMMs (custom operators torch.ops.deep_gemm.*):
results equal eager bitwise; torch.library.opcheck on every operator."""
import pytest
import torch

import deep_gemm
from gemm_cases import SPECS

pytestmark = pytest.mark.gpu
OPERATOR_SPECS = [s for s in SPECS if s.operator]  # the GEMMs that are torch custom operators (gemm_cases.GemmSpec)
IDS = [s.name for s in OPERATOR_SPECS]


def _backends():
    try:
        import triton  # noqa: F401
        return ["aot_eager", "inductor"]
    except ImportError:
        return ["aot_eager"]


@pytest.mark.parametrize("backend", _backends())
@pytest.mark.parametrize("spec", OPERATOR_SPECS, ids=IDS)
def test_compiled_call_equals_eager(spec, backend):
    torch.backends.cuda.matmul.allow_tf32 = False
    case = spec.build(spec.small, torch.device("cuda"), 10)
    case.run()
    case.check()
    eager = case.guarded.bits()

    def model(*args):
        case.fn(*args)
        return args[2]

    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True, backend=backend)
    for _ in range(2):
        case.guarded.reset()
        result = compiled(*case.args)
        case.check()
        assert result.data_ptr() == case.out.data_ptr()
        assert torch.equal(case.guarded.bits(), eager), f"{case.desc}: compiled ({backend}) differs from eager"


# opcheck re-runs the operator on contiguous copies of the inputs: those need k % 16 == 0 (TMA row alignment).
OPCHECK_PROBLEM = {"gemm_fp8_fp8_bf16_nt": dict(k=256), "wgrad_gemm_fp8_fp8_fp32_nt": dict(k=1024)}


@pytest.mark.parametrize("spec", OPERATOR_SPECS, ids=IDS)
def test_opcheck(spec):
    case = spec.build({**spec.small, **OPCHECK_PROBLEM.get(spec.name, {})}, torch.device("cuda"), 11)
    flat = tuple(x for arg in case.args for x in (arg if isinstance(arg, tuple) else (arg,)))  # pairs unpacked
    op = getattr(torch.ops.deep_gemm, spec.name).default
    # test_schema is left out: it compares tensors with arithmetic that torch lacks for float8_e4m3fn.
    result = torch.library.opcheck(op, flat,
                                   test_utils=("test_faketensor", "test_autograd_registration",
                                               "test_aot_dispatch_dynamic"))
    assert all(v == "SUCCESS" for v in result.values()), result


class TinyMoE(torch.nn.Module):
    """A dense projection in BF16, its FP8 cast, then a masked expert GEMM: a model mixing torch ops and ours."""

    def forward(self, a, sa, b, sb, b2, sb2, masked_m, expected_m: int):
        g, m_max, _ = masked_m.shape[0], a.shape[0] // masked_m.shape[0], a.shape[1]
        h = torch.empty((a.shape[0], b.shape[0]), dtype=torch.bfloat16, device=a.device)
        deep_gemm.gemm_fp8_fp8_bf16_nt((a, sa), (b, sb), h)
        h = torch.nn.functional.silu(h.float())
        h8, hs = deep_gemm.per_token_cast_to_fp8(h)
        out = torch.zeros((g, m_max, b2.shape[1]), dtype=torch.bfloat16, device=a.device)
        deep_gemm.m_grouped_gemm_fp8_fp8_bf16_nt_masked((h8.view(g, m_max, -1), hs.view(g, m_max, -1)), (b2, sb2),
                                                        out, masked_m, expected_m)
        return out


def test_small_model_compiles_fullgraph_and_matches_eager():
    torch.backends.cuda.matmul.allow_tf32 = False
    gen = torch.Generator(device="cuda").manual_seed(12)
    g, m_max, k, n, n2 = 4, 64, 512, 256, 384
    a = torch.randn((g * m_max, k), device="cuda", generator=gen).to(torch.bfloat16)
    b = torch.randn((n, k), device="cuda", generator=gen).to(torch.bfloat16)
    b2 = torch.randn((g, n2, n), device="cuda", generator=gen).to(torch.bfloat16)
    a8, sa = deep_gemm.per_token_cast_to_fp8(a)
    b8, sb = deep_gemm.per_block_cast_to_fp8(b)
    parts = [deep_gemm.per_block_cast_to_fp8(b2[i]) for i in range(g)]
    b28 = torch.stack([p[0] for p in parts])
    sb28 = torch.stack([p[1] for p in parts])
    masked_m = torch.tensor([64, 0, 17, 40], dtype=torch.int32, device="cuda")
    args = (a8, sa, b8, sb, b28, sb28, masked_m, 32)
    model = TinyMoE()
    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True)
    # Inductor fuses the SiLU and the FP8 cast differently from eager, so compare values, not bits.
    for values in ([64, 0, 17, 40], [1, 64, 0, 63]):
        masked_m.copy_(torch.tensor(values, dtype=torch.int32))
        eager, got = model(*args), compiled(*args)
        torch.cuda.synchronize()
        valid = torch.arange(m_max, device="cuda").view(1, m_max) < masked_m.view(g, 1)
        assert deep_gemm.calc_diff(got[valid], eager[valid]) < 1e-5
        assert bool((got[~valid] == 0).all()) and bool((eager[~valid] == 0).all())
