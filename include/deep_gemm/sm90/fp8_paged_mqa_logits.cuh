#pragma once

// Hopper (sm_90a) paged MQA logits of the DeepSeek-V3.2 attention indexer at decode (DeepGEMM's
// fp8_paged_mqa_logits): for batch b, its next-n query j and a cached token t < context_lens[b, j],
// logits[b * next_n + j, t] = sum_h w[b * next_n + j, h] * ReLU(q[b, j, h] . kv[t]) * sf[t], where token t lives in
// cache block block_table[b, t / 64], row t % 64. A cache block is 64 rows of 128 FP8 values and then their 64 FP32
// scales: 8448 bytes, i.e. 66 rows of 128 bytes, so TMA reads a block's values as 64 rows of a [blocks x 66, 128]
// matrix and its scales as the 2 rows after them (a second, unswizzled map). The work is cut into items of
// kSplitBlocks cache blocks of one batch; persistent CTAs take the items from
// schedule_meta[cta] (batch, item) up to the next CTA's start (get_paged_mqa_logits_metadata). Per item the q tile
// of the batch (next_n x H rows: WGMMA's N side) is loaded unless it is the previous item's, and pairs of cache blocks
// go through a TMA ring, one block of 64 tokens (WGMMA's M side) per math warpgroup; the head reduction and stores
// are the prefill kernel's (fp8_mqa_logits.cuh). Tokens at or past a query's context length are not written.

#include <deep_gemm/common/barrier.cuh>
#include <deep_gemm/common/tma.cuh>
#include <deep_gemm/common/utils.cuh>
#include <deep_gemm/sm90/mma.cuh>
#include <deep_gemm/sm90/mqa_logits.cuh>

#if defined(__CUDA_ARCH__) and not defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "deep_gemm: the sm90 kernels need the arch-specific target sm_90a (plain sm_90 has no WGMMA/setmaxnreg)"
#endif

