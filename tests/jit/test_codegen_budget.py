"""Main-loop code generation of the sm90 kernels, no GPU needed: compile with NVRTC (the shipped path), disassemble
with cuobjdump and measure the steady-state K loop per K block per math warp (tools/sass.py defines the measure).
Run with -s to see the measured numbers."""
import pytest

from deep_gemm.heuristics import KernelType, SwiGLU
from deep_gemm.heuristics.sm90 import build_sm90_config
from deep_gemm.heuristics.sm90_wgrad import build_wgrad_config, group_capacity
from tools import sass
from deep_gemm.jit.compiler import NVRTCCompiler
from deep_gemm.families import sm90_fp8_gemm_1d2d, sm90_fp8_wgrad_1d1d

ARCH = "sm_90a"

# Instructions per K block per math warp in the main loop, at most.
# NOTES: each is the value measured with the uniform WGMMA descriptors of issue 14 + ~3% slack (before them: 260 at
# dense 256x128, 174.5 at 128x192, 373 at wgrad 256x112); cuobjdump/nvdisasm 13.2.51 and 13.5.37 print the same SASS.
# By the same measure, DeepGEMM's own loop is 191.8 at 256x128 and 140.8 at 128x192.
BUDGETS = {
    "dense-256x128-mcA": 203.0,         # measured 197.25 (4 K blocks per body)
    "dense-128x192": 138.5,             # measured 134.50 (4 K blocks per body, first of 2 straddle cases)
    "dense-128x128-overlap": 116.5,     # measured 113.00 (a chunk of 8 K blocks per body)
    "contiguous-128x192-mcA": 139.5,    # measured 135.50 (4 K blocks per body, first of 2 straddle cases)
    "batched-128x192-mcA": 138.5,       # measured 134.50 (gathered scales: RHS scales read from the stage)
    # One 64-row warpgroup: setmaxnreg lets ptxas compile it at 248 registers; without it (tried) ptxas took 70-240
    # and these loops grew 12-23% (NOTES issue 17, the start-up path).
    "dense-64x56": 104.0,               # measured 100.88 (8 K blocks per body)
    # The measured loop is the whole tile here (14 K blocks fully unrolled, plus the cluster reduction): the unsplit
    # tile of 14 K blocks (k = 1792) measures 89.86 the same way; at 2 splits (28 blocks) the K loop is 80.62, as
    # unsplit (80.75).
    "dense-64x64-ks4": 179.0,           # measured 173.79
    "dense-64x16-a8": 58.5,             # measured 56.50 (8 K blocks per body)
    # Batched decode (m < BLOCK_M, one K block per tile at k = 128): the per-tile loop, tile walk included.
    "batched-decode-64x256": 823.0,     # measured 799 (870 before the compile-time one-M-block walk)
    # The SwiGLU gate/up GEMM (paired gate / up RHS scales: every tile's promotion switches scale at column 64).
    "swiglu-contiguous-128x128-mcA": 120.5,  # measured 117.00 (dense 128x128: 113.00; two multipliers per row)
    "wgrad-256x112": 329.0,             # measured 319.00 (1 K block per body; issue turns)
    "wgrad-128x152": 233.0,             # measured 226.00 (1 K block per body; DeepGEMM's loop: 211.5)
}


