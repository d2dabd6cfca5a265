#pragma once

// The frame the sm100 FP8 kernel (fp8_gemm_1d2d.cuh) is composed in, in the style of the sm90 one
// (sm90/kernel_shell.cuh): a persistent CTA of one TMA producer warp, one MMA warp (which also owns the tensor
// memory) and two epilogue warpgroups around a ring of shared-memory stages (each one 128-wide K block of A and B,
// plus the scale policy's factors) and two tensor-memory accumulator buffers.
// The shell owns what does not depend on the scale path: the shared-memory layout, barrier and tensor-memory set-up
// and tear-down, the warp roles, and the producer's loop. A kernel composes it with
//  - a scale policy (promotion.cuh): per-stage scale factors, how a K block's MMAs are issued, what the epilogue
//    warps do with the accumulators;
//  - the MMA warp's loop (mainloop.cuh) and the epilogue's row stores (epilogue.cuh);
// plus its scheduler (scheduler.cuh). The shell reads Config::SHAPE_N, BLOCK_M, BLOCK_N, kNumStages, kNumMulticast,
// kMulticastOnA and kNumTmemCols.
//
// CTA: warp 0 TMA producer, warp 1 MMA issuer (one thread issues; the warp allocates TMEM), warps 2-3 idle, warps 4-11
// the epilogue (epilogue.cuh). BLOCK_M = 128: one CTA per tile (cta_group::1), optionally a 2-CTA cluster sharing A or
// B by TMA multicast. BLOCK_M = 256: a CTA pair per tile, cta_group::2 MMAs issued by the even CTA, each CTA holding
// 128 rows of A, half of B's rows and 128 rows of the accumulator.

#include <deep_gemm/common/barrier.cuh>
#include <deep_gemm/common/scheduler.cuh>
#include <deep_gemm/common/tma.cuh>
#include <deep_gemm/common/utils.cuh>
#include <deep_gemm/sm100/mma.cuh>
#include <deep_gemm/sm100/pipeline.cuh>
#include <deep_gemm/sm100/promotion.cuh>
#include <deep_gemm/sm100/scheduler.cuh>

namespace deep_gemm::sm100 {

template <typename Config>
constexpr uint32_t kernel_num_threads() {
    return kNumThreads;
}

template <typename Config, typename Promotion>
struct KernelShell {
    static constexpr uint32_t SHAPE_N = Config::SHAPE_N;
    static constexpr uint32_t BLOCK_M = Config::BLOCK_M;
    static constexpr uint32_t BLOCK_N = Config::BLOCK_N;
    static constexpr uint32_t kNumStages = Config::kNumStages;
    static constexpr uint32_t kNumMulticast = Config::kNumMulticast;
    static constexpr bool kPairMma = BLOCK_M == 2 * kCtaRows;
    static constexpr uint32_t kCtaGroup = kPairMma ? 2 : 1;
    static constexpr bool kMulticastA = not kPairMma and kNumMulticast > 1 and Config::kMulticastOnA;
    static constexpr bool kMulticastB = not kPairMma and kNumMulticast > 1 and not Config::kMulticastOnA;
    static constexpr uint32_t LOAD_N = kPairMma ? BLOCK_N / 2 : BLOCK_N;  // B rows per CTA
    template <GemmType kGemmType>
    using Scheduler = ClusterTileScheduler<kGemmType, BLOCK_M, BLOCK_N, SHAPE_N, kPairMma, not kMulticastB>;

    // Shared memory: [stages x A][stages x B][stages x SFA][stages x SFB][full, empty barriers per stage]
    // [accumulator full x 2, empty x 2][TMEM base address]
    static constexpr uint32_t kSmemABytes = kCtaRows * kBlockK;  // [128, 128] e4m3, 128B-swizzled
    static constexpr uint32_t kSmemBBytes = LOAD_N * kBlockK;    // [LOAD_N, 128] e4m3, 128B-swizzled
    static constexpr uint32_t kSmemSFABytes = Promotion::kSmemSFABytes;
    static constexpr uint32_t kSmemSFBBytes = Promotion::kSmemSFBBytes;
    static constexpr uint32_t kSmemSize =
        kNumStages * (kSmemABytes + kSmemBBytes + kSmemSFABytes + kSmemSFBBytes) + (2 * kNumStages + 4) * 8 + 8;
    static constexpr uint32_t kStageTxBytes = kSmemABytes + kSmemBBytes;
    // Tensor memory: two accumulator buffers of BLOCK_N columns, then the policy's scale factors.
    static constexpr uint32_t kTmemSF = 2 * BLOCK_N;
    static constexpr uint32_t kTmemUsedCols = kTmemSF + Promotion::kTmemSFCols;

