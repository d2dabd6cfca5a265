#pragma once

// Hopper (sm_90a) BF16 GEMM: D[m, n] (BF16 or FP32) = A[m, k] * B[n, k]^T, or with kAccumulate D += A * B^T (the host
// copies C into D first when they differ). Each operand is K-major or MN-major (a transposed view: DeepGEMM's
// nt / nn / tn / tt forms), read by TMA into 128B-swizzled stages that WGMMA reads in either layout. Composed in the
// sm90 kernel shell (kernel_shell.cuh): BF16 operands (mma.cuh), no promotion (the WGMMAs accumulate into the tile's
// FP32 registers across K), and a per-warpgroup output tile stored or reduce-added by TMA (epilogue.cuh).

#include <deep_gemm/common/scheduler.cuh>
#include <deep_gemm/common/utils.cuh>
#include <deep_gemm/sm90/epilogue.cuh>
#include <deep_gemm/sm90/kernel_shell.cuh>
#include <deep_gemm/sm90/mainloop.cuh>
#include <deep_gemm/sm90/mma.cuh>
#include <deep_gemm/sm90/promotion.cuh>

#if defined(__CUDA_ARCH__) and not defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "deep_gemm: the sm90 kernels need the arch-specific target sm_90a (plain sm_90 has no WGMMA/setmaxnreg)"
#endif

namespace deep_gemm::sm90 {

// Shared-memory bytes of one instantiation; mirrored by the host (heuristics/sm90_bf16.py), asserted below.
template <uint32_t BLOCK_M, uint32_t BLOCK_N, uint32_t kNumStages, bool kOutputFP32>
constexpr uint32_t bf16_gemm_smem_size() {
    constexpr uint32_t d = num_math_threads<BLOCK_M>() / 128 * 64 * BLOCK_N * (kOutputFP32 ? 4 : 2);
    return d + kNumStages * (BLOCK_M + BLOCK_N) * 128 + kNumStages * 2 * 8;
}

// Config (see kernel_shell.cuh): SHAPE_N, BLOCK_M, BLOCK_N, kNumStages, kNumMulticast, kMulticastOnA, kSwizzleDBytes,
// kSmemSize, kMNMajorA / kMNMajorB (the operand is [k, m] / [k, n] with unit stride along m / n), kOutputFP32 (D is
// FP32, else BF16) and kAccumulate (D += A B^T with a TMA reduce-add, else D = A B^T with a TMA store).
// K is a run-time value (num_k_blocks = ceil(k / 64); TMA reads zeros past k).
template <typename Config>
__global__ void __launch_bounds__(kernel_num_threads<Config>(), 1)
bf16_gemm_impl(const __grid_constant__ TmaDescriptor tensor_map_a,  // A [m, k] or, MN-major, [k, m] bf16
               const __grid_constant__ TmaDescriptor tensor_map_b,  // B [n, k] or, MN-major, [k, n] bf16
               const __grid_constant__ TmaDescriptor tensor_map_d,  // D [1, m, n] bf16 or fp32
               const uint32_t shape_m,
               const uint32_t num_k_blocks) {
#if defined(__CUDA_ARCH__)
    // ---- Compile-time shape and the composition: BF16 operands, no promotion, per-warpgroup output tiles ----
    constexpr uint32_t SHAPE_N = Config::SHAPE_N;
    constexpr uint32_t BLOCK_M = Config::BLOCK_M;
    constexpr uint32_t BLOCK_N = Config::BLOCK_N;
    using Operands = BF16Operands<Config::kMNMajorA, Config::kMNMajorB>;
    using Epilogue =
        WarpgroupTileEpilogue<BLOCK_N, Config::kSwizzleDBytes, Config::kOutputFP32, Config::kAccumulate>;
    using Shell = KernelShell<Config, Operands, NoPromotion, Epilogue>;
    using KLoop = AccumulatingKLoop<Shell, NoPromotion>;
    constexpr uint32_t kNumSubTiles = Shell::kNumSubTiles;
    constexpr uint32_t kNumAccum = Shell::kNumAccum;
    constexpr uint32_t kStageTxBytes = Shell::stage_tx_bytes(BLOCK_M);

    DG_STATIC_ASSERT(BLOCK_N % 16 == 0 and BLOCK_N >= 16 and BLOCK_N <= 256,
                     "BLOCK_N must be a multiple of 16 in [16, 256]");
    DG_STATIC_ASSERT(not Config::kMNMajorB or BLOCK_N % 64 == 0, "an MN-major B needs whole 64-wide column chunks");
    DG_STATIC_ASSERT(kNumSubTiles * kNumAccum <= 128, "accumulators would not fit in the register budget");
    DG_STATIC_ASSERT(Config::kSmemSize ==
                         (bf16_gemm_smem_size<BLOCK_M, BLOCK_N, Config::kNumStages, Config::kOutputFP32>()),
                     "host and device disagree on the shared-memory size");

    extern __shared__ __align__(1024) uint8_t smem[];
    const Shell shell(smem);
    shell.setup(&tensor_map_a, &tensor_map_b, &tensor_map_d);
    using Scheduler = typename Shell::template Scheduler<GemmType::Normal, SHAPE_N>;
    auto make_scheduler = [&] { return Scheduler(shape_m); };

    if (Shell::is_producer()) {
        auto operands = [&](const Tile& tile) {
            TileOperands ops;
            ops.map_a = &tensor_map_a;
            ops.map_b = &tensor_map_b;
            ops.m_idx = static_cast<int32_t>(tile.row_base);
            ops.n_idx = static_cast<int32_t>(tile.n_block * BLOCK_N);
            ops.num_k_blocks = num_k_blocks;
            ops.scale_row = 0;
            ops.skip = false;
            ops.peer_shares_b = true;
            return ops;
        };
        shell.template produce<kStageTxBytes>(make_scheduler, operands, NoPromotion::Producer{});
    } else {
        const auto wg = shell.math_warpgroup();
        uint8_t* wg_smem_d = shell.smem_d + wg.math_wg * Epilogue::kSmemBytes;
        float accum[kNumSubTiles][kNumAccum];

        auto scheduler = make_scheduler();
        Tile tile;
        typename Shell::Stages stages;
        KLoop k_loop{shell, wg, stages, accum};
        while (scheduler.next(tile)) {
            k_loop.run(num_k_blocks);
            // ---- Epilogue (per warpgroup and 64-row sub-tile): FP32 -> BF16 / FP32 smem tile -> TMA ----
            #pragma unroll
            for (uint32_t s = 0; s < kNumSubTiles; ++s) {
                wg.store_tile([&] { Epilogue::write_warp(wg_smem_d, accum[s], wg.warp_row, wg.lane_idx); },
                              [&](bool is_leader) {
                                  if (is_leader) {
                                      Epilogue::store(&tensor_map_d, wg_smem_d, 0, tile.row_base + wg.sub_tile_row(s),
                                                      tile.n_block * BLOCK_N);
                                      tma_store_commit();
                                  }
                              });
            }
        }
        wg.finish();
    }
    Shell::teardown();
#endif
}

}  // namespace deep_gemm::sm90
