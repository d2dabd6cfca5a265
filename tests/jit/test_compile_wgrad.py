"""Compiling the sm90 weight-gradient kernel (1D1D scaling, FP32 reduce-add epilogue) for sm_90a, no GPU needed."""
import re

import pytest

from deep_gemm.heuristics.sm90_wgrad import build_wgrad_config, get_wgrad_config
from deep_gemm.jit import CompileError
from deep_gemm.jit.compiler import NVCCCompiler, NVRTCCompiler
from deep_gemm.families.sm90_fp8_wgrad_1d1d import kernel_source
from tools import sass

ARCH = "sm_90a"

CONFIGS = {
    # The heuristic's pick for a large dense weight gradient (256-row tiles, two sub-tiles per warpgroup).
    "dense-7168x4096": (4096, get_wgrad_config(7168, 4096, 1, 132), 1),
    # One math warpgroup, a 176-wide tile (64-byte D swizzle), B multicast, the largest group capacity.
    "bm64-bn176-mcB-g96": (7168, build_wgrad_config(2048, 7168, 64, 64, 176, 132, 2, False), 96),
    # A ragged n with a narrow tile and 32-byte D swizzle.
    "bm128-bn40-g8": (1000, build_wgrad_config(512, 1000, 8, 128, 40, 132), 8),
}


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def built(request):
    n, config, capacity = CONFIGS[request.param]
    result = NVRTCCompiler().compile(kernel_source(n, config, capacity).code(), ARCH, want_ptx=True,
                                     ptxas_verbose=True)
    return config, capacity, result


def test_wgrad_cubin_and_ptx(built):
    config, capacity, result = built
    assert result.cubin[:4] == b"\x7fELF"
    assert b"fp8_wgrad_gemm_1d1d_impl" in result.cubin
    ptx = result.ptx
    assert f"wgmma.mma_async.sync.aligned.m64n{config.block_n}k32.f32.e4m3.e4m3 " in ptx
    # The epilogue adds into D in L2 instead of storing it.
    assert "cp.reduce.async.bulk.tensor.3d.global.shared::cta.add.tile.bulk_group" in ptx
    assert "cp.async.bulk.tensor.2d.global.shared::cta" not in ptx
    assert "vprintf" not in ptx
    assert ("multicast::cluster" in ptx) == (config.num_multicast > 1)


def test_wgrad_no_register_spills(built):
    config, _, result = built
    spills = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", result.log)
    assert spills, result.log
    assert all(s == ("0", "0") for s in spills), result.log
    assert not sass.register_moves_problem(result.ptx, result.log, config.num_threads)


def test_wgrad_nvcc_compiles():
    n, config, capacity = CONFIGS["bm128-bn40-g8"]
    result = NVCCCompiler().compile(kernel_source(n, config, capacity).code(), ARCH, want_ptx=True)
    assert "cp.reduce.async.bulk.tensor.3d" in result.ptx


def test_wgrad_smem_mismatch_fails_to_compile():
    import dataclasses
    n, config, capacity = CONFIGS["bm128-bn40-g8"]
    bad = dataclasses.replace(config, smem_size=config.smem_size + 16)
    with pytest.raises(CompileError, match="disagree on the shared-memory size"):
        NVRTCCompiler().compile(kernel_source(n, bad, capacity).code(), ARCH)
