#pragma once

// The K loops of the sm90 math warpgroups: walk a tile's K blocks through the shell's stage ring, issue each K block's
// WGMMAs (KernelShell::MathWarpgroup::issue_mma) and hand the partial sums to the promotion policy (promotion.cuh).

#include <deep_gemm/common/utils.cuh>
#include <deep_gemm/sm90/pipeline.cuh>
#include <deep_gemm/sm90/mma.cuh>

namespace deep_gemm::sm90 {

// One tile's K loop of a promoting kernel with a compile-time K (kNumKBlocks): every K block's WGMMAs write a partial
// accumulator, which is scaled into the tile's final accumulators (one per 64-row sub-tile) once it is complete.
// kLoopKBlocks < kNumKBlocks: the loop covers that many K blocks (one split of K over a cluster); the stages hold the
// split's blocks and Promotion::Math's K-block indices start at the split's (`Math::begin_split`).
// Promotion::Math provides prefetch(k_block) (scales read before the stage's wait), at_stage(stage, prefetched),
// multipliers(stage, sub_tile, scales) and promote<kNumAccum>(final, partial, multipliers, straddle).
template <typename Shell, typename Promotion, uint32_t kLoopKBlocks = Promotion::kNumKBlocks>
struct PromotedKLoop {
    using Math = typename Promotion::Math;
    using Scales = typename Promotion::Scales;
    static constexpr uint32_t kNumKBlocks = Promotion::kNumKBlocks;
    DG_STATIC_ASSERT(kLoopKBlocks >= 1 and kLoopKBlocks <= kNumKBlocks, "a K loop covers 1 to all K blocks");
    static constexpr uint32_t kNumSubTiles = Shell::kNumSubTiles;
    static constexpr uint32_t kNumAccum = Shell::kNumAccum;
    // NOTES: with one 64-row sub-tile per warpgroup there are registers for two partial accumulators, so K block
    // i + 1's WGMMAs run on the tensor cores while K block i is promoted on the CUDA cores.
    static constexpr bool kOverlapPromotion = kNumSubTiles == 1 and kNumAccum <= 64;
    static constexpr uint32_t kNumPartials = kOverlapPromotion ? 2 : 1;
    // NOTES: an accumulator still in flight across a loop edge makes ptxas serialise every WGMMA (C7514) or inject
    // waits (C7517), and unrolling all of K costs minutes of compile time at k = 16384; chunks of kOverlapChunk
    // blocks keep both the pipeline and compile time short, at the price of one exposed promotion per chunk.
    static constexpr uint32_t kOverlapChunk = 8;
    DG_STATIC_ASSERT(Promotion::kPromotes, "a promoting K loop needs a promoting policy");

    const Shell& shell;
    const typename Shell::MathWarpgroup& wg;
    const Math& promotion;
    typename Shell::Stages& stages;
    float (&partial)[kNumPartials][kNumAccum];
    float (&final_accum)[kNumSubTiles][kNumAccum];

    // Overlapped promotion's state over one tile (a local of `run`): the multipliers of each partial buffer's K
    // block, and the stage of the K block last put in flight.
    struct InFlight {
        Scales scales[2];
        uint32_t cur_stage;
    };

    // The tile's kLoopKBlocks K blocks, `straddle` as Promotion::Math::promote takes it.
    template <typename Straddle>
    __device__ __forceinline__ void run(Straddle straddle) {
        if constexpr (kOverlapPromotion) {
            InFlight in_flight;
            in_flight.cur_stage = 0;
            #pragma unroll 1
            for (uint32_t k0 = 0; k0 + kOverlapChunk <= kLoopKBlocks; k0 += kOverlapChunk)
                run_chunk<kOverlapChunk>(in_flight, k0, straddle);
            if constexpr (kLoopKBlocks % kOverlapChunk != 0)
                run_chunk<kLoopKBlocks % kOverlapChunk>(in_flight, kLoopKBlocks / kOverlapChunk * kOverlapChunk,
                                                        straddle);
        } else {
            // NOTES: unrolling by 4 gave +4-7% at 256x128 and 128x192 on the H200 (measured).
            #pragma unroll 4
            for (uint32_t k_block = 0; k_block < kLoopKBlocks; ++k_block) {
                const auto tile_sb = promotion.prefetch(k_block);
                shell.ring.wait_full(stages);
                const auto sb = promotion.at_stage(stages.stage, tile_sb);
                #pragma unroll
                for (uint32_t s = 0; s < kNumSubTiles; ++s) {
                    const Scales multipliers = promotion.multipliers(stages.stage, s, sb);
                    wg.issue_mma(stages.stage, s, partial[0]);
                    wgmma_wait_group<0>();
                    if (s + 1 == kNumSubTiles)
                        wg.release(stages.stage);
                    Math::template promote<kNumAccum>(final_accum[s], partial[0], multipliers, straddle);
                }
                stages.advance();
            }
        }
    }

