#pragma once

// Hopper (sm_90a) FP8 weight-gradient GEMM: D[g] (FP32) += dequant(A_g[m, k_g]) * dequant(B_g[n, k_g])^T for
// g < num_groups, with 1x128 scales on BOTH operands (1D x 1D: one scale per row and 128-wide K block). A dense
// weight gradient is one group. All groups share m and n; each has its own K (MoE experts' token counts), its own
// A/B tensor maps (kernel parameters, so a CUDA graph replays them by value) and its own rows of the stacked scales.
// Composed in the sm90 kernel shell (kernel_shell.cuh) like fp8_gemm_1d2d.cuh; this kernel's own: SA and SB per
// stage, a K loop that promotes every 128-wide K block's FP32 partial sums with SA(row) * SB(column), and an
// epilogue that adds the tile into D with a TMA reduce-add (D is read and written once, in L2; no separate read of C).

#include <deep_gemm/common/scheduler.cuh>
#include <deep_gemm/common/utils.cuh>
#include <deep_gemm/sm90/epilogue.cuh>
#include <deep_gemm/sm90/kernel_shell.cuh>
#include <deep_gemm/sm90/mainloop.cuh>
#include <deep_gemm/sm90/promotion.cuh>

#if defined(__CUDA_ARCH__) and not defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "deep_gemm: the sm90 kernels need the arch-specific target sm_90a (plain sm_90 has no WGMMA/setmaxnreg)"
#endif

