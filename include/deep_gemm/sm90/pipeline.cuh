#pragma once

// Pieces every sm90 kernel's TMA -> WGMMA pipeline shares: the K block, the producer warpgroup, the shared-memory
// budget, the stage barriers and their walk, and the producer's A/B loads.

#include <deep_gemm/common/barrier.cuh>
#include <deep_gemm/common/tma.cuh>
#include <deep_gemm/common/utils.cuh>

namespace deep_gemm::sm90 {

constexpr uint32_t kBlockK = 128;             // = the scale granularity along K
constexpr uint32_t kNumProducerThreads = 128;  // one warpgroup; one elected thread issues every TMA
constexpr uint32_t kSmemBudget = 232448;       // opt-in shared memory per block on H100/H200

// Next pipeline slot: the phase bit flips each time the stage index wraps around.
template <uint32_t kNumStages>
__device__ __forceinline__ void advance_stage(uint32_t& stage, uint32_t& phase) {
    stage = stage + 1 == kNumStages ? 0 : stage + 1;
    phase ^= stage == 0;
}

// Initialise the stages' full barriers (one producer arrival plus transaction bytes) and empty barriers (one arrival
// per math warp of every cluster CTA, because a multicast TMA writes the stage in both CTAs), and publish them to the
// async proxy and the cluster. One thread.
template <uint32_t kNumStages, uint32_t kNumMulticast, uint32_t kNumMathThreads>
__device__ __forceinline__ void init_stage_barriers(Barrier* full_barriers, Barrier* empty_barriers) {
    #pragma unroll
    for (uint32_t i = 0; i < kNumStages; ++i) {
        full_barriers[i].init(1);
        empty_barriers[i].init(kNumMulticast * kNumMathThreads / 32);
    }
    fence_proxy_async_shared();
    fence_barrier_init();
}

// A stage's operands are consumed: one arrival per warp on the empty barrier of every cluster CTA.
template <uint32_t kNumMulticast>
__device__ __forceinline__ void release_stage(Barrier& empty_barrier, uint32_t lane_idx) {
    if constexpr (kNumMulticast == 1) {
        if (lane_idx == 0)
            empty_barrier.arrive();
    } else {
        if (lane_idx < kNumMulticast)
            empty_barrier.arrive_cluster(lane_idx);
    }
}

// Load one operand tile of a stage: multicast to both CTAs of the pair by the leader when kShared, else this CTA's
// own load.
template <bool kShared>
__device__ __forceinline__ void tma_load_operand(const TmaDescriptor* desc, const Barrier* bar, void* smem,
                                                 int32_t crd0, int32_t crd1, bool is_leader, uint64_t cache_hint) {
    if constexpr (kShared) {
        if (is_leader)
            tma_load_2d_multicast(desc, bar, 0b11, smem, crd0, crd1, cache_hint);
    } else {
        tma_load_2d(desc, bar, smem, crd0, crd1, cache_hint);
    }
}

}  // namespace deep_gemm::sm90