    // ---- Overlapped promotion (one sub-tile): partial buffers 0 and 1 alternate ----
    // Put K block k_block's WGMMAs in flight into partial buffer kBuf (with its multipliers).
    template <uint32_t kBuf>
    __device__ __forceinline__ void issue_next(InFlight& in_flight, uint32_t k_block) {
        const auto tile_sb = promotion.prefetch(k_block);
        shell.ring.wait_full(stages);
        const auto sb = promotion.at_stage(stages.stage, tile_sb);
        in_flight.scales[kBuf] = promotion.multipliers(stages.stage, 0, sb);
        wg.issue_mma(stages.stage, 0, partial[kBuf]);
        in_flight.cur_stage = stages.stage;
        stages.advance();
    }

    // Partial buffer kBuf's WGMMAs are complete: free their stage and promote them.
    template <uint32_t kBuf, typename Straddle>
    __device__ __forceinline__ void retire(const InFlight& in_flight, uint32_t done_stage, Straddle straddle) {
        #pragma unroll
        for (uint32_t i = 0; i < kNumAccum; ++i)
            wgmma_fence_operand(partial[kBuf][i]);
        wg.release(done_stage);
        Math::template promote<kNumAccum>(final_accum[0], partial[kBuf], in_flight.scales[kBuf], straddle);
    }

    // Steady step for K block k_block (in buffer kParity): put k_block + 1 in flight, then promote k_block.
    template <uint32_t kParity, typename Straddle>
    __device__ __forceinline__ void step(InFlight& in_flight, uint32_t k_block, Straddle straddle) {
        const uint32_t done_stage = in_flight.cur_stage;
        issue_next<1 - kParity>(in_flight, k_block + 1);
        wgmma_wait_group<1>();
        retire<kParity>(in_flight, done_stage, straddle);
    }

    // A chunk of kLen K blocks, pipelined inside and drained at its end.
    template <uint32_t kLen, typename Straddle>
    __device__ __forceinline__ void run_chunk(InFlight& in_flight, uint32_t k0, Straddle straddle) {
        issue_next<0>(in_flight, k0);
        static_for<kLen - 1>(
            [&](auto i) { this->template step<decltype(i)::value % 2>(in_flight, k0 + i, straddle); });
        wgmma_wait_group<0>();
        retire<(kLen - 1) % 2>(in_flight, in_flight.cur_stage, straddle);
    }
};

// The two math warpgroups' turns at issuing WGMMAs (named barriers kIssueBarrier + warpgroup), when kOrdered: one
// promotes while the other's WGMMAs run instead of both promoting together. Warpgroup 0 issues first; every pass is
// consumed before exit (finish).
template <bool kOrdered>
struct IssueTurns {
    static constexpr uint32_t kIssueBarrier = 4;  // and 5 (named_barrier_sync's registry)
    uint32_t math_wg;

    __device__ __forceinline__ void wait() const {
        if constexpr (kOrdered)
            named_barrier_sync<256>(kIssueBarrier + math_wg);
    }
    __device__ __forceinline__ void pass() const {
        if constexpr (kOrdered)
            named_barrier_arrive<256>(kIssueBarrier + 1 - math_wg);
    }
    __device__ __forceinline__ void start() const {
        if (math_wg == 1)
            pass();  // warpgroup 0 issues first
    }
    __device__ __forceinline__ void finish() const {
        if (math_wg == 0)
            wait();  // consume warpgroup 1's last pass (every arrival is matched before exit)
    }
};

// One tile's K loop of a promoting kernel with a run-time K (num_k_blocks, per group) and per-stage scales of rows
// and columns (FP8RowColPromotion): per K block and 64-row sub-tile, issue the WGMMAs in the warpgroup's turn, read
// the scales while they run, wait, and promote.
template <typename Shell, typename Promotion>
struct RowColKLoop {
    using Math = typename Promotion::Math;
    static constexpr uint32_t kNumSubTiles = Shell::kNumSubTiles;
    static constexpr uint32_t kNumAccum = Shell::kNumAccum;
    static constexpr bool kPreloadSB = Promotion::kPreloadSB;
    // NOTES: turns, except with one 64-row sub-tile per warpgroup and preloaded column scales (128x152), whose
    // promotion is short enough on its own. H200, uniform descriptors (benchmarks/NOTES.md, issue 14): turns +8% at
    // 256x112 and equal at 128x192, but -16% at 128x152.
    static constexpr bool kOrderedIssue = Shell::kNumMathThreads == 256 and (kNumSubTiles > 1 or not kPreloadSB);
    using Turns = IssueTurns<kOrderedIssue>;
    DG_STATIC_ASSERT(Promotion::kNumAccum == kNumAccum and Promotion::kNumSubTiles == kNumSubTiles,
                     "the promotion's accumulator layout must be the shell's");