    DG_STATIC_ASSERT(CheckPromotion<Promotion>::kOk, "the scale policy's requirements (promotion.cuh)");
    DG_STATIC_ASSERT(BLOCK_M == kCtaRows or BLOCK_M == 2 * kCtaRows, "BLOCK_M must be 128 (one CTA) or 256 (pair)");
    DG_STATIC_ASSERT(BLOCK_N % 16 == 0 and BLOCK_N >= 16 and BLOCK_N <= 256,
                     "BLOCK_N must be a multiple of 16 in [16, 256] (tcgen05.mma N at M = 128 / 256)");
    DG_STATIC_ASSERT(LOAD_N % 8 == 0, "B stage tiles must keep 1024-byte alignment for the 128B swizzle");
    DG_STATIC_ASSERT(kNumStages >= 1 and kNumStages <= 32, "1 to 32 pipeline stages");
    DG_STATIC_ASSERT(kNumMulticast == 1 or kNumMulticast == 2, "clusters are of 1 or 2 CTAs");
    DG_STATIC_ASSERT(not kPairMma or kNumMulticast == 2, "a cta_group::2 MMA needs its CTA pair as the cluster");
    DG_STATIC_ASSERT(kTmemUsedCols <= kNumTmemCols, "accumulators and scale factors exceed the 512 TMEM columns");
    DG_STATIC_ASSERT(Config::kNumTmemCols == tmem_alloc_cols(kTmemUsedCols),
                     "host and device disagree on the tensor-memory allocation");
    DG_STATIC_ASSERT(Config::kSmemSize == kSmemSize, "host and device disagree on the shared-memory size");
    DG_STATIC_ASSERT(kSmemSize <= kSmemBudget, "configuration exceeds the 232448-byte shared-memory budget");

    uint8_t* smem_a;    // [stages][128, 128]
    uint8_t* smem_b;    // [stages][LOAD_N, 128]
    uint8_t* smem_sfa;  // [stages][kSmemSFABytes]
    uint8_t* smem_sfb;  // [stages][kSmemSFBBytes]
    Barrier* full;      // [stages]
    Barrier* empty;     // [stages]
    Barrier* accum_full;   // [2]
    Barrier* accum_empty;  // [2]
    uint32_t* tmem_slot;
    uint32_t warp_idx;  // warp-uniform (shuffled), as on sm90
    uint32_t lane_idx;
    uint32_t cta_rank;  // in the cluster
    bool is_leader;     // the cluster's (pair's) even CTA

    __device__ __forceinline__ explicit KernelShell(uint8_t* smem)
        : smem_a(smem),
          smem_b(smem_a + kNumStages * kSmemABytes),
          smem_sfa(smem_b + kNumStages * kSmemBBytes),
          smem_sfb(smem_sfa + kNumStages * kSmemSFABytes),
          full(reinterpret_cast<Barrier*>(smem_sfb + kNumStages * kSmemSFBBytes)),
          empty(full + kNumStages),
          accum_full(empty + kNumStages),
          accum_empty(accum_full + 2),
          tmem_slot(reinterpret_cast<uint32_t*>(accum_empty + 2)),
          warp_idx(__shfl_sync(0xffffffff, threadIdx.x / 32, 0)),
          lane_idx(threadIdx.x % 32),
          cta_rank(kNumMulticast > 1 ? block_rank_in_cluster() : 0),
          is_leader(cta_rank == 0) {}

    __device__ __forceinline__ bool is_producer_warp() const { return warp_idx == 0; }
    __device__ __forceinline__ bool is_mma_warp() const { return warp_idx == 1; }
    __device__ __forceinline__ bool is_epilogue_warp() const { return warp_idx >= kNumNonEpilogueThreads / 32; }

    // Barriers and tensor memory; returns the TMEM base address of the allocation (every thread).
    // full: the producer's arrival + the stage's bytes (pair: both CTAs' bytes on the even CTA's barrier).
    // empty: one commit of the MMA warp per cluster CTA that read the stage (multicast: both CTAs' MMAs read it).
    // accum_full: one commit per accumulator hand-off; accum_empty: every epilogue warp of the CTA (pair: of both).
    // NOTES: before a tcgen05.alloc.cta_group::2 "the issuing warp must make sure that peer CTA is launched" (PTX ISA,
    // tcgen05.alloc): a cluster barrier first, as CUTLASS's and DeepGEMM's 2-CTA kernels have before theirs.
    __device__ __forceinline__ uint32_t setup(const TmaDescriptor* map_a, const TmaDescriptor* map_b,
                                              const TmaDescriptor* map_sfa, const TmaDescriptor* map_sfb) const {
        if constexpr (kPairMma)
            cluster_sync();
        if (warp_idx == 0 and lane_idx == 0) {
            prefetch_tma_descriptor(map_a);
            prefetch_tma_descriptor(map_b);
            if constexpr (Promotion::kLoadsScaleFactors) {
                prefetch_tma_descriptor(map_sfa);
                prefetch_tma_descriptor(map_sfb);
            }
        } else if (warp_idx == 1) {
            if (lane_idx == 0) {
                #pragma unroll
                for (uint32_t i = 0; i < kNumStages; ++i) {
                    full[i].init(1);
                    empty[i].init(kPairMma ? 1 : kNumMulticast);
                }
                #pragma unroll
                for (uint32_t i = 0; i < 2; ++i) {
                    accum_full[i].init(1);
                    accum_empty[i].init(kNumEpilogueWarps * (kPairMma ? 2 : 1));
                }
                fence_proxy_async_shared();
                fence_barrier_init();
            }
            __syncwarp();
            tmem_alloc<kCtaGroup>(tmem_slot, Config::kNumTmemCols);
            tmem_relinquish_alloc_permit<kCtaGroup>();
        }
        tcgen05_before_thread_sync();
        if constexpr (kNumMulticast > 1)
            cluster_sync();
        else
            __syncthreads();
        tcgen05_after_thread_sync();
        return *reinterpret_cast<volatile uint32_t*>(tmem_slot);
    }

