#pragma once

// Hopper (sm_90a) FP8 GEMM, D[m, n] (BF16) = dequant(A[m, k]) * dequant(B[n, k])^T, with 1x128 LHS scales (1D)
// and 128x128 RHS scales (2D). Persistent and warp-specialised: one TMA producer warpgroup and one or two WGMMA
// math warpgroups; FP32 partial sums of every 128-wide K block are scaled and promoted into FP32 registers.

#include <cuda_bf16.h>

#include <cute/arch/cluster_sm90.hpp>
#include <cute/arch/copy_sm90_desc.hpp>
#include <cute/arch/copy_sm90_tma.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/arch/reg_reconfig.h>

#include <deep_gemm/common/scheduler.cuh>
#include <deep_gemm/common/utils.cuh>
#include <deep_gemm/sm90/epilogue.cuh>
#include <deep_gemm/sm90/mma.cuh>

#if defined(__CUDA_ARCH__) and not defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "deep_gemm: the sm90 kernels need the arch-specific target sm_90a (plain sm_90 has no WGMMA/setmaxnreg)"
#endif

namespace deep_gemm::sm90 {

constexpr uint32_t kBlockK = 128;             // = the scale granularity along K
constexpr uint32_t kNumProducerThreads = 128;  // one warpgroup; one elected thread issues every TMA
constexpr uint32_t kSmemBudget = 232448;       // opt-in shared memory per block on H100/H200

template <uint32_t BLOCK_M>
constexpr uint32_t fp8_gemm_num_math_threads() {
    return BLOCK_M == 64 ? 128 : 256;
}

// Whether a BLOCK_N-wide tile can span two 128-wide RHS scale blocks.
template <uint32_t BLOCK_N>
constexpr bool fp8_gemm_may_straddle() {
    return 128 % BLOCK_N != 0;
}

// Shared-memory bytes of one instantiation; the host computes the same number (heuristics/sm90.py) and passes it
// as kSmemSize, and the kernel static-asserts that the two agree.
template <uint32_t SHAPE_K, uint32_t BLOCK_M, uint32_t BLOCK_N, uint32_t kNumStages>
constexpr uint32_t fp8_gemm_smem_size() {
    constexpr uint32_t kNumKBlocks = ceil_div(SHAPE_K, kBlockK);
    constexpr uint32_t d = align_up<uint32_t>(BLOCK_M * BLOCK_N * 2, 1024);
    constexpr uint32_t stage = BLOCK_M * kBlockK + BLOCK_N * kBlockK + BLOCK_M * 4;
    constexpr uint32_t sb = align_up<uint32_t>(kNumKBlocks * (fp8_gemm_may_straddle<BLOCK_N>() ? 2 : 1) * 4, 8);
    return d + kNumStages * stage + sb + kNumStages * 2 * 8;
}

template <uint32_t SHAPE_N, uint32_t SHAPE_K, uint32_t BLOCK_M, uint32_t BLOCK_N, uint32_t kNumStages,
          uint32_t kNumMulticast, bool kMulticastOnA, uint32_t kSwizzleDBytes, uint32_t kSmemSize>
__global__ void __launch_bounds__(fp8_gemm_num_math_threads<BLOCK_M>() + kNumProducerThreads, 1)
fp8_gemm_1d2d_impl(const __grid_constant__ cute::TmaDescriptor tensor_map_a,   // A  [m, k] e4m3, K-major
                   const __grid_constant__ cute::TmaDescriptor tensor_map_b,   // B  [n, k] e4m3, K-major
                   const __grid_constant__ cute::TmaDescriptor tensor_map_sa,  // SA [ceil(k/128), m'] fp32, MN-major
                   const __grid_constant__ cute::TmaDescriptor tensor_map_d,   // D  [m, n] bf16
                   const float* __restrict__ sb,                              // SB [ceil(n/128), ceil(k/128)] fp32
                   const uint32_t shape_m) {
#if defined(__CUDA_ARCH__)
    // ---- Compile-time shape ----
    constexpr uint32_t kNumMathThreads = fp8_gemm_num_math_threads<BLOCK_M>();
    constexpr uint32_t kNumMathWGs = kNumMathThreads / 128;
    constexpr uint32_t kNumSubTiles = BLOCK_M / (64 * kNumMathWGs);  // 64-row WGMMA tiles per math warpgroup
    constexpr uint32_t kNumKBlocks = ceil_div(SHAPE_K, kBlockK);
    constexpr uint32_t kNumSBBlocks = ceil_div(SHAPE_N, 128u);
    constexpr bool kMayStraddle = fp8_gemm_may_straddle<BLOCK_N>();
    using WGMMA = FP8WGMMA<BLOCK_N>;
    using Epilogue = BF16Epilogue<BLOCK_M, BLOCK_N, kSwizzleDBytes>;
    constexpr uint32_t kNumAccum = WGMMA::kNumAccum;

    DG_STATIC_ASSERT(BLOCK_M == 64 or BLOCK_M == 128 or BLOCK_M == 256, "BLOCK_M must be 64, 128 or 256");
    DG_STATIC_ASSERT(BLOCK_N % 8 == 0 and BLOCK_N >= 8 and BLOCK_N <= 256, "BLOCK_N must be a multiple of 8 in [8, 256]");
    DG_STATIC_ASSERT(BLOCK_N <= 128 + const_gcd(BLOCK_N, 128u),
                     "a BLOCK_N tile may touch at most two 128-wide RHS scale blocks");
    DG_STATIC_ASSERT(kNumSubTiles * kNumAccum <= 128, "final accumulators would not fit in the register budget");
    DG_STATIC_ASSERT(kNumStages >= 1, "at least one pipeline stage");
    DG_STATIC_ASSERT(kNumMulticast == 1 or kNumMulticast == 2, "TMA multicast is over 1 or 2 CTAs");
    DG_STATIC_ASSERT(SHAPE_N > 0 and SHAPE_K > 0, "empty problems are handled on the host");

    // ---- Shared memory ----
    constexpr uint32_t kSmemABytes = BLOCK_M * kBlockK;  // [BLOCK_M, 128] e4m3, 128B-swizzled
    constexpr uint32_t kSmemBBytes = BLOCK_N * kBlockK;  // [BLOCK_N, 128] e4m3, 128B-swizzled
    constexpr uint32_t kSmemSABytes = BLOCK_M * 4;       // [BLOCK_M] fp32
    constexpr uint32_t kSmemDBytes = align_up<uint32_t>(Epilogue::kSmemBytes, 1024);
    constexpr uint32_t kNumSBPerTile = kNumKBlocks * (kMayStraddle ? 2 : 1);
    constexpr uint32_t kStageTxBytes = kSmemABytes + kSmemBBytes + kSmemSABytes;
    constexpr uint32_t kExpectedSmemSize = fp8_gemm_smem_size<SHAPE_K, BLOCK_M, BLOCK_N, kNumStages>();
    DG_STATIC_ASSERT(kSmemSize == kExpectedSmemSize, "host and device disagree on the shared-memory size");
    DG_STATIC_ASSERT(kSmemSize <= kSmemBudget, "configuration exceeds the 232448-byte shared-memory budget");
    DG_STATIC_ASSERT(kSmemABytes % 1024 == 0 and kSmemBBytes % 1024 == 0,
                     "A/B stage tiles must keep 1024-byte alignment for the 128B swizzle");

    extern __shared__ __align__(1024) uint8_t smem[];
    uint8_t* smem_d = smem;                                                          // D tile, see Epilogue
    uint8_t* smem_a = smem + kSmemDBytes;                                            // [stages][BLOCK_M, 128]
    uint8_t* smem_b = smem_a + kNumStages * kSmemABytes;                             // [stages][BLOCK_N, 128]
    float* smem_sa = reinterpret_cast<float*>(smem_b + kNumStages * kSmemBBytes);   // [stages][BLOCK_M]
    float* smem_sb = smem_sa + kNumStages * BLOCK_M;                                 // [1 or 2][kNumKBlocks]
    auto* full_barriers = reinterpret_cast<cutlass::arch::ClusterTransactionBarrier*>(
        reinterpret_cast<uint8_t*>(smem_sb) + align_up<uint32_t>(kNumSBPerTile * 4, 8));  // [stages]
    auto* empty_barriers = reinterpret_cast<cutlass::arch::ClusterBarrier*>(full_barriers + kNumStages);  // [stages]

    const uint32_t warp_idx = __shfl_sync(0xffffffff, threadIdx.x / 32, 0);
    const uint32_t lane_idx = threadIdx.x % 32;
    const bool is_tma_thread = threadIdx.x == kNumMathThreads;

    // ---- Descriptor prefetch and barrier init ----
    if (is_tma_thread) {
        cute::prefetch_tma_descriptor(&tensor_map_a);
        cute::prefetch_tma_descriptor(&tensor_map_b);
        cute::prefetch_tma_descriptor(&tensor_map_sa);
        cute::prefetch_tma_descriptor(&tensor_map_d);
        #pragma unroll
        for (uint32_t i = 0; i < kNumStages; ++i) {
            full_barriers[i].init(1);
            // NOTES: every math warp of every CTA of the cluster frees the stage, because a multicast TMA
            // writes the stage in both CTAs.
            empty_barriers[i].init(kNumMulticast * kNumMathThreads / 32);
        }
        cutlass::arch::fence_view_async_shared();
        cutlass::arch::fence_barrier_init();
    }
    if constexpr (kNumMulticast > 1)
        cute::cluster_sync();
    else
        __syncthreads();

    // NOTES: tiles t and t + 1 must share the multicast operand's block; see TileScheduler.
    using Scheduler = TileScheduler<BLOCK_M, BLOCK_N, SHAPE_N, not (kNumMulticast > 1 and not kMulticastOnA)>;

    if (threadIdx.x >= kNumMathThreads) {
        // ================= Producer warpgroup =================
        cutlass::arch::warpgroup_reg_dealloc<40>();
        if (is_tma_thread) {
            constexpr auto kCacheHint = static_cast<uint64_t>(cute::TMA::CacheHintSm90::EVICT_NORMAL);
            const bool is_leader = kNumMulticast == 1 or cute::block_rank_in_cluster() == 0;
            Scheduler scheduler(shape_m);
            uint32_t m_block, n_block, stage = 0, phase = 0;
            while (scheduler.next(m_block, n_block)) {
                const auto m_idx = static_cast<int32_t>(m_block * BLOCK_M);
                const auto n_idx = static_cast<int32_t>(n_block * BLOCK_N);
                for (uint32_t k_block = 0; k_block < kNumKBlocks; ++k_block) {
                    empty_barriers[stage].wait(phase ^ 1);
                    auto* bar = reinterpret_cast<uint64_t*>(&full_barriers[stage]);
                    full_barriers[stage].arrive_and_expect_tx(kStageTxBytes);
                    const auto k_idx = static_cast<int32_t>(k_block * kBlockK);
                    uint8_t* dst_a = smem_a + stage * kSmemABytes;
                    uint8_t* dst_b = smem_b + stage * kSmemBBytes;
                    if constexpr (kNumMulticast > 1 and kMulticastOnA) {
                        if (is_leader)
                            cute::SM90_TMA_LOAD_MULTICAST_2D::copy(&tensor_map_a, bar, 0b11, kCacheHint, dst_a, k_idx, m_idx);
                    } else {
                        cute::SM90_TMA_LOAD_2D::copy(&tensor_map_a, bar, kCacheHint, dst_a, k_idx, m_idx);
                    }
                    if constexpr (kNumMulticast > 1 and not kMulticastOnA) {
                        if (is_leader)
                            cute::SM90_TMA_LOAD_MULTICAST_2D::copy(&tensor_map_b, bar, 0b11, kCacheHint, dst_b, k_idx, n_idx);
                    } else {
                        cute::SM90_TMA_LOAD_2D::copy(&tensor_map_b, bar, kCacheHint, dst_b, k_idx, n_idx);
                    }
                    cute::SM90_TMA_LOAD_2D::copy(&tensor_map_sa, bar, kCacheHint, smem_sa + stage * BLOCK_M,
                                                 m_idx, static_cast<int32_t>(k_block));
                    stage = stage + 1 == kNumStages ? 0 : stage + 1;
                    phase ^= stage == 0;
                }
            }
        }
    } else {
        // ================= Math warpgroups =================
        cutlass::arch::warpgroup_reg_alloc<kNumMathWGs == 1 ? 248 : 232>();
        const uint32_t math_wg = threadIdx.x / 128;
        const uint32_t warp_row = (warp_idx % 4) * 16;  // the warp's first row inside a 64-row WGMMA tile
        const uint32_t lane_row = lane_idx / 4;          // this thread's rows: lane_row and lane_row + 8

        Scheduler scheduler(shape_m);
        uint32_t m_block, n_block, stage = 0, phase = 0;
        float partial[kNumAccum];
        float final_accum[kNumSubTiles][kNumAccum];
        while (scheduler.next(m_block, n_block)) {
            const uint32_t n_start = n_block * BLOCK_N;
            // RHS scales of this tile's N range for every K block: [1 or 2][kNumKBlocks] in shared memory.
            // NOTES: safe to overwrite: every math thread passed the previous tile's epilogue barriers, which
            // follow its last read of smem_sb.
            const uint32_t sb_block0 = n_start / 128;
            const uint32_t sb_block1 = min(sb_block0 + 1, kNumSBBlocks - 1);
            for (uint32_t i = threadIdx.x; i < kNumSBPerTile; i += kNumMathThreads) {
                const uint32_t block = i < kNumKBlocks ? sb_block0 : sb_block1;
                smem_sb[i] = __ldg(sb + block * kNumKBlocks + i % kNumKBlocks);
            }
            named_barrier_sync<kNumMathThreads, 1>();
            // Columns at or past `straddle_col` of this tile belong to the next scale block (a multiple of 8).
            const uint32_t straddle_col = kMayStraddle ? (sb_block0 + 1) * 128 - n_start : BLOCK_N;

            #pragma unroll
            for (uint32_t s = 0; s < kNumSubTiles; ++s)
                #pragma unroll
                for (uint32_t i = 0; i < kNumAccum; ++i)
                    final_accum[s][i] = 0;

            for (uint32_t k_block = 0; k_block < kNumKBlocks; ++k_block) {
                full_barriers[stage].wait(phase);
                const float sb0 = ld_shared(smem_sb + k_block);
                const float sb1 = kMayStraddle ? ld_shared(smem_sb + kNumKBlocks + k_block) : sb0;
                const uint8_t* tile_a = smem_a + stage * kSmemABytes;
                const uint8_t* tile_b = smem_b + stage * kSmemBBytes;
                #pragma unroll
                for (uint32_t s = 0; s < kNumSubTiles; ++s) {
                    const uint32_t tile_row = (s * kNumMathWGs + math_wg) * WGMMA::M;
                    const float sa_lo = ld_shared(smem_sa + stage * BLOCK_M + tile_row + warp_row + lane_row);
                    const float sa_hi = ld_shared(smem_sa + stage * BLOCK_M + tile_row + warp_row + lane_row + 8);

                    #pragma unroll
                    for (uint32_t i = 0; i < kNumAccum; ++i)
                        cute::warpgroup_fence_operand(partial[i]);
                    cute::warpgroup_arrive();
                    #pragma unroll
                    for (uint32_t k = 0; k < kBlockK / WGMMA::K; ++k) {
                        const uint64_t desc_a = make_kmajor_sw128_desc(tile_a + tile_row * kBlockK + k * WGMMA::K);
                        const uint64_t desc_b = make_kmajor_sw128_desc(tile_b + k * WGMMA::K);
                        WGMMA::mma(desc_a, desc_b, partial, k > 0);
                    }
                    cute::warpgroup_commit_batch();
                    #pragma unroll
                    for (uint32_t i = 0; i < kNumAccum; ++i)
                        cute::warpgroup_fence_operand(partial[i]);
                    cute::warpgroup_wait<0>();

                    // The stage's A/B/SA are consumed: let the producer(s) refill it while we promote.
                    if (s + 1 == kNumSubTiles) {
                        if constexpr (kNumMulticast == 1) {
                            if (lane_idx == 0)
                                empty_barriers[stage].arrive();
                        } else {
                            if (lane_idx < kNumMulticast)
                                empty_barriers[stage].arrive(lane_idx);
                        }
                    }

                    // Promotion: final += partial * SA(row) * SB(n block, k block)
                    const float s_lo0 = sa_lo * sb0, s_hi0 = sa_hi * sb0;
                    const float s_lo1 = sa_lo * sb1, s_hi1 = sa_hi * sb1;
                    #pragma unroll
                    for (uint32_t c = 0; c < kNumAccum / 4; ++c) {
                        const bool second = kMayStraddle and c * 8 >= straddle_col;
                        const float s_lo = second ? s_lo1 : s_lo0;
                        const float s_hi = second ? s_hi1 : s_hi0;
                        final_accum[s][c * 4 + 0] += s_lo * partial[c * 4 + 0];
                        final_accum[s][c * 4 + 1] += s_lo * partial[c * 4 + 1];
                        final_accum[s][c * 4 + 2] += s_hi * partial[c * 4 + 2];
                        final_accum[s][c * 4 + 3] += s_hi * partial[c * 4 + 3];
                    }
                }
                stage = stage + 1 == kNumStages ? 0 : stage + 1;
                phase ^= stage == 0;
            }

            // ---- Epilogue ----
            // The previous tile's TMA store must have read smem_d before anyone overwrites it.
            if (threadIdx.x == 0)
                cute::tma_store_wait<0>();
            named_barrier_sync<kNumMathThreads, 1>();
            #pragma unroll
            for (uint32_t s = 0; s < kNumSubTiles; ++s)
                Epilogue::write_warp(smem_d, final_accum[s], (s * kNumMathWGs + math_wg) * WGMMA::M + warp_row, lane_idx);
            cute::tma_store_fence();
            named_barrier_sync<kNumMathThreads, 1>();
            if (threadIdx.x == 0)
                Epilogue::store(&tensor_map_d, smem_d, m_block * BLOCK_M, n_start);
        }
        if (threadIdx.x == 0)
            cute::tma_store_wait<0>();
    }

    // NOTES: a CTA must outlive every remote barrier arrival and multicast write its cluster peer still sends.
    if constexpr (kNumMulticast > 1)
        cute::cluster_sync();
#endif
}

}  // namespace deep_gemm::sm90
