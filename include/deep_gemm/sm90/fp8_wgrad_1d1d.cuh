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

// Bytes of one stage's scale vector of `kRows` floats: a TMA destination must be 128-byte aligned.
template <uint32_t kRows>
constexpr uint32_t fp8_wgrad_scale_stage_bytes() {
    return align_up<uint32_t>(kRows * 4, 128);
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
    // ---- Compile-time shape ----
    constexpr uint32_t SHAPE_N = Config::SHAPE_N;
    constexpr uint32_t BLOCK_M = Config::BLOCK_M;
    constexpr uint32_t BLOCK_N = Config::BLOCK_N;
    constexpr uint32_t kNumStages = Config::kNumStages;
    constexpr uint32_t kMaxGroups = Config::kMaxGroups;
    using Epilogue = FP32AccumulateEpilogue<BLOCK_N, Config::kSwizzleDBytes>;

    // ---- Shared memory: the shell's layout (kernel_shell.cuh), with SA and SB per stage as scales ----
    constexpr uint32_t kSmemSAStride = fp8_wgrad_scale_stage_bytes<BLOCK_M>() / 4;  // floats per stage
    constexpr uint32_t kSmemSBStride = fp8_wgrad_scale_stage_bytes<BLOCK_N>() / 4;
    constexpr uint32_t kSmemDBytes = align_up<uint32_t>(num_math_threads<BLOCK_M>() / 128 * Epilogue::kSmemBytes, 1024);
    using Shell = KernelShell<Config, kSmemDBytes, kNumStages * (kSmemSAStride + kSmemSBStride) * 4>;
    using WGMMA = typename Shell::WGMMA;
    constexpr uint32_t kNumMathThreads = Shell::kNumMathThreads;
    constexpr uint32_t kNumMathWGs = Shell::kNumMathWGs;
    constexpr uint32_t kNumSubTiles = Shell::kNumSubTiles;
    constexpr uint32_t kNumAccum = Shell::kNumAccum;
    constexpr uint32_t kStageTxBytes = Shell::kSmemABytes + Shell::kSmemBBytes + BLOCK_M * 4 + BLOCK_N * 4;
    // NOTES: shared memory bandwidth is the limit here, and every warp needs all BLOCK_N column scales of a K block
    // (16 LDS.64 per warp at BLOCK_N = 128, ~25% on top of the WGMMA and TMA traffic of a 128x128 tile). Where the
    // registers allow, they are read once per K block and kept for both sub-tiles of a 256-row tile; otherwise they
    // are read chunk by chunk during each promotion.
    constexpr bool kPreloadSB = (kNumSubTiles + 1) * kNumAccum + kNumAccum / 2 <= 200;

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
    float* smem_sa = reinterpret_cast<float*>(shell.smem_scales);  // [stages][BLOCK_M (+pad)]
    float* smem_sb = smem_sa + kNumStages * kSmemSAStride;           // [stages][BLOCK_N (+pad)]
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
        auto load_scales = [&](const Tile& tile, uint32_t scale_row, uint32_t stage, const Barrier* bar) {
            const auto row = static_cast<int32_t>(scale_row);
            tma_load_2d(&tensor_map_sa, bar, smem_sa + stage * kSmemSAStride, static_cast<int32_t>(tile.row_base),
                        row, Shell::kCacheHint);
            tma_load_2d(&tensor_map_sb, bar, smem_sb + stage * kSmemSBStride,
                        static_cast<int32_t>(tile.n_block * BLOCK_N), row, Shell::kCacheHint);
        };
        shell.template produce<kStageTxBytes>(make_scheduler, operands, load_scales);
    } else {
        const auto wg = shell.math_warpgroup();
        const uint32_t lane_col = (wg.lane_idx % 4) * 2;  // this thread's columns: 8c + lane_col + {0, 1}
        // The 32-bit shared addresses of this thread's first SA / SB entries in stage 0.
        const uint32_t sa_addr = smem_u32(smem_sa) + wg.thread_row() * 4;
        const uint32_t sb_addr = smem_u32(smem_sb) + lane_col * 4;
        uint8_t* wg_smem_d = shell.smem_d + wg.math_wg * Epilogue::kSmemBytes;

        float partial[kNumAccum];
        float final_accum[kNumSubTiles][kNumAccum];

        // final += partial * SA(row) * SB(column), for the 8-column chunk c with column scales (sb0, sb1).
        auto promote_chunk = [&](float* final_acc, uint32_t c, float sa_lo, float sa_hi, float sb0, float sb1) {
            final_acc[c * 4 + 0] += partial[c * 4 + 0] * (sa_lo * sb0);
            final_acc[c * 4 + 1] += partial[c * 4 + 1] * (sa_lo * sb1);
            final_acc[c * 4 + 2] += partial[c * 4 + 2] * (sa_hi * sb0);
            final_acc[c * 4 + 3] += partial[c * 4 + 3] * (sa_hi * sb1);
        };

        // NOTES: the two math warpgroups take turns issuing their WGMMAs (named barriers 4 + wg), so that one
        // promotes while the other's WGMMAs run instead of both promoting together, except with one 64-row
        // sub-tile per warpgroup and preloaded column scales (128x152), whose promotion is short enough on its own.
        // H200, uniform descriptors (benchmarks/NOTES.md, issue 14): turns +8% at 256x112 and equal at 128x192, but
        // -16% at 128x152.
        constexpr bool kOrderedIssue = kNumMathThreads == 256 and (kNumSubTiles > 1 or not kPreloadSB);
        constexpr uint32_t kIssueBarrier = 4;
        auto wait_issue_turn = [&]() {
            if constexpr (kOrderedIssue)
                named_barrier_sync<256>(kIssueBarrier + wg.math_wg);
        };
        auto pass_issue_turn = [&]() {
            if constexpr (kOrderedIssue)
                named_barrier_arrive<256>(kIssueBarrier + 1 - wg.math_wg);
        };
        if (wg.math_wg == 1)
            pass_issue_turn();  // warpgroup 0 issues first

        auto scheduler = make_scheduler();
        Tile tile;
        typename Shell::Stages stages;
        while (scheduler.next(tile)) {
            const uint32_t num_k_blocks = groups.num_k_blocks[tile.group];
            if (num_k_blocks == 0)
                continue;  // an empty group: D[g] stays as it is

            #pragma unroll
            for (uint32_t s = 0; s < kNumSubTiles; ++s)
                #pragma unroll
                for (uint32_t i = 0; i < kNumAccum; ++i)
                    final_accum[s][i] = 0;

            #pragma unroll 1
            for (uint32_t k_block = 0; k_block < num_k_blocks; ++k_block) {
                shell.ring.wait_full(stages);
                const uint32_t sb_stage = sb_addr + stages.stage * kSmemSBStride * 4;
                // Column scales of this thread, read once per K block for all sub-tiles (while the WGMMAs run).
                float sb[kPreloadSB ? BLOCK_N / 4 : 1];
                #pragma unroll
                for (uint32_t s = 0; s < kNumSubTiles; ++s) {
                    wait_issue_turn();
                    wg.issue_mma(stages.stage, s, partial);
                    pass_issue_turn();

                    const uint32_t sa_stage = sa_addr + (stages.stage * kSmemSAStride + s * kNumMathWGs * WGMMA::M) * 4;
                    const float sa_lo = ld_shared_f32(sa_stage);
                    const float sa_hi = ld_shared_f32(sa_stage + 8 * 4);
                    if constexpr (kPreloadSB) {
                        if (s == 0) {
                            #pragma unroll
                            for (uint32_t c = 0; c < BLOCK_N / 8; ++c)
                                ld_shared_v2_f32(sb_stage + c * 8 * 4, sb[c * 2], sb[c * 2 + 1]);
                        }
                    }
                    wgmma_wait_group<0>();
                    #pragma unroll
                    for (uint32_t i = 0; i < kNumAccum; ++i)
                        wgmma_fence_operand(partial[i]);
                    if (kPreloadSB and s + 1 == kNumSubTiles)
                        wg.release(stages.stage);
                    #pragma unroll
                    for (uint32_t c = 0; c < BLOCK_N / 8; ++c) {
                        if constexpr (kPreloadSB) {
                            promote_chunk(final_accum[s], c, sa_lo, sa_hi, sb[c * 2], sb[c * 2 + 1]);
                        } else {
                            float sb0, sb1;
                            ld_shared_v2_f32(sb_stage + c * 8 * 4, sb0, sb1);
                            promote_chunk(final_accum[s], c, sa_lo, sa_hi, sb0, sb1);
                        }
                    }
                }
                if constexpr (not kPreloadSB)
                    wg.release(stages.stage);
                stages.advance();
            }

            // ---- Epilogue (per warpgroup and 64-row sub-tile): FP32 -> swizzled smem -> TMA reduce-add into D ----
            #pragma unroll
            for (uint32_t s = 0; s < kNumSubTiles; ++s) {
                wg.store_tile([&] { Epilogue::write_warp(wg_smem_d, final_accum[s], wg.warp_row, wg.lane_idx); },
                              [&](bool is_leader) {
                                  if (is_leader) {
                                      Epilogue::reduce_rows(&tensor_map_d, wg_smem_d, tile.group,
                                                            tile.row_base + wg.sub_tile_row(s), tile.n_block * BLOCK_N);
                                      tma_store_commit();
                                  }
                              });
            }
        }
        wg.finish();
        if (wg.math_wg == 0)
            wait_issue_turn();  // consume warpgroup 1's last pass (every arrival is matched before exit)
    }
    Shell::teardown();
#endif
}

}  // namespace deep_gemm::sm90
