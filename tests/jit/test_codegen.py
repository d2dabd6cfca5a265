"""Source generation (deep_gemm/jit/codegen.py): one include, one Config struct of named template arguments, one
forced instantiation `kernel<Config>`."""
import pytest

from deep_gemm.heuristics import GemmProblem, KernelType, get_config
from deep_gemm.heuristics.sm90_wgrad import get_wgrad_config
from deep_gemm.jit import CompileError, CppName, KernelSource
from deep_gemm.jit.compiler import NVRTCCompiler
from deep_gemm.families import sm90_fp8_gemm_1d2d, sm90_fp8_wgrad_1d1d


def _source(**config) -> KernelSource:
    return KernelSource(name="toy", header="deep_gemm/toy.cuh", function="deep_gemm::toy_kernel", config=config)


def test_config_renders_named_members_in_order():
    assert _source(BLOCK_M=128, kNumStages=0, kMulticastOnA=True).config_struct() == (
        "struct Config {\n"
        "    static constexpr deep_gemm::uint32_t BLOCK_M = 128;\n"
        "    static constexpr deep_gemm::uint32_t kNumStages = 0;\n"
        "    static constexpr bool kMulticastOnA = true;\n"
        "};\n")


def test_bools_render_as_cpp_literals():
    struct = _source(a=True, b=False, c=1).config_struct()
    assert "bool a = true;" in struct and "bool b = false;" in struct
    assert "True" not in struct and "False" not in struct


def test_code_includes_header_defines_config_and_instantiates():
    code = _source(BLOCK_M=64, kFlag=True).code()
    assert code.startswith("#include <deep_gemm/toy.cuh>\n")
    assert code.count("#include") == 1
    assert code.index("struct Config {") < code.index("deep_gemm_instantiate")
    # Taking the address is what forces the instantiation.
    assert "&deep_gemm::toy_kernel<Config>" in code


def test_instantiation_is_readable_and_unique():
    # Loaded kernels and the cache metadata are keyed by it.
    assert _source(BLOCK_M=64, kFlag=True).instantiation() == "deep_gemm::toy_kernel<Config{BLOCK_M=64, kFlag=true}>"
    assert _source(BLOCK_M=64).instantiation() != _source(BLOCK_M=128).instantiation()


def test_code_is_deterministic():
    # The source is hashed into the disk cache key: same config, same bytes.
    assert _source(A=1, B=2).code() == _source(A=1, B=2).code()
    assert _source(A=1, B=2).code() == KernelSource("toy", "deep_gemm/toy.cuh", "deep_gemm::toy_kernel",
                                                    (("A", 1), ("B", 2))).code()


@pytest.mark.parametrize("bad", [-1, -128])
def test_negative_value_raises(bad):
    with pytest.raises(ValueError, match=str(bad)):
        _source(A=1, B=bad)


@pytest.mark.parametrize("bad", [1.0, "64", None, (1, 2)])
def test_non_int_value_raises(bad):
    with pytest.raises(TypeError, match="template argument"):
        _source(A=1, B=bad)


@pytest.mark.parametrize("name", ["1BLOCK", "BLOCK-M", "a b", "x;y", ""])
def test_non_identifier_name_raises(name):
    with pytest.raises(ValueError, match="C\\+\\+ identifier"):
        KernelSource("toy", "h.cuh", "ns::f", ((name, 1),))


def test_duplicate_and_positional_configs_raise():
    with pytest.raises(ValueError, match="duplicate"):
        KernelSource("toy", "h.cuh", "ns::f", (("A", 1), ("A", 2)))
    with pytest.raises(TypeError, match="name, value"):
        KernelSource("toy", "h.cuh", "ns::f", (7, 0, 128))


def test_sources_are_hashable_values():
    assert _source(A=1, B=True) == _source(A=1, B=True)
    assert len({_source(A=1, B=True), _source(A=1, B=True), _source(A=1, B=False)}) == 2


def test_json_round_trip():
    source = KernelSource("x", "h.cuh", "ns::f", dict(kKind=CppName("ns::Kind::A"), N=3, kFlag=True))
    assert KernelSource.from_json(source.to_json()) == source


def test_cpp_name_values():
    source = KernelSource("x", "h.cuh", "ns::f", dict(kKind=CppName("ns::Kind::A"), N=3))
    assert "static constexpr auto kKind = ns::Kind::A;" in source.config_struct()
    with pytest.raises(ValueError, match="C\\+\\+ qualified name"):
        CppName("A; system()")


