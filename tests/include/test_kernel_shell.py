"""The sm90 kernel shell's policies (include/deep_gemm/sm90/kernel_shell.cuh, docs/kernel_shell.md), no GPU needed:
a kernel composed of other policies than the shipped kernels' (no promotion) compiles with NVRTC into a K loop
without promotion, and a policy that breaks its requirements fails to compile with the requirement's sentence."""
import pytest

from deep_gemm.jit import CompileError
from tools import sass
from deep_gemm.jit.compiler import NVRTCCompiler, check_ptxas_report

ARCH = "sm_90a"

CONFIG = """
#include <deep_gemm/sm90/epilogue.cuh>
#include <deep_gemm/sm90/kernel_shell.cuh>
#include <deep_gemm/sm90/mainloop.cuh>
#include <deep_gemm/sm90/promotion.cuh>

using namespace deep_gemm;
using namespace deep_gemm::sm90;

// 128 x 128 tiles, 4 stages: D 32768 + 4 x (A 16384 + B 16384) + no scales + 8 barriers.
struct Config {
    static constexpr uint32_t SHAPE_N = 4096;
    static constexpr uint32_t SHAPE_K = 4096;
    static constexpr uint32_t BLOCK_M = 128;
    static constexpr uint32_t BLOCK_N = 128;
    static constexpr uint32_t kNumStages = 4;
    static constexpr uint32_t kNumMulticast = 1;
    static constexpr bool kMulticastOnA = true;
    static constexpr uint32_t kSmemSize = 32768 + 4 * (16384 + 16384) + 8 * 8;
};
using Epilogue = BF16Epilogue<Config::BLOCK_M, Config::BLOCK_N, 128>;
"""

# An FP8 GEMM without scales: the shell with NoPromotion, whose WGMMAs accumulate all of K (AccumulatingKLoop), and
# the BF16 epilogue's TMA store. The composition a BF16 family makes, with FP8 operands (the shipped WGMMA wrappers).
UNSCALED_KERNEL = CONFIG + """
using Shell = KernelShell<Config, FP8E4M3Operands, NoPromotion, Epilogue>;

__global__ void __launch_bounds__(kernel_num_threads<Config>(), 1)
unscaled_fp8_gemm_impl(const __grid_constant__ TmaDescriptor tensor_map_a,
                       const __grid_constant__ TmaDescriptor tensor_map_b,
                       const __grid_constant__ TmaDescriptor tensor_map_d, const uint32_t shape_m) {
    constexpr uint32_t kNumKBlocks = Config::SHAPE_K / Shell::kStageK;
    extern __shared__ __align__(1024) uint8_t smem[];
    const Shell shell(smem);
    shell.setup(&tensor_map_a, &tensor_map_b, &tensor_map_d);
    using Scheduler = Shell::Scheduler<GemmType::Normal, Config::SHAPE_N>;
    auto make_scheduler = [&] { return Scheduler(shape_m, nullptr, 1); };
    if (Shell::is_producer()) {
        auto operands = [&](const Tile& tile) {
            TileOperands ops;
            ops.map_a = &tensor_map_a;
            ops.map_b = &tensor_map_b;
            ops.m_idx = static_cast<int32_t>(tile.row_base);
            ops.n_idx = static_cast<int32_t>(tile.n_block * Config::BLOCK_N);
            ops.num_k_blocks = kNumKBlocks;
            ops.scale_row = 0;
            ops.skip = false;
            ops.peer_shares_b = true;
            return ops;
        };
        shell.produce<Shell::stage_tx_bytes(Config::BLOCK_M)>(make_scheduler, operands, NoPromotion::Producer{});
    } else {
        const auto wg = shell.math_warpgroup();
        float accum[Shell::kNumSubTiles][Shell::kNumAccum];
        auto scheduler = make_scheduler();
        Tile tile;
        Shell::Stages stages;
        AccumulatingKLoop<Shell, NoPromotion> k_loop{shell, wg, stages, accum};
        while (scheduler.next(tile)) {
            k_loop.run(kNumKBlocks);
            wg.store_tile(
                [&] {
                    for (uint32_t s = 0; s < Shell::kNumSubTiles; ++s)
                        Epilogue::write_warp(shell.smem_d, accum[s], wg.sub_tile_row(s) + wg.warp_row, wg.lane_idx);
                },
                [&](bool is_leader) {
                    if (is_leader) {
                        for (uint32_t s = 0; s < Shell::kNumSubTiles; ++s)
                            Epilogue::store_rows(&tensor_map_d, shell.smem_d, wg.sub_tile_row(s), tile.row_base,
                                                 tile.n_block * Config::BLOCK_N);
                        tma_store_commit();
                    }
                });
        }
        wg.finish();
    }
    Shell::teardown();
}
"""


