"""Source generation (deep_gemm/jit/codegen.py): one include plus one forced template instantiation."""
import pytest

from deep_gemm.heuristics import GemmProblem, get_config
from deep_gemm.jit import KernelSource
from deep_gemm.launchers import sm90_fp8_gemm_1d2d


def _source(*args) -> KernelSource:
    return KernelSource(name="toy", header="deep_gemm/toy.cuh", function="deep_gemm::toy_kernel", template_args=args)


def test_instantiation_renders_args_in_order():
    assert _source(7, 0, 128).instantiation() == "deep_gemm::toy_kernel<7, 0, 128>"


def test_bools_render_as_cpp_literals():
    inst = _source(True, False, 1).instantiation()
    assert inst == "deep_gemm::toy_kernel<true, false, 1>"
    assert "True" not in inst and "False" not in inst


def test_code_includes_header_and_instantiates():
    code = _source(64, True).code()
    assert code.startswith("#include <deep_gemm/toy.cuh>\n")
    assert code.count("#include") == 1
    # Taking the address is what forces the instantiation.
    assert "&deep_gemm::toy_kernel<64, true>" in code


def test_no_template_args():
    assert _source().instantiation() == "deep_gemm::toy_kernel<>"


@pytest.mark.parametrize("bad", [-1, -128])
def test_negative_template_arg_raises(bad):
    with pytest.raises(ValueError, match=str(bad)):
        _source(1, bad).code()


@pytest.mark.parametrize("bad", [1.0, "64", None, (1, 2)])
def test_non_int_template_arg_raises(bad):
    with pytest.raises(TypeError, match="template argument"):
        _source(1, bad).instantiation()


def test_sources_are_hashable_values():
    assert _source(1, True) == _source(1, True)
    assert len({_source(1, True), _source(1, True), _source(1, False)}) == 2


def test_sm90_kernel_source_template_order():
    config = get_config(GemmProblem(64, 2112, 7168, 132))
    source = sm90_fp8_gemm_1d2d.kernel_source(2112, 7168, config)
    assert source.header == "deep_gemm/sm90/fp8_gemm_1d2d.cuh"
    on_a = "true" if config.multicast_on_a else "false"
    assert source.instantiation() == (
        f"deep_gemm::sm90::fp8_gemm_1d2d_impl<deep_gemm::GemmType::Normal, 2112, 7168, {config.block_m}, {config.block_n}, {config.num_stages}, "
        f"{config.num_multicast}, {on_a}, {config.swizzle_d_bytes}, {config.smem_size}>")
    assert "#include <deep_gemm/sm90/fp8_gemm_1d2d.cuh>" in source.code()


def test_cpp_name_arguments():
    from deep_gemm.jit import CppName
    source = KernelSource("x", "h.cuh", "ns::f", (CppName("ns::Kind::A"), 3, True))
    assert source.instantiation() == "ns::f<ns::Kind::A, 3, true>"
    with pytest.raises(ValueError, match="C\\+\\+ qualified name"):
        CppName("A; system()")