def test_sm90_kernel_source_names():
    config = get_config(GemmProblem(64, 2112, 7168, 132))
    source = sm90_fp8_gemm_1d2d.kernel_source(2112, 7168, config)
    assert source.header == "deep_gemm/sm90/fp8_gemm_1d2d.cuh"
    assert source.name == "sm90_fp8_gemm_1d2d"
    assert dict(source.config) == dict(
        kGemmType=CppName("deep_gemm::GemmType::Normal"), SHAPE_N=2112, SHAPE_K=7168, BLOCK_M=config.block_m,
        BLOCK_N=config.block_n, kNumStages=config.num_stages, kNumMulticast=config.num_multicast,
        kMulticastOnA=config.multicast_on_a, kSwizzleDBytes=config.swizzle_d_bytes, kSmemSize=config.smem_size,
        kPsumAlignment=0, kGatherScales=False, kLoadRowsA=config.block_m, kSmemRowsA=config.block_m, kOneMBlock=False,
        kClusterSplitsK=1,
        kHeadSplitLeft=0, kHeadSplitMid=0, kHeadSplitRight=0, kFP8Out=False, kSwiGLU=False,
        kActivationClampBits=0)
    assert "&deep_gemm::sm90::fp8_gemm_1d2d_impl<Config>" in source.code()
    masked = sm90_fp8_gemm_1d2d.kernel_source(2112, 7168, config, KernelType.M_GROUPED_MASKED)
    assert dict(masked.config)["kGemmType"] == CppName("deep_gemm::GemmType::MGroupedMasked")
    # The batched GEMM gathers its scales and loads only the A rows its batches have.
    batched_config = get_config(GemmProblem(3, 512, 128, 132, kernel_type=KernelType.BATCHED, num_groups=128))
    batched = dict(sm90_fp8_gemm_1d2d.kernel_source(512, 128, batched_config, KernelType.BATCHED).config)
    assert batched["kGemmType"] == CppName("deep_gemm::GemmType::Batched") and batched["kGatherScales"] is True
    assert batched_config.a_box_rows == 8 and batched["kLoadRowsA"] == 8 and batched["kOneMBlock"] is True
    # m = block_m: the whole box, still one M block per batch.
    full = get_config(GemmProblem(64, 512, 128, 132, kernel_type=KernelType.BATCHED, num_groups=16))
    full_named = dict(sm90_fp8_gemm_1d2d.kernel_source(512, 128, full, KernelType.BATCHED).config)
    assert full.block_m == 64 and full_named["kLoadRowsA"] == 64 and full_named["kOneMBlock"] is True


def test_sm90_wgrad_kernel_source_names():
    config = get_wgrad_config(4096, 2048, 1, 132)
    source = sm90_fp8_wgrad_1d1d.kernel_source(2048, config, 4)
    assert source.name == "sm90_fp8_wgrad_1d1d"
    assert dict(source.config) == dict(
        SHAPE_N=2048, BLOCK_M=config.block_m, BLOCK_N=config.block_n, kNumStages=config.num_stages,
        kNumMulticast=config.num_multicast, kMulticastOnA=config.multicast_on_a,
        kSwizzleDBytes=config.swizzle_d_bytes, kMaxGroups=4, kSmemSize=config.smem_size)


def _without(source: KernelSource, name: str, rename: str = "") -> KernelSource:
    config = tuple((rename if n == name else n, v) for n, v in source.config if n != name or rename)
    return KernelSource(source.name, source.header, source.function, config)


def _dense_source() -> KernelSource:
    return sm90_fp8_gemm_1d2d.kernel_source(256, 256, get_config(GemmProblem(64, 256, 256, 132)))


def _wgrad_source() -> KernelSource:
    return sm90_fp8_wgrad_1d1d.kernel_source(256, get_wgrad_config(256, 256, 1, 132), 1)


@pytest.mark.parametrize("make,name,rename", [
    (_dense_source, "BLOCK_M", ""),            # read in the signature (__launch_bounds__)
    (_dense_source, "BLOCK_N", ""),
    (_dense_source, "kNumStages", "kNumStage"),
    (_dense_source, "kGemmType", "kGemType"),
    (_wgrad_source, "kMaxGroups", ""),         # read in the signature (the WgradGroups parameter)
    (_wgrad_source, "kSwizzleDBytes", "kSwizzleDByte"),
])
def test_missing_or_misspelt_name_fails_to_compile(make, name, rename):
    # The kernel reads Config::<name>: a config without it must fail with an error naming it (NVRTC front end only).
    with pytest.raises(CompileError, match=f"no member \"{name}\""):
        NVRTCCompiler().compile(_without(make(), name, rename).code(), "sm_90a")
