#pragma once

// The ring of shared-memory stages between the TMA producer and the WGMMA math warpgroups, as every sm90 kernel
// uses it: the K block, the producer warpgroup, the shared-memory budget, the stage barriers and the stage/phase
// walk over them, and the producer's operand loads.

#include <deep_gemm/common/barrier.cuh>
#include <deep_gemm/common/tma.cuh>
#include <deep_gemm/common/utils.cuh>

namespace deep_gemm::sm90 {

constexpr uint32_t kBlockK = 128;             // = the scale granularity along K
constexpr uint32_t kNumProducerThreads = 128;  // one warpgroup; one elected thread issues every TMA
constexpr uint32_t kSmemBudget = 232448;       // opt-in shared memory per block on H100/H200

// The stage/phase walk: producer and consumers each keep one and advance it once per K block, in the same order.
template <uint32_t kNumStages>
struct StageIterator {
    uint32_t stage = 0;
    uint32_t phase = 0;  // parity of the stage's barriers in the current pass over the ring

    // The phase bit flips each time the stage index wraps around.
    __device__ __forceinline__ void advance() {
        stage = stage + 1 == kNumStages ? 0 : stage + 1;
        phase ^= stage == 0;
    }
};

// The stages' barriers: `full` (one producer arrival plus the stage's transaction bytes, plus one arrival per lane
// of each gather warp: kNumGatherWarps, see KernelShell) and `empty` (one arrival per math warp of every cluster
// CTA, because a multicast TMA writes the stage in both CTAs).
template <uint32_t kNumStages, uint32_t kNumMulticast, uint32_t kNumMathThreads, uint32_t kNumGatherWarps = 0>
struct StageRing {
    using Iterator = StageIterator<kNumStages>;

    Barrier* full;   // [kNumStages]
    Barrier* empty;  // [kNumStages]

    // Initialise the barriers and publish them to the async proxy and the cluster. One thread.
    __device__ __forceinline__ void init() const {
        #pragma unroll
        for (uint32_t i = 0; i < kNumStages; ++i) {
            full[i].init(1 + kNumGatherWarps * 32);
            empty[i].init(kNumMulticast * kNumMathThreads / 32);
        }
        fence_proxy_async_shared();
        fence_barrier_init();
    }

    // Producer: wait until the stage is consumed, announce its `tx_bytes`; the stage's TMA loads complete on the
    // returned barrier.
    __device__ __forceinline__ const Barrier* acquire(const Iterator& it, uint32_t tx_bytes) const {
        empty[it.stage].wait(it.phase ^ 1);
        full[it.stage].arrive_and_expect_tx(tx_bytes);
        return &full[it.stage];
    }

    // A producer that adds no transaction bytes (a gather warp): wait until the stage is consumed.
    __device__ __forceinline__ void wait_empty(const Iterator& it) const { empty[it.stage].wait(it.phase ^ 1); }

    // Consumers: wait until the stage's loads have landed.
    __device__ __forceinline__ void wait_full(const Iterator& it) const { full[it.stage].wait(it.phase); }

    // Consumers: the stage's operands are consumed; one arrival per warp on the empty barrier of every cluster CTA.
    __device__ __forceinline__ void release(uint32_t stage, uint32_t lane_idx) const {
        if constexpr (kNumMulticast == 1) {
            if (lane_idx == 0)
                empty[stage].arrive();
        } else {
            if (lane_idx < kNumMulticast)
                empty[stage].arrive_cluster(lane_idx);
        }
    }
};

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
