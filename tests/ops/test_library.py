"""torch.library registration of the public GEMMs (deep_gemm/ops/library.py), on CPU: every public GEMM has an
operator, its fake implementation runs under FakeTensorMode, and Dynamo traces a call into one graph
(fullgraph=True) holding exactly that operator, through AOT autograd's functionalisation. Execution on the GPU and
the comparison with eager results are in tests/gpu/test_compile_gpu.py."""
import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import deep_gemm
from deep_gemm.ops import library
from gemm_cases import SPECS

OPERATOR_SPECS = [s for s in SPECS if s.operator]
IDS = [s.name for s in OPERATOR_SPECS]


def test_every_public_gemm_is_in_the_robustness_registry():
    """New public GEMMs must join tests/gemm_cases.py SPECS (and so every robustness test)."""
    public = {name for name in deep_gemm.__all__ if "gemm_fp8" in name or "bmm_fp8" in name}
    # The BF16 GEMMs (their nn / tn / tt and nn-contiguous forms transpose views and call these; the masked alias is
    # the same function).
    public |= {"bf16_gemm_nt", "m_grouped_bf16_gemm_nt_contiguous", "m_grouped_bf16_gemm_nt_masked"}
    public |= {"einsum", "tf32_hc_prenorm_gemm"}   # fp8_einsum runs the FP8 BMM (its spec covers the kernel)
    public |= {"fp8_gemm_nt_skip_head_mid", "fp8_gemm_nt_fp8_out", "m_grouped_fp8_gemm_nt_contiguous_fp8_out",
               "m_grouped_fp8_gemm_nt_masked_fp8_out", "m_grouped_fp8_gemm_nt_contiguous_swiglu",
               "m_grouped_fp8_gemm_nt_masked_swiglu"}
    assert public | set(library.OPS) == {s.name for s in SPECS}
    assert set(library.OPS) == {s.name for s in OPERATOR_SPECS}


@pytest.mark.parametrize("spec", OPERATOR_SPECS, ids=IDS)
def test_operator_registered_with_mutation_of_out(spec):
    op = getattr(torch.ops.deep_gemm, spec.name).default
    schema = op._schema
    names = [a.name for a in schema.arguments]
    case = spec.build(spec.small, torch.device("cpu"), 0)
    assert len(names) == len(_flat_args(case)) and "out" in names, names
    if isinstance(case.args[0], tuple):  # (tensor, scales) pairs flatten into a, sa / b, sb (ops/library.py)
        assert names[:5] == ["a", "sa", "b", "sb", "out"], names
    out_arg = schema.arguments[names.index("out")]
    assert out_arg.alias_info is not None and out_arg.alias_info.is_write, "out must be declared as mutated"
    assert not any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments if a.name != "out")
    assert len(schema.returns) == 0


def _flat_args(case):
    return tuple(x for arg in case.args for x in (arg if isinstance(arg, tuple) else (arg,)))


@pytest.mark.parametrize("spec", OPERATOR_SPECS, ids=IDS)
def test_fake_implementation(spec):
    case = spec.build(spec.small, torch.device("cpu"), 0)
    args = _flat_args(case)
    with FakeTensorMode(allow_non_fake_inputs=False) as mode:
        fake = [mode.from_tensor(t) if isinstance(t, torch.Tensor) else t for t in args]
        assert getattr(torch.ops.deep_gemm, spec.name)(*fake) is None


class _Traced(Exception):
    pass


@pytest.mark.parametrize("spec", OPERATOR_SPECS, ids=IDS)
def test_dynamo_traces_one_node_fullgraph(spec):
    from functorch.compile import make_boxed_func
    from torch._functorch.aot_autograd import aot_module_simplified

    case = spec.build(spec.small, torch.device("cpu"), 0)
    graphs = []

    def forward_compiler(gm, example_inputs):
        graphs.append(("aot", gm))
        raise _Traced()  # executing would need a GPU: stop after tracing

    def backend(gm, example_inputs):
        graphs.append(("dynamo", gm))
        return aot_module_simplified(gm, example_inputs, fw_compiler=forward_compiler,
                                     bw_compiler=make_boxed_func)

    def model(*args):
        case.fn(*args)
        return args[2]

    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True, backend=backend)
    with pytest.raises(Exception) as info:
        compiled(*case.args)
    chain, e = [], info.value
    while e is not None:
        chain.append(e)
        e = e.__cause__ or e.__context__
    assert any(isinstance(x, _Traced) for x in chain), info.value
    dynamo = [gm for kind, gm in graphs if kind == "dynamo"]
    assert len(dynamo) == 1
    targets = [n.target for n in dynamo[0].graph.nodes if n.op == "call_function"]
    op = getattr(torch.ops.deep_gemm, spec.name)
    assert targets.count(op) + targets.count(op.default) == 1, targets
    aot = [gm for kind, gm in graphs if kind == "aot"]
    assert len(aot) == 1, "AOT autograd (functionalisation with the fake implementation) must have traced it"
    text = aot[0].code
    assert spec.name in text, text


def test_compiled_batch_sizes_must_be_a_list():
    spec = next(s for s in SPECS if s.name == "k_grouped_wgrad_gemm_fp8_fp8_fp32_nt")
    case = spec.build(spec.small, torch.device("cpu"), 0)
    args = list(case.args)
    args[3] = torch.tensor(args[3])

    def model(*a):
        case.fn(*a)
        return a[2]

    torch._dynamo.reset()
    with pytest.raises(Exception, match="batch_sizes must be a list of ints under torch.compile"):
        torch.compile(model, fullgraph=True, backend="eager")(*args)
