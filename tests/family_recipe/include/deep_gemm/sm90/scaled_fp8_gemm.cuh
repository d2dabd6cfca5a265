#pragma once

// The tiny family of docs/adding_a_family.md: D (BF16) = (A @ B^T) * s, A [m, k] and B [n, k] FP8 E4M3 without
// scale factors, s a compile-time constant (Config::kScaleBits, the float's IEEE bits: Config members are unsigned
// integers). The sm90 kernel shell with the FP8 operands, no promotion (the WGMMAs accumulate all of K) and an
// epilogue that scales the accumulators before the BF16 epilogue writes them.

#include <deep_gemm/sm90/epilogue.cuh>
#include <deep_gemm/sm90/kernel_shell.cuh>
#include <deep_gemm/sm90/mainloop.cuh>
#include <deep_gemm/sm90/promotion.cuh>

namespace deep_gemm::sm90 {

// BF16Epilogue whose shared-memory writes first multiply the accumulators by the constant.
template <uint32_t BLOCK_M, uint32_t BLOCK_N, uint32_t kSwizzleBytes, uint32_t kScaleBits>
struct ScaledBF16Epilogue : BF16Epilogue<BLOCK_M, BLOCK_N, kSwizzleBytes> {
    using Base = BF16Epilogue<BLOCK_M, BLOCK_N, kSwizzleBytes>;

    __device__ __forceinline__ static void write_warp(uint8_t* smem_d, const float* acc, uint32_t row0,
                                                      uint32_t lane) {
        float scaled[BLOCK_N / 2];  // one warp's share of a 64 x BLOCK_N accumulator
        #pragma unroll
        for (uint32_t i = 0; i < BLOCK_N / 2; ++i)
            scaled[i] = acc[i] * __uint_as_float(kScaleBits);
        Base::write_warp(smem_d, scaled, row0, lane);
    }
};

template <typename Config>
__global__ void __launch_bounds__(kernel_num_threads<Config>(), 1)
scaled_fp8_gemm_impl(const __grid_constant__ TmaDescriptor tensor_map_a,
                     const __grid_constant__ TmaDescriptor tensor_map_b,
                     const __grid_constant__ TmaDescriptor tensor_map_d, const uint32_t shape_m) {
    using Epilogue = ScaledBF16Epilogue<Config::BLOCK_M, Config::BLOCK_N, 128, Config::kScaleBits>;
    using Shell = KernelShell<Config, FP8E4M3Operands, NoPromotion, Epilogue>;
    DG_STATIC_ASSERT(Config::SHAPE_K % Shell::kStageK == 0, "K must be a whole number of stages (no K tail)");
    constexpr uint32_t kNumKBlocks = Config::SHAPE_K / Shell::kStageK;
    extern __shared__ __align__(1024) uint8_t smem[];
    const Shell shell(smem);
    shell.setup(&tensor_map_a, &tensor_map_b, &tensor_map_d);
    using Scheduler = typename Shell::template Scheduler<GemmType::Normal, Config::SHAPE_N>;
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
        shell.template produce<Shell::stage_tx_bytes(Config::BLOCK_M)>(make_scheduler, operands,
                                                                        NoPromotion::Producer{});
    } else {
        const auto wg = shell.math_warpgroup();
        float accum[Shell::kNumSubTiles][Shell::kNumAccum];
        auto scheduler = make_scheduler();
        Tile tile;
        typename Shell::Stages stages;
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

}  // namespace deep_gemm::sm90
