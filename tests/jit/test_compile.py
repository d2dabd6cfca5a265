"""Compiling the real sm90 kernel (deep_gemm/jit/compiler.py) with NVRTC and nvcc for sm_90a, no GPU needed."""
import dataclasses
import re
import struct

import pytest

from deep_gemm.heuristics import GemmConfig, GemmProblem, get_config, sm90_smem_size
from deep_gemm.heuristics.sm90 import MAX_STAGES, SMEM_BUDGET, num_math_threads, swizzle_d_bytes
from deep_gemm.jit import CompileError
from deep_gemm.jit.compiler import NVCCCompiler, NVRTCCompiler, check_arch
from deep_gemm.families.sm90_fp8_gemm_1d2d import kernel_source
from tools import sass

ARCH = "sm_90a"
EM_CUDA = 190
MANGLED_KERNEL = b"_ZN9deep_gemm4sm9018fp8_gemm_1d2d_impl"


def hand_config(m: int, n: int, k: int, block_m: int, block_n: int, num_multicast: int,
                multicast_on_a: bool) -> GemmConfig:
    """The heuristic's config for (m, n, k) with the tile and multicast forced; stages/smem recomputed to fit."""
    stages = max(s for s in range(1, MAX_STAGES + 1) if sm90_smem_size(k, block_m, block_n, s) <= SMEM_BUDGET)
    return dataclasses.replace(
        get_config(GemmProblem(m, n, k, 132)), block_m=block_m, block_n=block_n, num_stages=stages,
        num_multicast=num_multicast, multicast_on_a=multicast_on_a, swizzle_d_bytes=swizzle_d_bytes(block_n),
        num_sms=132, smem_size=sm90_smem_size(k, block_m, block_n, stages),
        num_threads=num_math_threads(block_m) + 128)


def _configs():
    small = get_config(GemmProblem(64, 2112, 7168, 132))
    return {
        # One math warpgroup (BLOCK_M = 64), from the heuristic itself.
        "bm64": (2112, 7168, small),
        # Two math warpgroups with two 64-row sub-tiles each, A multicast over a 2-CTA cluster.
        "bm256-bn128-mcA": (7168, 2048, hand_config(4096, 7168, 2048, 256, 128, 2, True)),
        # BLOCK_N = 160 does not divide 128 (tiles straddle RHS scale blocks), K = 576 is ragged, B multicast.
        "bm128-bn160-k576-mcB": (7168, 576, hand_config(4096, 7168, 576, 128, 160, 2, False)),
    }


CONFIGS = _configs()


def check_cubin(cubin: bytes) -> None:
    assert cubin[:4] == b"\x7fELF"
    assert struct.unpack_from("<H", cubin, 18)[0] == EM_CUDA, "ELF e_machine must be EM_CUDA"
    assert MANGLED_KERNEL in cubin


def check_ptx(ptx: str, config: GemmConfig) -> None:
    assert ".target sm_90a" in ptx
    assert "wgmma.mma_async" in ptx
    assert f"wgmma.mma_async.sync.aligned.m64n{config.block_n}k32.f32.e4m3.e4m3 " in ptx
    assert "vprintf" not in ptx, "device printf left in the kernel"
    assert ("multicast::cluster" in ptx) == (config.num_multicast > 1)


