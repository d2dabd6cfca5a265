#pragma once

// Pieces every sm90 kernel's TMA -> WGMMA pipeline shares: the K block, the producer warpgroup, the shared-memory
// budget and the stage/phase walk.

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

}  // namespace deep_gemm::sm90