def test_a_non_promoting_composition_compiles_to_a_loop_without_promotion():
    result = NVRTCCompiler().compile(UNSCALED_KERNEL, ARCH, ptxas_verbose=True)
    check_ptxas_report(result.log, "unscaled_fp8_gemm_impl")  # raises on a stack frame or spills
    tool = sass.find_cuobjdump()
    if tool is None:
        pytest.skip("cuobjdump not found (pip install the `test` extra: nvidia-cuda-cuobjdump)")
    instructions = sass.pick_function(sass.disassemble(result.cubin, tool), "_impl")
    # 128-row tiles: two math warpgroups of one 64-row sub-tile, 4 k32 WGMMAs per K block each.
    main = sass.main_loop(instructions, 4)
    assert main.num_mma == 4, main.format(full=True)
    # No promotion: nothing scales or adds the accumulators on the CUDA cores inside the K loop.
    assert main.count("FFMA", "FMUL", "FADD") == 0, main.format(full=True)


OPERANDS_64_BYTES = """
struct HalfRowOperands {  // a K block of 64 one-byte elements: half a swizzle row
    static constexpr uint32_t kElementBytes = 1;
    static constexpr uint32_t kBlockK = 64;
    template <uint32_t BLOCK_N>
    using MMA = FP8WGMMA<BLOCK_N>;
};
using Shell = KernelShell<Config, HalfRowOperands, NoPromotion, Epilogue>;
"""

NO_PROMOTION_WITH_SCALES = """
struct ScalesUnused : NoPromotion {
    static constexpr uint32_t kSmemBytes = 1024;
};
using Shell = KernelShell<Config, FP8E4M3Operands, ScalesUnused, Epilogue>;
"""

UNALIGNED_SCALES = """
struct Unaligned : NoPromotion {
    static constexpr uint32_t kSmemBytes = 12;
    static constexpr bool kPromotes = true;
};
using Shell = KernelShell<Config, FP8E4M3Operands, Unaligned, Epilogue>;
"""

PROMOTING_POLICY_IN_AN_ACCUMULATING_LOOP = """
struct Promoting : NoPromotion {
    static constexpr bool kPromotes = true;
};
using Shell = KernelShell<Config, FP8E4M3Operands, Promoting, Epilogue>;
constexpr uint32_t kAccum = AccumulatingKLoop<Shell, Promoting>::kNumAccum;
"""


@pytest.mark.parametrize("policy, message", [
    (OPERANDS_64_BYTES, "one 128-byte swizzle row"),
    (NO_PROMOTION_WITH_SCALES, "a policy without promotion has no scales"),
    (UNALIGNED_SCALES, "keep the barriers after it aligned"),
    (PROMOTING_POLICY_IN_AN_ACCUMULATING_LOOP, "a promoting policy needs a promoting K loop"),
], ids=["operands", "no-promotion-scales", "unaligned-scales", "k-loop"])
def test_a_policy_breaking_its_requirements_fails_to_compile(policy, message):
    # Reading kSmemSize instantiates the shell, and with it the policies' checks.
    source = CONFIG + policy + "constexpr uint32_t kSmemSize = Shell::kSmemSize;\n__global__ void k() {}\n"
    with pytest.raises(CompileError, match=message):
        NVRTCCompiler().compile(source, ARCH)


def test_the_shipped_policies_compose_with_the_reference_config():
    # The same source with the FP8 policies compiles: the failures above are the broken requirement, not the frame.
    source = CONFIG + "using Shell = KernelShell<Config, FP8E4M3Operands, NoPromotion, Epilogue>;\n" \
                      "static_assert(Shell::kSmemSize == Config::kSmemSize, \"\");\n__global__ void k() {}\n"
    assert NVRTCCompiler().compile(source, ARCH).cubin[:4] == b"\x7fELF"
