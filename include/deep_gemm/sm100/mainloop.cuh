#pragma once

// The MMA warp's loop of the sm100 kernels: walk the tiles' K blocks through the shell's stage ring, issue each K
// block's tcgen05 MMAs (the scale policy's Mma, promotion.cuh) into a tensor-memory accumulator buffer, release the
// stage and hand accumulators to the epilogue warps (AccumRing, pipeline.cuh).

#include <deep_gemm/common/barrier.cuh>
#include <deep_gemm/common/scheduler.cuh>
#include <deep_gemm/common/utils.cuh>
#include <deep_gemm/sm100/mma.cuh>
#include <deep_gemm/sm100/pipeline.cuh>

namespace deep_gemm::sm100 {

// Shell: KernelShell (kernel_shell.cuh); Promotion: the scale policy. The even CTA of a pair issues for both.
template <typename Shell, typename Promotion>
struct MmaIssuer {
    static constexpr uint32_t BLOCK_N = Shell::BLOCK_N;
    static constexpr uint32_t kNumMulticast = Shell::kNumMulticast;
    static constexpr uint32_t kCtaGroup = Shell::kCtaGroup;
    static constexpr bool kPairMma = Shell::kPairMma;
    static constexpr uint32_t kNumKBlocks = Promotion::kNumKBlocks;
    // Path (a) hands every K block's partial sums over, path (b) the tile's sums.
    static constexpr bool kHandOffPerKBlock = Promotion::kHandOffPerKBlock;

    const Shell& shell;
    typename Promotion::Mma mma;
    uint32_t tmem_base;

    // Commit to a barrier of this CTA, or of every cluster CTA that shares it.
    __device__ __forceinline__ static void commit(const Barrier* bar, bool to_cluster) {
        if (kNumMulticast > 1 and to_cluster)
            mma_commit_multicast<kCtaGroup>(bar, 0b11);
        else
            mma_commit<kCtaGroup>(bar);
    }

    template <typename MakeScheduler, typename Skips>
    __device__ __forceinline__ void run(MakeScheduler make_scheduler, Skips skips) const {
        if (kPairMma and not shell.is_leader)
            return;
        const uint32_t lane_idx = shell.lane_idx;
        auto scheduler = make_scheduler();
        Tile tile;
        StageIterator<Shell::kNumStages> it;
        auto accum = shell.accum_ring();
        const uint32_t a_lo = __shfl_sync(0xffffffff, kmajor_sw128_desc_lo(smem_u32(shell.smem_a)), 0);
        const uint32_t b_lo = __shfl_sync(0xffffffff, kmajor_sw128_desc_lo(smem_u32(shell.smem_b)), 0);
        while (scheduler.next(tile)) {
            if (skips(tile))
                continue;
            if constexpr (not kHandOffPerKBlock)
                accum.wait_empty();
            for (uint32_t k_block = 0; k_block < kNumKBlocks; ++k_block) {
                if constexpr (kHandOffPerKBlock)
                    accum.wait_empty();
                shell.full[it.stage].wait(it.phase);
                tcgen05_after_thread_sync();
                mma.prepare(it.stage, k_block);
                if (lane_idx == 0) {
                    mma.issue(it.stage, k_block, tmem_base + accum.buffer() * BLOCK_N,
                              a_lo + it.stage * (Shell::kSmemABytes / 16), b_lo + it.stage * (Shell::kSmemBBytes / 16));
                    // The stage is free once these MMAs completed (in both CTAs when both read it).
                    commit(&shell.empty[it.stage], kPairMma or kNumMulticast > 1);
                    if (kHandOffPerKBlock or k_block + 1 == kNumKBlocks)
                        commit(&shell.accum_full[accum.buffer()], kPairMma);
                }
                __syncwarp();
                if constexpr (kHandOffPerKBlock)
                    ++accum.iter;
                it.advance();
            }
            if constexpr (not kHandOffPerKBlock)
                ++accum.iter;
        }
    }
};

}  // namespace deep_gemm::sm100
