"""Compiling the sm90 hyper-connection pre-norm GEMM (include/deep_gemm/sm90/tf32_hc_prenorm_gemm.cuh) for sm_90a, no
GPU needed: the PTX carries the register-A TF32 WGMMA of the tile's width and the 3-D D store, nothing spills, ptxas
keeps the WGMMAs asynchronous, and the K loop stays within its instruction budget."""
import re

import pytest

from deep_gemm.families.sm90_tf32_hc_prenorm import kernel_choice, kernel_source
from deep_gemm.jit.compiler import NVCCCompiler, NVRTCCompiler
from tools import sass

ARCH = "sm_90a"
# (m, n, splits): DeepGEMM's test_hyperconnection shapes' tiles (n = 24) and the other widths.
CASES = [(8192, 24, 1), (13, 24, 16), (137, 32, 1), (64, 8, 2), (256, 16, 1)]
# Instructions per K block per math warp in the main loop, at most (measured + ~4%): 8 WGMMAs, 32 shared loads and
# the conversions / squares of 32 BF16 values.
BUDGET = 175.0  # measured 168 (memory-bound: a K block of A takes ~600 cycles to arrive at 1/132 of HBM)


@pytest.fixture(scope="module", params=CASES, ids=lambda c: "x".join(map(str, c)))
def built(request):
    m, n, splits = request.param
    config = kernel_choice(m, n, 132, splits)
    result = NVRTCCompiler().compile(kernel_source(n, config).code(), ARCH, want_ptx=True, ptxas_verbose=True)
    return config, result


def test_tf32_ptx(built):
    config, result = built
    assert result.cubin[:4] == b"\x7fELF" and b"tf32_hc_prenorm_gemm_impl" in result.cubin
    widths = re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n(\d+)k8\.f32\.tf32\.tf32 \{[^}]*\}, \{", result.ptx)
    assert widths and set(widths) == {str(config.block_n)}
    assert "cp.async.bulk.tensor.3d.global.shared::cta.bulk_group" in result.ptx
    assert "vprintf" not in result.ptx


def test_tf32_no_spills_and_async_wgmma(built):
    _, result = built
    spills = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", result.log)
    assert spills and all(s == ("0", "0") for s in spills), result.log
    assert not sass.register_moves_problem(result.ptx, result.log, built[0].num_threads)
    assert "serializ" not in result.log.lower(), result.log


def test_tf32_main_loop_budget():
    tool = sass.find_cuobjdump()
    if tool is None:
        pytest.skip("cuobjdump/nvdisasm not found (pip install the `test` extra)")
    config = kernel_choice(8192, 24, 132, 1)
    cubin = NVRTCCompiler().compile(kernel_source(24, config).code(), ARCH).cubin
    instructions = sass.pick_function(sass.disassemble(cubin, tool), "_impl")
    main = sass.main_loop(instructions, sass.mmas_per_k_block(config, 8))
    print(f"\n{config}\n{main.format()}")
    assert main.num_mma % main.mmas_per_k_block == 0
    assert main.count("LDL", "STL") == 0, main.format(full=True)
    assert main.per_k_block <= BUDGET, main.format(full=True)


def test_tf32_nvcc_compiles():
    config = kernel_choice(4096, 24, 132, 1)
    assert "m64n24k8.f32.tf32.tf32" in NVCCCompiler().compile(kernel_source(24, config).code(), ARCH,
                                                               want_ptx=True).ptx