    const Shell& shell;
    const typename Shell::MathWarpgroup& wg;
    const Math& promotion;
    const Turns& turns;
    typename Shell::Stages& stages;
    float (&partial)[kNumAccum];
    float (&final_accum)[kNumSubTiles][kNumAccum];

    __device__ __forceinline__ void run(uint32_t num_k_blocks) {
        #pragma unroll 1
        for (uint32_t k_block = 0; k_block < num_k_blocks; ++k_block) {
            shell.ring.wait_full(stages);
            const uint32_t sb_stage = promotion.column_scales(stages.stage);
            // Column scales of this thread, read once per K block for all sub-tiles (while the WGMMAs run).
            float sb[Promotion::kNumPreloaded];
            #pragma unroll
            for (uint32_t s = 0; s < kNumSubTiles; ++s) {
                turns.wait();
                wg.issue_mma(stages.stage, s, partial);
                turns.pass();

                float sa_lo, sa_hi;
                promotion.row_scales(stages.stage, s, sa_lo, sa_hi);
                if (s == 0)
                    Math::preload_columns(sb_stage, sb);
                wgmma_wait_group<0>();
                #pragma unroll
                for (uint32_t i = 0; i < kNumAccum; ++i)
                    wgmma_fence_operand(partial[i]);
                if (kPreloadSB and s + 1 == kNumSubTiles)
                    wg.release(stages.stage);
                Math::promote(final_accum[s], partial, sa_lo, sa_hi, sb_stage, sb);
            }
            if constexpr (not kPreloadSB)
                wg.release(stages.stage);
            stages.advance();
        }
    }
};

// One tile's K loop without promotion (NoPromotion): every K block's WGMMAs add into the tile's accumulators, the
// first K block's overwriting them. One K block stays in flight: K block i + 1's WGMMAs are issued before K block i's
// are waited for and its stage released, so the tensor cores do not idle while the next batch is issued (WGMMAs on
// the same accumulators run in issue order).
// NOTES: the BF16 GEMM on an H100 against cuBLAS, same harness: geomean 0.81 -> 0.90 (nt) and 0.86 -> 0.90 (tn) over
// test_bf16's 21 dense shapes, most at m <= 128 (benchmarks/NOTES.md, "BF16 GEMMs").
template <typename Shell, typename Promotion>
struct AccumulatingKLoop {
    static constexpr uint32_t kNumSubTiles = Shell::kNumSubTiles;
    static constexpr uint32_t kNumAccum = Shell::kNumAccum;
    DG_STATIC_ASSERT(not Promotion::kPromotes, "a promoting policy needs a promoting K loop (PromotedKLoop)");

    const Shell& shell;
    const typename Shell::MathWarpgroup& wg;
    typename Shell::Stages& stages;
    float (&accum)[kNumSubTiles][kNumAccum];

    __device__ __forceinline__ void issue(uint32_t k_block) {
        shell.ring.wait_full(stages);
        #pragma unroll
        for (uint32_t s = 0; s < kNumSubTiles; ++s)
            wg.issue_mma(stages.stage, s, accum[s], k_block > 0);
    }

    __device__ __forceinline__ void run(uint32_t num_k_blocks) {
        issue(0);
        uint32_t prev_stage = stages.stage;
        stages.advance();
        #pragma unroll 1
        for (uint32_t k_block = 1; k_block < num_k_blocks; ++k_block) {
            issue(k_block);
            wgmma_wait_group<1>();
            wg.release(prev_stage);
            prev_stage = stages.stage;
            stages.advance();
        }
        wgmma_wait_group<0>();
        #pragma unroll
        for (uint32_t s = 0; s < kNumSubTiles; ++s)
            #pragma unroll
            for (uint32_t i = 0; i < kNumAccum; ++i)
                wgmma_fence_operand(accum[s][i]);
        wg.release(prev_stage);
    }
};

}  // namespace deep_gemm::sm90