namespace deep_gemm::sm90 {

// Per-group operands, passed by value as one kernel parameter (kMaxGroups * 264 bytes; the host keeps it under the
// 32 KiB parameter limit).
template <uint32_t kMaxGroups>
struct WgradGroups {
    TmaDescriptor a[kMaxGroups];          // A_g [m, k_g] e4m3, K-major
    TmaDescriptor b[kMaxGroups];          // B_g [n, k_g] e4m3, K-major
    uint32_t num_k_blocks[kMaxGroups];    // ceil(k_g / 128); 0 = an empty group (D[g] untouched)
    uint32_t k_block_offset[kMaxGroups];  // the group's first row in SA and SB
};

// Config::kMaxGroups, read in a function body (see kernel_num_threads).
template <typename Config>
constexpr uint32_t wgrad_max_groups() {
    return Config::kMaxGroups;
}

// Shared-memory bytes of one instantiation; mirrored by the host (heuristics/sm90_wgrad.py), asserted below.
// The D buffer is one 64-row FP32 tile per math warpgroup (a 256-row tile's second sub-tile reuses it).
template <uint32_t BLOCK_M, uint32_t BLOCK_N, uint32_t kNumStages>
constexpr uint32_t fp8_wgrad_smem_size() {
    constexpr uint32_t d = align_up<uint32_t>(num_math_threads<BLOCK_M>() / 128 * 64 * BLOCK_N * 4, 1024);
    constexpr uint32_t stage = BLOCK_M * kBlockK + BLOCK_N * kBlockK + fp8_wgrad_scale_stage_bytes<BLOCK_M>() +
                               fp8_wgrad_scale_stage_bytes<BLOCK_N>();
    return d + kNumStages * stage + kNumStages * 2 * 8;
}

// Config (see kernel_shell.cuh): SHAPE_N, BLOCK_M, BLOCK_N, kNumStages, kNumMulticast, kMulticastOnA,
// kSwizzleDBytes, kMaxGroups, kSmemSize.
template <typename Config>
__global__ void __launch_bounds__(kernel_num_threads<Config>(), 1)
fp8_wgrad_gemm_1d1d_impl(const __grid_constant__ WgradGroups<wgrad_max_groups<Config>()> groups,
                         const __grid_constant__ TmaDescriptor tensor_map_sa,  // SA [sum_g ceil(k_g/128), m'] fp32
                         const __grid_constant__ TmaDescriptor tensor_map_sb,  // SB [sum_g ceil(k_g/128), n'] fp32
                         const __grid_constant__ TmaDescriptor tensor_map_d,   // D  [num_groups, m, n] fp32
                         const uint32_t shape_m,
                         const uint32_t num_groups) {
#if defined(__CUDA_ARCH__)
    // ---- Compile-time shape and the composition: FP8 operands, per-128-K row x column promotion, FP32 accumulate ----
    constexpr uint32_t SHAPE_N = Config::SHAPE_N;
    constexpr uint32_t BLOCK_M = Config::BLOCK_M;
    constexpr uint32_t BLOCK_N = Config::BLOCK_N;
    constexpr uint32_t kNumStages = Config::kNumStages;
    constexpr uint32_t kMaxGroups = Config::kMaxGroups;
    using Promotion = FP8RowColPromotion<Config>;
    using Epilogue = WarpgroupTileEpilogue<BLOCK_N, Config::kSwizzleDBytes, true, true>;  // FP32, reduce-add
    using Shell = KernelShell<Config, FP8E4M3Operands, Promotion, Epilogue>;
    using KLoop = RowColKLoop<Shell, Promotion>;
    constexpr uint32_t kNumSubTiles = Shell::kNumSubTiles;
    constexpr uint32_t kNumAccum = Shell::kNumAccum;
    constexpr uint32_t kStageTxBytes = Shell::stage_tx_bytes(BLOCK_M);

    DG_STATIC_ASSERT(BLOCK_N % 8 == 0 and BLOCK_N >= 16 and BLOCK_N <= 256,
                     "BLOCK_N must be a multiple of 8 in [16, 256]");
    DG_STATIC_ASSERT(kMaxGroups >= 1, "at least one group");
    DG_STATIC_ASSERT(sizeof(WgradGroups<kMaxGroups>) + 3 * sizeof(TmaDescriptor) + 64 <= 32764,
                     "the per-group operands exceed the kernel parameter limit");
    DG_STATIC_ASSERT(Config::kSmemSize == (fp8_wgrad_smem_size<BLOCK_M, BLOCK_N, kNumStages>()),
                     "host and device disagree on the shared-memory size");
    DG_STATIC_ASSERT(Epilogue::kSmemBytes % 1024 == 0, "each warpgroup's D tile must stay 1024-byte aligned");

    extern __shared__ __align__(1024) uint8_t smem[];
    const Shell shell(smem);
    shell.setup(&tensor_map_sa, &tensor_map_sb, &tensor_map_d);
    // NOTES: per-group tile counts are even, so a multicast pair never straddles two groups.
    using Scheduler = typename Shell::template Scheduler<GemmType::KGrouped, SHAPE_N>;
    auto make_scheduler = [&] { return Scheduler(shape_m, nullptr, num_groups); };

    if (Shell::is_producer()) {
        auto operands = [&](const Tile& tile) {
            TileOperands ops;
            ops.map_a = &groups.a[tile.group];
            ops.map_b = &groups.b[tile.group];
            ops.m_idx = static_cast<int32_t>(tile.row_base);
            ops.n_idx = static_cast<int32_t>(tile.n_block * BLOCK_N);
            ops.num_k_blocks = groups.num_k_blocks[tile.group];
            ops.scale_row = groups.k_block_offset[tile.group];
            ops.skip = false;
            ops.peer_shares_b = true;
            return ops;
        };
        const typename Promotion::Producer scales{&tensor_map_sa, &tensor_map_sb, Promotion::smem_sa(shell.smem_scales),
                                                  Promotion::smem_sb(shell.smem_scales)};
        shell.template produce<kStageTxBytes>(make_scheduler, operands, scales);
    } else {
        const auto wg = shell.math_warpgroup();
        const typename Promotion::Math promotion(shell.smem_scales, wg);
        uint8_t* wg_smem_d = shell.smem_d + wg.math_wg * Epilogue::kSmemBytes;
        const typename KLoop::Turns turns{wg.math_wg};
        float partial[kNumAccum];
        float final_accum[kNumSubTiles][kNumAccum];
        turns.start();

        auto scheduler = make_scheduler();
        Tile tile;
        typename Shell::Stages stages;
        KLoop k_loop{shell, wg, promotion, turns, stages, partial, final_accum};
        while (scheduler.next(tile)) {
            const uint32_t num_k_blocks = groups.num_k_blocks[tile.group];
            if (num_k_blocks == 0)
                continue;  // an empty group: D[g] stays as it is

            #pragma unroll
            for (uint32_t s = 0; s < kNumSubTiles; ++s)
                #pragma unroll
                for (uint32_t i = 0; i < kNumAccum; ++i)
                    final_accum[s][i] = 0;
            k_loop.run(num_k_blocks);

            // ---- Epilogue (per warpgroup and 64-row sub-tile): FP32 -> swizzled smem -> TMA reduce-add into D ----
            #pragma unroll
            for (uint32_t s = 0; s < kNumSubTiles; ++s) {
                wg.store_tile([&] { Epilogue::write_warp(wg_smem_d, final_accum[s], wg.warp_row, wg.lane_idx); },
                              [&](bool is_leader) {
                                  if (is_leader) {
                                      Epilogue::store(&tensor_map_d, wg_smem_d, tile.group,
                                                      tile.row_base + wg.sub_tile_row(s), tile.n_block * BLOCK_N);
                                      tma_store_commit();
                                  }
                              });
            }
        }
        wg.finish();
        turns.finish();
    }
    Shell::teardown();
#endif
}

}  // namespace deep_gemm::sm90