namespace deep_gemm::sm90 {

constexpr uint32_t kPagedMathThreads = 256;                      // two math warpgroups
constexpr uint32_t kPagedNumThreads = kPagedMathThreads + 128;   // + a producer warpgroup (one thread issues TMA)
constexpr uint32_t kPagedBlockTokens = 64;                       // tokens per cache block
constexpr uint32_t kPagedHeadDim = 128;
constexpr uint32_t kPagedBlockRows = 66;                         // 128-byte rows per cache block (values + scales)

// Shared-memory bytes of one instantiation; mirrored by the host (heuristics/sm90_mqa.py), asserted below.
template <uint32_t N, uint32_t kNumStages>
constexpr uint32_t paged_mqa_logits_smem_size() {
    return 2 * N * kPagedHeadDim + kNumStages * 2 * kPagedBlockTokens * (kPagedHeadDim + 4) + (2 * kNumStages + 4) * 8;
}

// Config: kNumHeads, kNextN, kSplitBlocks (cache blocks per work item, even), kNumStages, kOutputBF16, kSmemSize.
template <typename Config>
__global__ void __launch_bounds__(kPagedNumThreads, 1)
fp8_paged_mqa_logits_impl(const __grid_constant__ TmaDescriptor tensor_map_q,   // q [B x next_n x H, 128] fp8
                          const __grid_constant__ TmaDescriptor tensor_map_kv,  // kv_cache [blocks x 66, 128] bytes
                          const __grid_constant__ TmaDescriptor tensor_map_sf,  // the same, 2-row boxes
                          const float* __restrict__ weights,                    // [B x next_n, H]
                          const int32_t* __restrict__ context_lens,             // [B, next_n]
                          const int32_t* __restrict__ block_table,              // [B, block_table_stride]
                          const int32_t* __restrict__ schedule_meta,            // [num CTAs + 1, 2]
                          void* __restrict__ logits,                            // [B x next_n, logits_stride]
                          const uint32_t batch_size,
                          const uint32_t max_context_len,
                          const uint32_t block_table_stride,
                          const uint32_t logits_stride) {
#if defined(__CUDA_ARCH__)
    constexpr uint32_t H = Config::kNumHeads;
    constexpr uint32_t kNextN = Config::kNextN;
    constexpr uint32_t D = kPagedHeadDim;
    constexpr uint32_t kNumStages = Config::kNumStages;
    constexpr uint32_t kSplitBlocks = Config::kSplitBlocks;
    constexpr uint32_t kItemTokens = kSplitBlocks * kPagedBlockTokens;
    constexpr uint32_t N = kNextN * H;
    constexpr uint32_t kStageBytes = 2 * kPagedBlockTokens * D;  // one cache block per math warpgroup
    constexpr uint32_t kStageSfBytes = 2 * kPagedBlockTokens * 4;  // and its scales
    using MMA = FP8WGMMA<N>;
    using Heads = MQAHeads<kNextN, H>;
    DG_STATIC_ASSERT(H % 8 == 0 and N <= 256, "next_n x heads must fit one WGMMA's N");
    DG_STATIC_ASSERT(kSplitBlocks % 2 == 0, "a work item is whole pairs of cache blocks");
    DG_STATIC_ASSERT((N * D) % 1024 == 0, "q tiles 1024-byte aligned");
    DG_STATIC_ASSERT(Config::kSmemSize == (paged_mqa_logits_smem_size<N, kNumStages>()),
                     "host and device disagree on the shared-memory size");

    extern __shared__ __align__(1024) uint8_t smem[];
    uint8_t* smem_q = smem;                       // 2 x [N, D]
    uint8_t* smem_kv = smem + 2 * N * D;          // kNumStages x [2 x 64, D]
    float* smem_sf = reinterpret_cast<float*>(smem_kv + kNumStages * kStageBytes);  // kNumStages x [2 x 64]
    Barrier* full = reinterpret_cast<Barrier*>(smem_kv + kNumStages * (kStageBytes + kStageSfBytes));
    Barrier* empty = full + kNumStages;
    Barrier* q_full = empty + kNumStages;
    Barrier* q_empty = q_full + 2;

    const uint32_t warp_idx = threadIdx.x / 32;
    const uint32_t lane = threadIdx.x % 32;
    // This CTA's items: from (batch, item) schedule_meta[cta] up to schedule_meta[cta + 1], in batch-major order.
    const uint32_t first_batch = static_cast<uint32_t>(__ldg(schedule_meta + 2 * blockIdx.x));
    const uint32_t first_item = static_cast<uint32_t>(__ldg(schedule_meta + 2 * blockIdx.x + 1));
    const uint32_t end_batch = static_cast<uint32_t>(__ldg(schedule_meta + 2 * blockIdx.x + 2));
    const uint32_t end_item = static_cast<uint32_t>(__ldg(schedule_meta + 2 * blockIdx.x + 3));
    // Tokens of batch b: its longest context (its last next-n query's); its items; the cache block of its token block
    // `blk` (block 0 past the context, whose tokens are not written: table entries there need not be valid).
    const auto batch_tokens = [&](uint32_t b) {
        return static_cast<uint32_t>(max(__ldg(context_lens + b * kNextN + kNextN - 1), 0));
    };
    const auto cache_block = [&](uint32_t b, uint32_t blk, uint32_t tokens) {
        return blk * kPagedBlockTokens < tokens ?
            __ldg(block_table + static_cast<uint64_t>(b) * block_table_stride + blk) : 0;
    };

    if (threadIdx.x == kPagedMathThreads) {
        #pragma unroll
        for (uint32_t s = 0; s < kNumStages; ++s) {
            full[s].init(1);
            empty[s].init(kPagedMathThreads);
        }
        #pragma unroll
        for (uint32_t s = 0; s < 2; ++s) {
            q_full[s].init(1);
            q_empty[s].init(kPagedMathThreads);
        }
        fence_barrier_init();
    }
    __syncthreads();

    // Both roles walk the same items in the same order: stage_count counts block pairs through the ring, q_count the
    // q tiles (one per batch met); a batch without (more) items is stepped over.
    const auto in_range = [&](uint32_t b, uint32_t item) {
        return b < batch_size and (b < end_batch or (b == end_batch and item < end_item));
    };
    if (threadIdx.x >= kPagedMathThreads) {
        // The producer. Its registers go to the math warpgroups (setmaxnreg: 128 x 40 + 256 x 232 <= 64K).
        warpgroup_reg_dealloc<40>();
        if (threadIdx.x == kPagedMathThreads) {
            prefetch_tma_descriptor(&tensor_map_q);
            prefetch_tma_descriptor(&tensor_map_kv);
            prefetch_tma_descriptor(&tensor_map_sf);
            uint32_t stage_count = 0, q_count = 0, q_batch = 0xffffffffu, tokens_batch = 0xffffffffu, tokens = 0;
            for (uint32_t b = first_batch, item = first_item; in_range(b, item);) {
                if (b != tokens_batch)
                    tokens = batch_tokens(b), tokens_batch = b;
                if (item >= ceil_div(tokens, kItemTokens)) {
                    ++b, item = 0;
                    continue;
                }
                if (b != q_batch) {  // this batch's q tile into the other buffer
                    const uint32_t q_stage = q_count % 2;
                    q_empty[q_stage].wait(((q_count / 2) & 1) ^ 1);
                    tma_load_2d(&tensor_map_q, &q_full[q_stage], smem_q + q_stage * N * D, 0,
                                static_cast<int32_t>(b * N), kTmaCacheHintEvictNormal);
                    q_full[q_stage].arrive_and_expect_tx(N * D);
                    q_batch = b, ++q_count;
                }
                // The item's cache blocks, read together (one memory latency per item, not one per block).
                int32_t blocks[kSplitBlocks];
                #pragma unroll
                for (uint32_t i = 0; i < kSplitBlocks; ++i)
                    blocks[i] = cache_block(b, item * kSplitBlocks + i, tokens);
                #pragma unroll
                for (uint32_t pair = 0; pair < kSplitBlocks / 2; ++pair, ++stage_count) {
                    const uint32_t stage = stage_count % kNumStages;
                    empty[stage].wait(((stage_count / kNumStages) & 1) ^ 1);
                    #pragma unroll
                    for (uint32_t half = 0; half < 2; ++half) {
                        const int32_t row = blocks[2 * pair + half] * static_cast<int32_t>(kPagedBlockRows);
                        tma_load_2d(&tensor_map_kv, &full[stage], smem_kv + stage * kStageBytes +
                                    half * kPagedBlockTokens * D, 0, row, kTmaCacheHintEvictNormal);
                        tma_load_2d(&tensor_map_sf, &full[stage], smem_sf + (2 * stage + half) * kPagedBlockTokens, 0,
                                    row + static_cast<int32_t>(kPagedBlockTokens), kTmaCacheHintEvictNormal);
                    }
                    full[stage].arrive_and_expect_tx(kStageBytes + kStageSfBytes);
                }
                ++item;
            }
        }
        return;
    }

    // Math warpgroups: warpgroup wg takes the cache block 2 x pair + wg of each pair.
    warpgroup_reg_alloc<232>();
    const uint32_t wg = warp_idx / 4;
    uint32_t stage_count = 0, q_count = 0, q_batch = 0xffffffffu, q_stage = 0, tokens_batch = 0xffffffffu, tokens = 0;
    float w[Heads::kNumChunks][2];
    int32_t ctx[kNextN];
    float accum[MMA::kNumAccum];
    for (uint32_t b = first_batch, item = first_item; in_range(b, item);) {
        if (b != tokens_batch)
            tokens = batch_tokens(b), tokens_batch = b;
        if (item >= ceil_div(tokens, kItemTokens)) {
            ++b, item = 0;
            continue;
        }
        if (b != q_batch) {
            if (q_count > 0)
                q_empty[q_stage].arrive();  // the previous batch's q tile is no longer read
            q_stage = q_count % 2;
            Heads::load_weights(w, lane, [&](uint32_t j, uint32_t h) {
                return __ldg(weights + static_cast<uint64_t>(b * kNextN + j) * H + h);
            });
            #pragma unroll
            for (uint32_t j = 0; j < kNextN; ++j)
                ctx[j] = __ldg(context_lens + b * kNextN + j);
            q_full[q_stage].wait((q_count / 2) & 1);
            q_batch = b, ++q_count;
        }
        const uint32_t q_desc_lo = kmajor_sw128_desc_lo(smem_u32(smem_q + q_stage * N * D));
        #pragma unroll 1
        for (uint32_t pair = 0; pair < kSplitBlocks / 2; ++pair, ++stage_count) {
            const uint32_t stage = stage_count % kNumStages;
            const uint32_t blk = item * kSplitBlocks + 2 * pair + wg;
            // This thread's tokens: rows lane / 4 and lane / 4 + 8 of its warp's 16 in the block; their scales.
            const uint32_t row0 = (warp_idx % 4) * 16 + lane / 4;
            full[stage].wait((stage_count / kNumStages) & 1);
            float sf[2];
            #pragma unroll
            for (uint32_t r = 0; r < 2; ++r)
                sf[r] = smem_sf[(2 * stage + wg) * kPagedBlockTokens + row0 + 8 * r];
            const uint32_t kv_desc_lo = kmajor_sw128_desc_lo(
                smem_u32(smem_kv + stage * kStageBytes + wg * kPagedBlockTokens * D));
            mqa_tile_mma<MMA, D>(kv_desc_lo, q_desc_lo, accum);
            empty[stage].arrive();

            float sums[2][kNextN];
            Heads::reduce(accum, w, sf, sums);
            Heads::store(sums, [&](uint32_t r, uint32_t j, float value) {
                const uint32_t t = blk * kPagedBlockTokens + row0 + 8 * r;
                if (static_cast<int32_t>(t) < ctx[j] and t < max_context_len)
                    store_logit<Config::kOutputBF16>(logits, static_cast<uint64_t>(b * kNextN + j) * logits_stride + t,
                                                     value);
            });
        }
        ++item;
    }
#endif
}

}  // namespace deep_gemm::sm90
