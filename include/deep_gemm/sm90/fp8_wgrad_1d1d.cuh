#pragma once

// Hopper (sm_90a) FP8 weight-gradient GEMM: D[g] (FP32) += dequant(A_g[m, k_g]) * dequant(B_g[n, k_g])^T for
// g < num_groups, with 1x128 scales on BOTH operands (1D x 1D: one scale per row and 128-wide K block). A dense
// weight gradient is one group. All groups share m and n; each has its own K (MoE experts' token counts), its own
// A/B tensor maps (kernel parameters, so a CUDA graph replays them by value) and its own rows of the stacked scales.
// Structure as in fp8_gemm_1d2d.cuh: persistent, one TMA producer warpgroup, one or two WGMMA math warpgroups; every
// 128-wide K block's FP32 partial sums are promoted with SA(row) * SB(column); the epilogue adds the tile into D with
// a TMA reduce-add (D is read and written once, in L2; no separate read of C).

#include <deep_gemm/common/barrier.cuh>
#include <deep_gemm/common/scheduler.cuh>
#include <deep_gemm/common/tma.cuh>
#include <deep_gemm/common/utils.cuh>
#include <deep_gemm/sm90/epilogue.cuh>
#include <deep_gemm/sm90/mma.cuh>
#include <deep_gemm/sm90/pipeline.cuh>

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

template <uint32_t BLOCK_M>
constexpr uint32_t fp8_wgrad_num_math_threads() {
    return BLOCK_M == 64 ? 128 : 256;
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
    constexpr uint32_t d = align_up<uint32_t>(fp8_wgrad_num_math_threads<BLOCK_M>() / 128 * 64 * BLOCK_N * 4, 1024);
    constexpr uint32_t stage = BLOCK_M * kBlockK + BLOCK_N * kBlockK + fp8_wgrad_scale_stage_bytes<BLOCK_M>() +
                               fp8_wgrad_scale_stage_bytes<BLOCK_N>();
    return d + kNumStages * stage + kNumStages * 2 * 8;
}

template <uint32_t SHAPE_N, uint32_t BLOCK_M, uint32_t BLOCK_N, uint32_t kNumStages, uint32_t kNumMulticast,
          bool kMulticastOnA, uint32_t kSwizzleDBytes, uint32_t kMaxGroups, uint32_t kSmemSize>
