#pragma once

// The pipelines of the sm100 kernels: the shared-memory stage ring between the TMA producer warp and the MMA warp,
// the two tensor-memory accumulator buffers between the MMA warp and the epilogue warps, and the budgets the host
// mirrors (deep_gemm/heuristics/sm100.py).

#include <deep_gemm/common/barrier.cuh>
#include <deep_gemm/common/tma.cuh>
#include <deep_gemm/common/utils.cuh>
#include <deep_gemm/sm100/mma.cuh>

namespace deep_gemm::sm100 {

constexpr uint32_t kBlockK = 128;            // = the scale granularity along K
constexpr uint32_t kMmaK = 32;               // K of one FP8 tcgen05.mma
constexpr uint32_t kSmemBudget = 232448;     // opt-in shared memory per block on B200 (227 KiB)
constexpr uint32_t kNumTmemCols = 512;       // tensor memory columns per SM
constexpr uint32_t kCtaRows = 128;           // rows of A / D per CTA (M of a cta_group::1 MMA, half of a cta_group::2)

// Warp roles: warp 0 the TMA producer, warp 1 the MMA issuer (and the TMEM allocator), warps 2-3 idle, warps 4-11
// two epilogue warpgroups. NOTES: an epilogue warp w may only read TMEM lanes 32 (w % 4) .. +31, so each epilogue
// warpgroup covers all 128 lanes (rows) and the two split the columns.
constexpr uint32_t kNumNonEpilogueThreads = 128;
constexpr uint32_t kNumEpilogueThreads = 256;
constexpr uint32_t kNumEpilogueWarps = kNumEpilogueThreads / 32;
constexpr uint32_t kNumThreads = kNumNonEpilogueThreads + kNumEpilogueThreads;
// Register budgets per thread (setmaxnreg): 128 x 56 + 256 x 224 = 64512 of the SM's 65536.
constexpr uint32_t kNumNonEpilogueRegs = 56;
constexpr uint32_t kNumEpilogueRegs = 224;
DG_STATIC_ASSERT(kNumNonEpilogueThreads * kNumNonEpilogueRegs + kNumEpilogueThreads * kNumEpilogueRegs <= 65536,
                 "register budgets exceed the register file");

// The stage/phase walk: producer and MMA warp each keep one and advance it once per K block, in the same order.
template <uint32_t kNumStages>
struct StageIterator {
    uint32_t stage = 0;
    uint32_t phase = 0;

    __device__ __forceinline__ void advance() {
        stage = stage + 1 == kNumStages ? 0 : stage + 1;
        phase ^= stage == 0;
    }
};

// The shared::cluster address of the barrier at `bar`'s offset in cluster CTA `cta_rank`.
__device__ __forceinline__ uint32_t cluster_barrier_addr(const Barrier* bar, uint32_t cta_rank) {
    uint32_t remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(smem_u32(bar)), "r"(cta_rank));
    return remote;
}

// A TMA load into this CTA's shared memory whose bytes complete on a barrier of either CTA of the pair
// (`bar_cluster_addr`, a shared::cluster address): both CTAs of a cta_group::2 MMA signal the even CTA's barrier.
__device__ __forceinline__ void tma_load_2d_pair(const TmaDescriptor* desc, uint32_t bar_cluster_addr, void* smem,
                                                 int32_t crd0, int32_t crd1, uint64_t cache_hint) {
    asm volatile(
        "cp.async.bulk.tensor.2d.cta_group::2.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
        " [%0], [%1, {%3, %4}], [%2], %5;"
        :: "r"(smem_u32(smem)), "l"(reinterpret_cast<uint64_t>(desc)), "r"(bar_cluster_addr), "r"(crd0), "r"(crd1),
           "l"(cache_hint)
        : "memory");
}

// The two tensor-memory accumulator buffers: `full` (one MMA commit per hand-off) and `empty` (one arrival per
// epilogue warp of the CTA, or of both CTAs of a pair, on the even CTA's barrier). The MMA warp and the epilogue
// warps each count the hand-offs they have made: buffer iter % 2, in pass (iter / 2) over the two.
template <bool kPairMma>
struct AccumRing {
    Barrier* full;   // [2]
    Barrier* empty;  // [2]
    uint32_t iter;

    __device__ __forceinline__ uint32_t buffer() const { return iter % 2; }

    // MMA warp: wait until the epilogue has read buffer() (a hand-off made once the MMAs are committed to `full`).
    __device__ __forceinline__ void wait_empty() const {
        empty[iter % 2].wait(((iter / 2) & 1) ^ 1);
        tcgen05_after_thread_sync();
    }

    // Epilogue warps: wait until buffer() holds the MMAs' sums.
    __device__ __forceinline__ void wait_full() const {
        full[iter % 2].wait((iter / 2) & 1);
        tcgen05_after_thread_sync();
    }

    // Epilogue warps: buffer() has been read (tcgen05.ld waited): hand it back to the MMA warp.
    __device__ __forceinline__ void release(uint32_t lane_idx) {
        tcgen05_before_thread_sync();
        __syncwarp();
        if (lane_idx == 0) {
            if constexpr (kPairMma)
                empty[iter % 2].arrive_cluster(0);
            else
                empty[iter % 2].arrive();
        }
        ++iter;
    }
};

}  // namespace deep_gemm::sm100