def test_hand_configs_fit_and_are_legal():
    assert CONFIGS["bm64"][2].block_m == 64
    for n, k, c in CONFIGS.values():
        assert c.smem_size <= SMEM_BUDGET and c.num_stages >= 1
        if c.num_multicast == 2:
            tiles_along = n if c.multicast_on_a else 4096
            block = c.block_n if c.multicast_on_a else c.block_m
            assert -(-tiles_along // block) % 2 == 0
    assert 128 % CONFIGS["bm128-bn160-k576-mcB"][2].block_n != 0


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def nvrtc_build(request):
    n, k, config = CONFIGS[request.param]
    return config, NVRTCCompiler().compile(kernel_source(n, k, config).code(), ARCH, want_ptx=True,
                                           ptxas_verbose=True)


def test_nvrtc_cubin(nvrtc_build):
    _, result = nvrtc_build
    check_cubin(result.cubin)
    assert result.seconds > 0


def test_nvrtc_ptx(nvrtc_build):
    config, result = nvrtc_build
    check_ptx(result.ptx, config)
    assert not sass.register_moves_problem(result.ptx, result.log, config.num_threads)


def test_nvcc_compiles_ragged_config():
    n, k, config = CONFIGS["bm128-bn160-k576-mcB"]
    result = NVCCCompiler().compile(kernel_source(n, k, config).code(), ARCH, want_ptx=True)
    check_cubin(result.cubin)
    check_ptx(result.ptx, config)


def test_ptx_not_requested_is_none():
    result = NVRTCCompiler().compile("__global__ void tiny(int* p) { *p = 1; }\n", ARCH)
    assert result.ptx is None
    assert result.cubin[:4] == b"\x7fELF"


def test_smem_mismatch_fails_to_compile():
    # The kernel static-asserts that the host's shared-memory size equals its own.
    n, k, config = CONFIGS["bm64"]
    wrong = dataclasses.replace(config, smem_size=config.smem_size + 1024)
    with pytest.raises(CompileError, match="shared-memory"):
        NVRTCCompiler().compile(kernel_source(n, k, wrong).code(), ARCH)


@pytest.mark.parametrize("arch", ["sm_90", "sm_80", "compute_90a", ""])
def test_check_arch_rejects(arch):
    with pytest.raises(ValueError, match="arch"):
        check_arch(arch)


def test_plain_sm_90_rejected_before_compiling():
    with pytest.raises(ValueError, match="sm_90"):
        NVRTCCompiler().compile("__global__ void tiny() {}\n", "sm_90")


@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a", "sm_100f"])
def test_check_arch_accepts(arch):
    assert check_arch(arch) == arch


BROKEN = "__global__ void broken(int* p) { *p = 1 +; }\n"


def test_nvrtc_syntax_error_carries_log():
    with pytest.raises(CompileError) as info:
        NVRTCCompiler().compile(BROKEN, ARCH)
    message = str(info.value)
    assert "deep_gemm_kernel.cu(1)" in message and "error" in message


def test_nvcc_syntax_error_carries_log():
    with pytest.raises(CompileError) as info:
        NVCCCompiler().compile(BROKEN, ARCH)
    message = str(info.value)
    assert "kernel.cu(1)" in message and "error" in message


def test_compiler_identities():
    assert NVRTCCompiler().identity().startswith("nvrtc-")
    assert NVCCCompiler().identity().startswith("nvcc-")
    assert NVRTCCompiler().identity() != NVCCCompiler().identity()


def test_flags():
    nvrtc_flags = NVRTCCompiler().flags(ARCH)
    assert "--gpu-architecture=sm_90a" in nvrtc_flags and "-DNDEBUG" in nvrtc_flags
    assert any(f.startswith("-I") and f.endswith("include") for f in nvrtc_flags)
    assert "--ptxas-options=-v" in NVRTCCompiler().flags(ARCH, ptxas_verbose=True)
    nvcc_flags = NVCCCompiler().flags(ARCH)
    assert "-gencode=arch=compute_90a,code=sm_90a" in nvcc_flags and "-DNDEBUG" in nvcc_flags


# ---- Grouped (MoE) instantiations of the same kernel family ----

def _grouped_configs():
    from deep_gemm.heuristics import KernelType
    contiguous = get_config(GemmProblem(8 * 4096, 4096, 7168, 132, kernel_type=KernelType.M_GROUPED_CONTIGUOUS,
                                        num_groups=8))
    masked = get_config(GemmProblem(32, 7168, 2048, 132, kernel_type=KernelType.M_GROUPED_MASKED, num_groups=32))
    psum = get_config(GemmProblem(4096, 4096, 7168, 132, kernel_type=KernelType.M_GROUPED_PSUM, num_groups=8))
    return {"contiguous": (KernelType.M_GROUPED_CONTIGUOUS, 4096, 7168, contiguous, 0),
            "masked": (KernelType.M_GROUPED_MASKED, 7168, 2048, masked, 0),
            "psum": (KernelType.M_GROUPED_PSUM, 4096, 7168, psum, 128)}


GROUPED = _grouped_configs()


@pytest.mark.parametrize("name", sorted(GROUPED))
def test_grouped_kernels_compile(name):
    kind, n, k, config, psum_alignment = GROUPED[name]
    source = kernel_source(n, k, config, kind, psum_alignment)
    assert "GemmType::MGrouped" in source.code()
    result = NVRTCCompiler().compile(source.code(), ARCH, want_ptx=True)
    check_cubin(result.cubin)
    check_ptx(result.ptx, config)
    # The epilogue's row-bounded copy for a group's partial last block (plain 16-byte global stores): the
    # group-walking layouts only.
    assert ("st.global.v4.b32" in result.ptx) == (name in ("masked", "psum"))


def test_psum_alignment_is_given_exactly_for_the_psum_layout():
    kind, n, k, config, _ = GROUPED["psum"]
    with pytest.raises(ValueError, match="psum_alignment"):
        kernel_source(n, k, config, kind, 0)
    with pytest.raises(ValueError, match="psum_alignment"):
        kernel_source(n, k, config, GROUPED["masked"][0], 128)


def test_psum_layout_multicasts_only_a():
    """A pair of CTAs must share its M block, hence its expert: the heuristic never multicasts B for psum."""
    from deep_gemm.heuristics import KernelType
    for m in (16, 200, 1024, 8192):
        c = get_config(GemmProblem(m, 4096, 7168, 132, kernel_type=KernelType.M_GROUPED_PSUM, num_groups=8))
        assert c.num_multicast == 1 or c.multicast_on_a, (m, c)


def test_scale_pack_kernel_compiles():
    from deep_gemm.families import sf_layout
    result = NVRTCCompiler().compile(sf_layout.kernel_source().code(), ARCH)
    assert result.cubin[:4] == b"\x7fELF"
    assert b"pack_fp32_into_ue8m0" in result.cubin  # the name DeepGEMM's layout test profiles


def test_contiguous_rejects_256_row_tiles_at_compile_time():
    kind, n, k, config, _ = GROUPED["contiguous"]
    wide = hand_config(4096, n, k, 256, 128, 1, True)
    with pytest.raises(CompileError, match="128-row expert segments"):
        NVRTCCompiler().compile(kernel_source(n, k, wide, kind).code(), ARCH)


def test_head_split_kernel_compiles_and_refuses_tiles_across_parts():
    """fp8_gemm_nt_skip_head_mid's kernel (DeepGEMM test_attention's head splits (128, 64, 128)): the heuristic's
    tile divides both head parts; a tile that would cross a part boundary fails to compile."""
    from deep_gemm.families.sm90_fp8_gemm_1d2d import kernel_config
    from deep_gemm.heuristics import KernelType
    splits = (128, 64, 128)
    for m in (128, 4096):
        config = kernel_config(m, 32768, 512, 132, ARCH, KernelType.NORMAL, 1, splits)
        assert 128 % config.block_n == 0 and config.cluster_k_splits == 1, config
    source = kernel_source(32768, 512, config, KernelType.NORMAL, 0, splits)
    assert source.name.endswith("_skip_head_mid")
    result = NVRTCCompiler().compile(source.code(), ARCH, want_ptx=True)
    check_cubin(result.cubin)
    check_ptx(result.ptx, config)
    assert "cp.async.bulk.tensor" in result.ptx and "bulk_group" in result.ptx
    across = hand_config(4096, 32768, 512, 128, 96, 1, True)
    with pytest.raises(CompileError, match="head splits"):
        NVRTCCompiler().compile(kernel_source(32768, 512, across, KernelType.NORMAL, 0, splits).code(), ARCH)


@pytest.mark.parametrize("m", [1, 128, 4096])
def test_fp8_out_kernel_compiles_without_spills(m):
    """fp8_gemm_nt_fp8_out's kernel (FP8RowScaleEpilogue): the heuristic's tiles hold whole 128-column scale groups
    and cut no K over a cluster; it builds with NVRTC without spills, converts with cvt.e4m3x2, and stores D by TMA."""
    from deep_gemm.families.sm90_fp8_gemm_1d2d import kernel_config
    from deep_gemm.heuristics import KernelType
    config = kernel_config(m, 4096, 7168, 132, ARCH, KernelType.NORMAL, 1, fp8_out=True)
    assert config.block_n % 128 == 0 and config.cluster_k_splits == 1, config
    source = kernel_source(4096, 7168, config, KernelType.NORMAL, fp8_out=True)
    assert source.name.endswith("_fp8_out")
    result = NVRTCCompiler().compile(source.code(), ARCH, want_ptx=True, ptxas_verbose=True)
    check_cubin(result.cubin)
    check_ptx(result.ptx, config)
    assert "cvt.rn.satfinite.e4m3x2.f32" in result.ptx and "cp.async.bulk.tensor.2d.global.shared" in result.ptx
    spills = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", result.log)
    assert spills and all(s == ("0", "0") for s in spills), result.log
    assert not sass.register_moves_problem(result.ptx, result.log, config.num_threads)


def test_fp8_out_kernel_refuses_tiles_across_scale_groups():
    from deep_gemm.heuristics import KernelType
    narrow = hand_config(4096, 4096, 7168, 128, 64, 1, True)
    with pytest.raises(CompileError, match="whole 128-column scale groups"):
        NVRTCCompiler().compile(kernel_source(4096, 7168, narrow, KernelType.NORMAL, fp8_out=True).code(), ARCH)


@pytest.mark.parametrize("kind_name,m,n", [("M_GROUPED_MASKED", 4, 4096), ("M_GROUPED_MASKED", 200, 4096),
                                           ("M_GROUPED_CONTIGUOUS", 8192, 4096), ("M_GROUPED_CONTIGUOUS", 8192, 400)])
def test_grouped_fp8_out_kernels_compile_without_spills(kind_name, m, n):
    """The masked and contiguous FP8-output kernels: 128-wide tiles (64, 128 and 256 rows), a masked group's partial
    last block copied by the warpgroup, contiguous rows of other experts zeroed, columns past a ragged n kept out of
    the amax; no spills."""
    from deep_gemm.families.sm90_fp8_gemm_1d2d import kernel_config
    from deep_gemm.heuristics import KernelType
    kind = KernelType[kind_name]
    config = kernel_config(m, n, 7168, 132, ARCH, kind, 8, fp8_out=True)
    assert config.block_n == 128, config
    source = kernel_source(n, 7168, config, kind, fp8_out=True)
    result = NVRTCCompiler().compile(source.code(), ARCH, want_ptx=True, ptxas_verbose=True)
    check_cubin(result.cubin)
    check_ptx(result.ptx, config)
    assert "cvt.rn.satfinite.e4m3x2.f32" in result.ptx
    spills = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", result.log)
    assert spills and all(s == ("0", "0") for s in spills), result.log
    assert not sass.register_moves_problem(result.ptx, result.log, config.num_threads)


@pytest.mark.parametrize("kind_name,m,clamp_bits", [("M_GROUPED_MASKED", 8, 0x7F800000),
                                                    ("M_GROUPED_MASKED", 200, 0x41200000),
                                                    ("M_GROUPED_CONTIGUOUS", 8192, 0x7F800000)])
def test_swiglu_kernels_compile_without_spills(kind_name, m, clamp_bits):
    """The SwiGLU gate/up kernels (SwiGLUFP8Epilogue): 128-wide tiles in A-multicast pairs whose CTAs exchange their
    rows' amax through distributed shared memory, paired gate / up RHS scales, 64 and 128 rows; no spills, the
    cluster exchange and the e4m3 conversion in the PTX."""
    from deep_gemm.families.sm90_fp8_gemm_1d2d import kernel_config
    from deep_gemm.heuristics import KernelType, SwiGLU
    kind = KernelType[kind_name]
    swiglu = SwiGLU(clamp_bits)
    config = kernel_config(m, 4096, 7168, 132, ARCH, kind, 8, fp8_out=swiglu)
    assert (config.block_n, config.num_multicast, config.multicast_on_a) == (128, 2, True), config
    assert config.block_m == (64 if m <= 64 else 128), config
    source = kernel_source(4096, 7168, config, kind, fp8_out=swiglu)
    assert source.name.endswith("_swiglu")
    result = NVRTCCompiler().compile(source.code(), ARCH, want_ptx=True, ptxas_verbose=True)
    check_cubin(result.cubin)
    assert "cvt.rn.satfinite.e4m3x2.f32" in result.ptx and "ld.shared::cluster.v2.f32" in result.ptx
    spills = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", result.log)
    assert spills and all(s == ("0", "0") for s in spills), result.log
    assert not sass.register_moves_problem(result.ptx, result.log, config.num_threads)