def _instantiations():
    """name -> (KernelSource, config)."""
    def dense(m, n, k, block_m, block_n, multicast=1, kind=KernelType.NORMAL, splits=1, a_box_rows=0):
        config = build_sm90_config(m, n, k, block_m, block_n, 132, multicast, True, cluster_k_splits=splits,
                                   a_box_rows=a_box_rows)
        return sm90_fp8_gemm_1d2d.kernel_source(n, k, config, kind), config

    batched_config = build_sm90_config(4096, 4096, 4096, 128, 192, 132, 2, True, num_groups=8, gather_scales=True)
    decode_config = build_sm90_config(1, 512, 128, 64, 256, 132, num_groups=128, a_box_rows=8, gather_scales=True)
    swiglu_config = build_sm90_config(262144, 4096, 7168, 128, 128, 132, 2, True, paired_scales=True)
    wgrad_config = build_wgrad_config(16384, 7168, 1, 256, 112, 132)
    wgrad_152 = build_wgrad_config(7168, 2112, 1, 128, 152, 132)
    return {
        # The heuristic's pick for 4096x7168x16384: two math warpgroups x two 64-row sub-tiles, A multicast.
        "dense-256x128-mcA": dense(4096, 7168, 16384, 256, 128, 2),
        # The heuristic's pick for 4096x2112x7168: one sub-tile per warpgroup, tiles straddle RHS scale blocks.
        "dense-128x192": dense(4096, 2112, 7168, 128, 192),
        # One sub-tile with BLOCK_N <= 128: promotion overlapped with the next K block, chunks of 8 K blocks.
        "dense-128x128-overlap": dense(4096, 7168, 16384, 128, 128),
        # The heuristic's pick for 8 experts x 4096 rows, n = 4096, k = 7168.
        "contiguous-128x192-mcA": dense(8 * 4096, 4096, 7168, 128, 192, 2, KernelType.M_GROUPED_CONTIGUOUS),
        # The heuristic's pick for 64x7168x2048: one math warpgroup (256 threads).
        "dense-64x56": dense(64, 7168, 2048, 64, 56),
        # Decode with K cut over a cluster of 4 (forced here; decode_split picks splits): 14 of 56 K blocks per CTA.
        "dense-64x64-ks4": dense(1, 2112, 7168, 64, 64, splits=4),
        # Decode loading 8 rows of A per stage, DeepGEMM's 132 tiles of 16 columns (forced: the pick is 64x32 here).
        "dense-64x16-a8": dense(1, 2112, 7168, 64, 16, a_box_rows=8),
        # The batched heuristic's pick for 128 x 1x512x128 (MLA decode): an 8-row A box, one M block per batch.
        "batched-decode-64x256": (sm90_fp8_gemm_1d2d.kernel_source(512, 128, decode_config, KernelType.BATCHED),
                                  decode_config),
        # The batched heuristic's pick for 8 x 4096x4096x4096 (BMM): scales gathered per stage.
        "batched-128x192-mcA": (sm90_fp8_gemm_1d2d.kernel_source(4096, 4096, batched_config, KernelType.BATCHED),
                                batched_config),
        # The SwiGLU heuristic's config for 256 experts x 1024 rows, n = 2 x 2048, k = 7168.
        "swiglu-contiguous-128x128-mcA": (sm90_fp8_gemm_1d2d.kernel_source(4096, 7168, swiglu_config,
                                                                          KernelType.M_GROUPED_CONTIGUOUS,
                                                                          fp8_out=SwiGLU()), swiglu_config),
        # The wgrad heuristic's pick for 16384x7168 (k = 4096): two sub-tiles per warpgroup, preloaded column scales.
        "wgrad-256x112": (sm90_fp8_wgrad_1d1d.kernel_source(7168, wgrad_config, group_capacity(1)), wgrad_config),
        # The wgrad heuristic's pick for 7168x2112: one sub-tile per warpgroup, preloaded column scales, no turns.
        "wgrad-128x152": (sm90_fp8_wgrad_1d1d.kernel_source(2112, wgrad_152, group_capacity(1)), wgrad_152),
    }


INSTANTIATIONS = _instantiations()


def test_every_instantiation_has_a_budget():
    assert sorted(BUDGETS) == sorted(INSTANTIATIONS)


@pytest.fixture(scope="module", params=sorted(INSTANTIATIONS))
def loops(request):
    """(name, main loop, every innermost loop with MMAs) of one instantiation, compiled once per module."""
    tool = sass.find_cuobjdump()
    if tool is None:
        pytest.skip("cuobjdump/nvdisasm not found (pip install the `test` extra: nvidia-cuda-cuobjdump, "
                    "nvidia-cuda-nvdisasm)")
    name = request.param
    source, config = INSTANTIATIONS[name]
    cubin = NVRTCCompiler().compile(source.code(), ARCH).cubin
    instructions = sass.pick_function(sass.disassemble(cubin, tool), "_impl")
    per_k_block = sass.mmas_per_k_block(config)
    main = sass.main_loop(instructions, per_k_block)
    every = sass.mma_loops(instructions, per_k_block)
    print(f"\n[{name}] {config}")
    for loop in every:
        print(f"[{name}] {loop.summary()}; R2UR {loop.count('R2UR')}")
    print(f"[{name}] main loop 0x{main.start:x} (the first with the most MMAs), budget {BUDGETS[name]}:")
    print(main.format())
    return name, main, every


def test_main_loop_covers_whole_k_blocks(loops):
    _, main, _ = loops
    assert main.num_mma % main.mmas_per_k_block == 0 and main.k_blocks >= 1, main.summary()


def test_instructions_per_k_block_within_budget(loops):
    name, main, _ = loops
    assert main.per_k_block <= BUDGETS[name], f"{name} over its budget {BUDGETS[name]}:\n{main.format(full=True)}"


def test_no_r2ur_in_main_loop(loops):
    # NOTES: an R2UR in the loop means an address the WGMMA descriptor or a barrier needs was computed in vector
    # registers; it lengthens the DEPBAR -> next QGMMA path.
    name, _, every = loops
    for loop in every:
        assert loop.count("R2UR") == 0, f"{name}: R2UR in the main loop\n{loop.format(full=True)}"


def test_no_local_memory_in_main_loop(loops):
    # Register spills are tolerated outside the K loop (tests/jit/test_compile_wgrad.py), never inside it.
    name, _, every = loops
    for loop in every:
        assert loop.count("LDL", "STL") == 0, f"{name}: local-memory traffic in the main loop\n{loop.format(True)}"