    // Every tensor-memory read and remote arrival is done before the allocating warp frees TMEM.
    __device__ __forceinline__ void teardown(uint32_t tmem_base) const {
        __syncwarp();
        tcgen05_before_thread_sync();
        if constexpr (kNumMulticast > 1)
            cluster_sync();
        else
            __syncthreads();
        if (warp_idx == 1) {
            tcgen05_after_thread_sync();
            tmem_dealloc<kCtaGroup>(tmem_base, Config::kNumTmemCols);
        }
    }

    // The accumulator buffers, as the MMA warp and the epilogue warps each walk them.
    __device__ __forceinline__ AccumRing<kPairMma> accum_ring() const { return {accum_full, accum_empty, 0}; }

    // ================= TMA producer (one thread of warp 0) =================
    // Walks the tiles (a scheduler from `make_scheduler()`, skipping those `skips(tile)` says take no stage) and fills
    // one stage per K block: A and B of the tile (B's rows from group * SHAPE_N: grouped B is [G * n, k]), then the
    // scale policy's `scales.load(tile, k_block, stage, barrier)`, which adds scales.stage_tx_bytes(k_block).
    template <typename MakeScheduler, typename Skips, typename ScaleLoads>
    __device__ __forceinline__ void produce(MakeScheduler make_scheduler, Skips skips, const TmaDescriptor* map_a,
                                           const TmaDescriptor* map_b, const ScaleLoads& scales) const {
        if (lane_idx != 0)
            return;
        auto scheduler = make_scheduler();
        Tile tile;
        StageIterator<kNumStages> it;
        // Pair: both CTAs' loads complete on the even CTA's full barriers.
        const uint32_t leader_full = kPairMma ? cluster_barrier_addr(full, 0) : 0;
        while (scheduler.next(tile)) {
            if (skips(tile))
                continue;
            const auto m_idx = static_cast<int32_t>(tile.row_base + cta_rank * (kPairMma ? kCtaRows : 0));
            const auto n_idx = static_cast<int32_t>(tile.group * SHAPE_N + tile.n_block * BLOCK_N +
                                                    cta_rank * (kPairMma ? LOAD_N : 0));
            for (uint32_t k_block = 0; k_block < Promotion::kNumKBlocks; ++k_block) {
                empty[it.stage].wait(it.phase ^ 1);
                const auto k_idx = static_cast<int32_t>(k_block * kBlockK);
                uint8_t* dst_a = smem_a + it.stage * kSmemABytes;
                uint8_t* dst_b = smem_b + it.stage * kSmemBBytes;
                if constexpr (kPairMma) {
                    const uint32_t bar = leader_full + it.stage * static_cast<uint32_t>(sizeof(Barrier));
                    if (is_leader)
                        full[it.stage].arrive_and_expect_tx(2 * kStageTxBytes);
                    tma_load_2d_pair(map_a, bar, dst_a, k_idx, m_idx, kTmaCacheHintEvictNormal);
                    tma_load_2d_pair(map_b, bar, dst_b, k_idx, n_idx, kTmaCacheHintEvictNormal);
                } else {
                    const Barrier* bar = &full[it.stage];
                    full[it.stage].arrive_and_expect_tx(kStageTxBytes + ScaleLoads::stage_tx_bytes(k_block));
                    if (not kMulticastA or is_leader) {
                        if constexpr (kMulticastA)
                            tma_load_2d_multicast(map_a, bar, 0b11, dst_a, k_idx, m_idx, kTmaCacheHintEvictNormal);
                        else
                            tma_load_2d(map_a, bar, dst_a, k_idx, m_idx, kTmaCacheHintEvictNormal);
                    }
                    if (not kMulticastB or is_leader) {
                        if constexpr (kMulticastB)
                            tma_load_2d_multicast(map_b, bar, 0b11, dst_b, k_idx, n_idx, kTmaCacheHintEvictNormal);
                        else
                            tma_load_2d(map_b, bar, dst_b, k_idx, n_idx, kTmaCacheHintEvictNormal);
                    }
                    scales.load(tile, k_block, it.stage, bar);
                }
                it.advance();
            }
        }
        // NOTES: the MMA commits that release this CTA's stages may come from the peer (multicast), and arrive
        // asynchronously: wait for the last of them, so that no arrival lands after this CTA exits.
        if constexpr (kNumMulticast > 1) {
            for (uint32_t i = 0; i < kNumStages; ++i) {
                empty[it.stage].wait(it.phase ^ 1);
                it.advance();
            }
        }
    }
};

}  // namespace deep_gemm::sm100