__global__ void __launch_bounds__(fp8_wgrad_num_math_threads<BLOCK_M>() + kNumProducerThreads, 1)
fp8_wgrad_1d1d_impl(const __grid_constant__ WgradGroups<kMaxGroups> groups,
                    const __grid_constant__ TmaDescriptor tensor_map_sa,  // SA [sum_g ceil(k_g/128), m'] fp32
                    const __grid_constant__ TmaDescriptor tensor_map_sb,  // SB [sum_g ceil(k_g/128), n'] fp32
                    const __grid_constant__ TmaDescriptor tensor_map_d,   // D  [num_groups, m, n] fp32
                    const uint32_t shape_m,
                    const uint32_t num_groups) {
#if defined(__CUDA_ARCH__)
    // ---- Compile-time shape ----
    constexpr uint32_t kNumMathThreads = fp8_wgrad_num_math_threads<BLOCK_M>();
    constexpr uint32_t kNumMathWGs = kNumMathThreads / 128;
    constexpr uint32_t kNumSubTiles = BLOCK_M / (64 * kNumMathWGs);  // 64-row WGMMA tiles per math warpgroup
    using WGMMA = FP8WGMMA<BLOCK_N>;
    using Epilogue = FP32AccumulateEpilogue<BLOCK_N, kSwizzleDBytes>;
    constexpr uint32_t kNumAccum = WGMMA::kNumAccum;
    // NOTES: shared memory bandwidth is the limit here, and every warp needs all BLOCK_N column scales of a K block
    // (16 LDS.64 per warp at BLOCK_N = 128, ~25% on top of the WGMMA and TMA traffic of a 128x128 tile). Where the
    // registers allow, they are read once per K block and kept for both sub-tiles of a 256-row tile; otherwise they
    // are read chunk by chunk during each promotion.
    constexpr bool kPreloadSB = (kNumSubTiles + 1) * kNumAccum + kNumAccum / 2 <= 200;

    DG_STATIC_ASSERT(BLOCK_M == 64 or BLOCK_M == 128 or BLOCK_M == 256, "BLOCK_M must be 64, 128 or 256");
    DG_STATIC_ASSERT(BLOCK_N % 8 == 0 and BLOCK_N >= 16 and BLOCK_N <= 256,
                     "BLOCK_N must be a multiple of 8 in [16, 256]");
    DG_STATIC_ASSERT(kNumStages >= 1, "at least one pipeline stage");
    DG_STATIC_ASSERT(kNumMulticast == 1 or kNumMulticast == 2, "TMA multicast is over 1 or 2 CTAs");
    DG_STATIC_ASSERT(kMaxGroups >= 1, "at least one group");
    DG_STATIC_ASSERT(sizeof(WgradGroups<kMaxGroups>) + 3 * sizeof(TmaDescriptor) + 64 <= 32764,
                     "the per-group operands exceed the kernel parameter limit");

    // ---- Shared memory ----
    constexpr uint32_t kSmemABytes = BLOCK_M * kBlockK;  // [BLOCK_M, 128] e4m3, 128B-swizzled
    constexpr uint32_t kSmemBBytes = BLOCK_N * kBlockK;  // [BLOCK_N, 128] e4m3, 128B-swizzled
    constexpr uint32_t kStageTxBytes = kSmemABytes + kSmemBBytes + BLOCK_M * 4 + BLOCK_N * 4;
    constexpr uint32_t kSmemSAStride = fp8_wgrad_scale_stage_bytes<BLOCK_M>() / 4;  // floats per stage
    constexpr uint32_t kSmemSBStride = fp8_wgrad_scale_stage_bytes<BLOCK_N>() / 4;
    constexpr uint32_t kSmemDBytes = align_up<uint32_t>(kNumMathWGs * Epilogue::kSmemBytes, 1024);
    DG_STATIC_ASSERT(kSmemSize == (fp8_wgrad_smem_size<BLOCK_M, BLOCK_N, kNumStages>()),
                     "host and device disagree on the shared-memory size");
    DG_STATIC_ASSERT(kSmemSize <= kSmemBudget, "configuration exceeds the 232448-byte shared-memory budget");
    DG_STATIC_ASSERT(Epilogue::kSmemBytes % 1024 == 0, "each warpgroup's D tile must stay 1024-byte aligned");

    extern __shared__ __align__(1024) uint8_t smem[];
    uint8_t* smem_d = smem;                                                         // [math WGs][64, BLOCK_N] fp32
    uint8_t* smem_a = smem + kSmemDBytes;                                           // [stages][BLOCK_M, 128]
    uint8_t* smem_b = smem_a + kNumStages * kSmemABytes;                            // [stages][BLOCK_N, 128]
    float* smem_sa = reinterpret_cast<float*>(smem_b + kNumStages * kSmemBBytes);  // [stages][BLOCK_M (+pad)]
    float* smem_sb = smem_sa + kNumStages * kSmemSAStride;                          // [stages][BLOCK_N (+pad)]
    Barrier* full_barriers = reinterpret_cast<Barrier*>(smem_sb + kNumStages * kSmemSBStride);  // [stages]
    Barrier* empty_barriers = full_barriers + kNumStages;                                 // [stages]

    const uint32_t warp_idx = __shfl_sync(0xffffffff, threadIdx.x / 32, 0);
    const uint32_t lane_idx = threadIdx.x % 32;
    const bool is_tma_thread = threadIdx.x == kNumMathThreads;

    // ---- Descriptor prefetch and barrier init ----
    if (is_tma_thread) {
        prefetch_tma_descriptor(&tensor_map_sa);
        prefetch_tma_descriptor(&tensor_map_sb);
        prefetch_tma_descriptor(&tensor_map_d);
        init_stage_barriers<kNumStages, kNumMulticast, kNumMathThreads>(full_barriers, empty_barriers);
    }
    if constexpr (kNumMulticast > 1)
        cluster_sync();
    else
        __syncthreads();

    // NOTES: tiles t and t + 1 share the multicast operand's block (and, per-group tile counts being even, the group).
    using Scheduler = TileScheduler<GemmType::KGrouped, BLOCK_M, BLOCK_N, SHAPE_N,
                                    not (kNumMulticast > 1 and not kMulticastOnA)>;

    if (threadIdx.x >= kNumMathThreads) {
        // ================= Producer warpgroup =================
        warpgroup_reg_dealloc<40>();
        if (is_tma_thread) {
            constexpr uint64_t kCacheHint = kTmaCacheHintEvictNormal;
            const bool is_leader = kNumMulticast == 1 or block_rank_in_cluster() == 0;
            Scheduler scheduler(shape_m, nullptr, num_groups);
            Tile tile;
            uint32_t stage = 0, phase = 0;
            while (scheduler.next(tile)) {
                const uint32_t num_k_blocks = groups.num_k_blocks[tile.group];
                const uint32_t kb_offset = groups.k_block_offset[tile.group];
                const TmaDescriptor* map_a = &groups.a[tile.group];
                const TmaDescriptor* map_b = &groups.b[tile.group];
                const auto m_idx = static_cast<int32_t>(tile.row_base);
                const auto n_idx = static_cast<int32_t>(tile.n_block * BLOCK_N);
                #pragma unroll 4
                for (uint32_t k_block = 0; k_block < num_k_blocks; ++k_block) {
                    empty_barriers[stage].wait(phase ^ 1);
                    const Barrier* bar = &full_barriers[stage];
                    full_barriers[stage].arrive_and_expect_tx(kStageTxBytes);
                    const auto k_idx = static_cast<int32_t>(k_block * kBlockK);
                    uint8_t* dst_a = smem_a + stage * kSmemABytes;
                    uint8_t* dst_b = smem_b + stage * kSmemBBytes;
                    tma_load_operand<(kNumMulticast > 1 and kMulticastOnA)>(map_a, bar, dst_a, k_idx, m_idx, is_leader,
                                                                          kCacheHint);
                    tma_load_operand<(kNumMulticast > 1 and not kMulticastOnA)>(map_b, bar, dst_b, k_idx, n_idx,
                                                                              is_leader, kCacheHint);
                    const auto kb_row = static_cast<int32_t>(kb_offset + k_block);
                    tma_load_2d(&tensor_map_sa, bar, smem_sa + stage * kSmemSAStride, m_idx, kb_row, kCacheHint);
                    tma_load_2d(&tensor_map_sb, bar, smem_sb + stage * kSmemSBStride, n_idx, kb_row, kCacheHint);
                    advance_stage<kNumStages>(stage, phase);
                }
            }
        }
    } else {
        // ================= Math warpgroups =================
        warpgroup_reg_alloc<kNumMathThreads == 128 ? 248 : 232>();
        // NOTES: shuffled so that the compiler knows it is warp-uniform (see fp8_gemm_1d2d.cuh).
        const uint32_t math_wg = __shfl_sync(0xffffffff, threadIdx.x / 128, 0);
        const uint32_t wg_thread = threadIdx.x % 128;
        const uint32_t warp_row = (warp_idx % 4) * 16;  // the warp's first row inside the warpgroup's 64 rows
        const uint32_t lane_row = lane_idx / 4;          // this thread's rows: lane_row and lane_row + 8
        const uint32_t lane_col = (lane_idx % 4) * 2;    // and columns 8c + lane_col + {0, 1}
        // Descriptor low words of this warpgroup's first A sub-tile and of B in stage 0 (see mma.cuh), and the
        // 32-bit shared addresses of this thread's first SA / SB entries in stage 0.
        const uint32_t a_desc_lo =
            __shfl_sync(0xffffffff, kmajor_sw128_desc_lo(smem_u32(smem_a) + math_wg * WGMMA::M * kBlockK), 0);
        const uint32_t b_desc_lo = __shfl_sync(0xffffffff, kmajor_sw128_desc_lo(smem_u32(smem_b)), 0);
        const uint32_t sa_addr = smem_u32(smem_sa) + (math_wg * WGMMA::M + warp_row + lane_row) * 4;
        const uint32_t sb_addr = smem_u32(smem_sb) + lane_col * 4;
        uint8_t* wg_smem_d = smem_d + math_wg * Epilogue::kSmemBytes;

        float partial[kNumAccum];
        float final_accum[kNumSubTiles][kNumAccum];

        // The stage's A/B/scales are consumed: let the producer(s) refill it.
        auto release = [&](uint32_t stage) { release_stage<kNumMulticast>(empty_barriers[stage], lane_idx); };
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
                named_barrier_sync<256>(kIssueBarrier + math_wg);
        };
        auto pass_issue_turn = [&]() {
            if constexpr (kOrderedIssue)
                named_barrier_arrive<256>(kIssueBarrier + 1 - math_wg);
        };
        if (math_wg == 1)
            pass_issue_turn();  // warpgroup 0 issues first

        Scheduler scheduler(shape_m, nullptr, num_groups);
        Tile tile;
        uint32_t stage = 0, phase = 0;
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
                full_barriers[stage].wait(phase);
                const uint32_t sb_stage = sb_addr + stage * kSmemSBStride * 4;
                // Column scales of this thread, read once per K block for all sub-tiles (while the WGMMAs run).
                float sb[kPreloadSB ? BLOCK_N / 4 : 1];
                #pragma unroll
                for (uint32_t s = 0; s < kNumSubTiles; ++s) {
                    wait_issue_turn();
                    #pragma unroll
                    for (uint32_t i = 0; i < kNumAccum; ++i)
                        wgmma_fence_operand(partial[i]);
                    wgmma_fence();
                    WGMMA::template mma_k_block<kBlockK>(
                        a_desc_lo + (stage * kSmemABytes + s * kNumMathWGs * WGMMA::M * kBlockK) / 16,
                        b_desc_lo + stage * (kSmemBBytes / 16), partial);
                    wgmma_commit_group();
                    pass_issue_turn();
                    #pragma unroll
                    for (uint32_t i = 0; i < kNumAccum; ++i)
                        wgmma_fence_operand(partial[i]);

                    const uint32_t sa_stage = sa_addr + (stage * kSmemSAStride + s * kNumMathWGs * WGMMA::M) * 4;
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
                        release(stage);
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
                    release(stage);
                advance_stage<kNumStages>(stage, phase);
            }

            // ---- Epilogue (per warpgroup and 64-row sub-tile): FP32 -> swizzled smem -> TMA reduce-add into D ----
            const bool is_wg_leader = wg_thread == 0;
            #pragma unroll
            for (uint32_t s = 0; s < kNumSubTiles; ++s) {
                // The warpgroup's previous reduce must have read its smem tile before it is overwritten.
                if (is_wg_leader)
                    tma_store_wait<0>();
                named_barrier_sync<128>(2 + math_wg);
                Epilogue::write_warp(wg_smem_d, final_accum[s], warp_row, lane_idx);
                fence_proxy_async_shared();
                named_barrier_sync<128>(2 + math_wg);
                if (is_wg_leader) {
                    Epilogue::reduce_rows(&tensor_map_d, wg_smem_d, tile.group,
                                          tile.row_base + (s * kNumMathWGs + math_wg) * WGMMA::M,
                                          tile.n_block * BLOCK_N);
                    tma_store_commit();
                }
            }
        }
        if (wg_thread == 0)
            tma_store_wait<0>();
        if (math_wg == 0)
            wait_issue_turn();  // consume warpgroup 1's last pass (every arrival is matched before exit)
    }

    // NOTES: a CTA must outlive every remote barrier arrival and multicast write its cluster peer still sends.
    if constexpr (kNumMulticast > 1)
        cluster_sync();
#endif
}

}  // namespace deep_gemm::sm90
