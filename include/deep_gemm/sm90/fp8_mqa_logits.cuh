#pragma once

// Hopper (sm_90a) MQA logits of the DeepSeek-V3.2 attention indexer (DeepGEMM's fp8_mqa_logits): for query i and a
// key j in [ks[i], ke[i]), logits[i, j] = sum_h w[i, h] * ReLU(q[i, h] . kv[j]) * kv_sf[j], with FP8 q [S, H, D] and
// kv [Skv, D], FP32 sums. A CTA takes BLOCK_Q queries, whose BLOCK_Q x H (query, head) rows are the N side of one
// WGMMA, loaded once; it walks the union of their key ranges in blocks of BLOCK_KV keys through a ring of TMA stages,
// 64 keys (WGMMA's M side) per math warpgroup. In the accumulator a thread holds two keys and 2 x N / 8 (query, head)
// columns: it sums its columns of each query in registers, its quad (4 lanes) the rest, and one lane stores each
// (key, query) sum. Keys outside a query's range are not written; with kClean the whole row outside [ks, ke) becomes
// -inf. kCompressed: column j - ks[i] of a max_seqlen_k-wide row instead of column j.
// Built from the sm90 pieces (barriers, TMA loads, the e4m3 WGMMA and its descriptors); no GEMM tile walk fits it.
// NOTES (H100, DeepGEMM's test_attention cases): a persistent walk over query blocks with two q tiles in flight, and
// two accumulator sets per warpgroup (a block's WGMMAs under the previous block's reduction), were both 5-20% slower
// than this one-CTA-per-query-block, one-accumulator form; the reduction and stores, not the tensor cores, bound it.

#include <deep_gemm/common/barrier.cuh>
#include <deep_gemm/common/tma.cuh>
#include <deep_gemm/common/utils.cuh>
#include <deep_gemm/sm90/mma.cuh>
#include <deep_gemm/sm90/mqa_logits.cuh>

#if defined(__CUDA_ARCH__) and not defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "deep_gemm: the sm90 kernels need the arch-specific target sm_90a (plain sm_90 has no WGMMA/setmaxnreg)"
#endif

namespace deep_gemm::sm90 {

constexpr uint32_t kMQAMathWarpgroups = 2;
constexpr uint32_t kMQAMathThreads = 128 * kMQAMathWarpgroups;
constexpr uint32_t kMQANumThreads = kMQAMathThreads + 32;  // + one TMA producer warp

// Shared-memory bytes of one instantiation; mirrored by the host (heuristics/sm90_mqa.py), asserted below.
template <uint32_t kNumHeads, uint32_t kHeadDim, uint32_t BLOCK_Q, uint32_t BLOCK_KV, uint32_t kNumStages>
constexpr uint32_t mqa_logits_smem_size() {
    return BLOCK_Q * kNumHeads * kHeadDim + kNumStages * BLOCK_KV * kHeadDim + (2 * kNumStages + 1) * 8;
}

// Config: kNumHeads, kHeadDim, BLOCK_Q, BLOCK_KV, kNumStages, kCompressed, kClean, kOutputBF16, kSmemSize.
template <typename Config>
__global__ void __launch_bounds__(kMQANumThreads, 1)
fp8_mqa_logits_impl(const __grid_constant__ TmaDescriptor tensor_map_q,   // q [S x H, D] fp8, 128B-aligned rows
                    const __grid_constant__ TmaDescriptor tensor_map_kv,  // kv [Skv, D] fp8
                    const float* __restrict__ kv_sf,                       // [Skv]
                    const float* __restrict__ weights,                     // [S, H], row stride weights_stride
                    const int32_t* __restrict__ ks,                        // [S] first key of each query
                    const int32_t* __restrict__ ke,                        // [S] one past its last key
                    void* __restrict__ logits,                             // [S, logits_stride] FP32 or BF16
                    const uint32_t seq_len,
                    const uint32_t seq_len_kv,
                    const uint32_t weights_stride,
                    const uint32_t logits_stride,
                    const uint32_t max_seqlen_k) {
#if defined(__CUDA_ARCH__)
    constexpr uint32_t H = Config::kNumHeads;
    constexpr uint32_t D = Config::kHeadDim;
    constexpr uint32_t BLOCK_Q = Config::BLOCK_Q;
    constexpr uint32_t BLOCK_KV = Config::BLOCK_KV;
    constexpr uint32_t kNumStages = Config::kNumStages;
    constexpr uint32_t N = BLOCK_Q * H;
    using MMA = FP8WGMMA<N>;
    using Heads = MQAHeads<BLOCK_Q, H>;
    DG_STATIC_ASSERT(D == 32 or D == 64 or D == 128, "head dim 32, 64 or 128: one swizzled row per (query, head)");
    DG_STATIC_ASSERT(H % 8 == 0 and N <= 256, "BLOCK_Q x heads must fit one WGMMA's N");
    DG_STATIC_ASSERT(BLOCK_KV == 64 * kMQAMathWarpgroups, "64 keys per math warpgroup");
    DG_STATIC_ASSERT((N * D) % 1024 == 0 and (BLOCK_KV * D) % 1024 == 0, "stages 1024-byte aligned");
    DG_STATIC_ASSERT(not (Config::kCompressed and Config::kClean), "compressed logits are not cleaned");
    DG_STATIC_ASSERT(Config::kSmemSize == (mqa_logits_smem_size<H, D, BLOCK_Q, BLOCK_KV, kNumStages>()),
                     "host and device disagree on the shared-memory size");

    extern __shared__ __align__(1024) uint8_t smem[];
    uint8_t* smem_q = smem;
    uint8_t* smem_kv = smem + N * D;
    Barrier* full = reinterpret_cast<Barrier*>(smem_kv + kNumStages * BLOCK_KV * D);
    Barrier* empty = full + kNumStages;
    Barrier* q_full = empty + kNumStages;

    const uint32_t warp_idx = threadIdx.x / 32;
    const uint32_t lane = threadIdx.x % 32;
    const uint32_t q_begin = blockIdx.x * BLOCK_Q;

    // The CTA's keys: the union of its queries' ranges, clipped to [0, Skv) (every thread derives the same).
    uint32_t kv_begin = seq_len_kv, kv_end = 0;
    #pragma unroll
    for (uint32_t q = 0; q < BLOCK_Q; ++q) {
        if (q_begin + q < seq_len) {
            const uint32_t s = min(static_cast<uint32_t>(max(__ldg(ks + q_begin + q), 0)), seq_len_kv);
            const uint32_t e = min(static_cast<uint32_t>(max(__ldg(ke + q_begin + q), 0)), seq_len_kv);
            if (s < e) {
                kv_begin = min(kv_begin, s);
                kv_end = max(kv_end, e);
            }
        }
    }
    const uint32_t num_kv_blocks = kv_begin < kv_end ? ceil_div(kv_end - kv_begin, BLOCK_KV) : 0;

    if (threadIdx.x == kMQAMathThreads) {
        #pragma unroll
        for (uint32_t s = 0; s < kNumStages; ++s) {
            full[s].init(1);
            empty[s].init(kMQAMathThreads);
        }
        q_full->init(1);
        fence_barrier_init();
    }
    __syncthreads();

    if (warp_idx == kMQAMathThreads / 32) {
        // The producer: q once, then the key blocks through the ring.
        if (lane == 0 and num_kv_blocks > 0) {
            prefetch_tma_descriptor(&tensor_map_q);
            prefetch_tma_descriptor(&tensor_map_kv);
            tma_load_2d(&tensor_map_q, q_full, smem_q, 0, static_cast<int32_t>(q_begin * H), kTmaCacheHintEvictNormal);
            q_full->arrive_and_expect_tx(N * D);
            for (uint32_t b = 0; b < num_kv_blocks; ++b) {
                const uint32_t stage = b % kNumStages;
                empty[stage].wait(((b / kNumStages) & 1) ^ 1);
                tma_load_2d(&tensor_map_kv, &full[stage], smem_kv + stage * BLOCK_KV * D, 0,
                            static_cast<int32_t>(kv_begin + b * BLOCK_KV), kTmaCacheHintEvictNormal);
                full[stage].arrive_and_expect_tx(BLOCK_KV * D);
            }
        }
        return;
    }

    // Math warpgroups: this thread's weights and its queries' ranges.
    const uint32_t wg = warp_idx / 4;
    float w[Heads::kNumChunks][2];
    Heads::load_weights(w, lane, [&](uint32_t q, uint32_t h) {
        const uint32_t i = q_begin + q;
        return i < seq_len ? __ldg(weights + static_cast<uint64_t>(i) * weights_stride + h) : 0.0f;
    });
    int32_t q_ks[BLOCK_Q], q_ke[BLOCK_Q];
    #pragma unroll
    for (uint32_t q = 0; q < BLOCK_Q; ++q) {
        const bool valid = q_begin + q < seq_len;
        q_ks[q] = valid ? __ldg(ks + q_begin + q) : 0;
        q_ke[q] = valid ? __ldg(ke + q_begin + q) : 0;
    }

    float accum[MMA::kNumAccum];
    const uint32_t q_desc_lo = kmajor_sw128_desc_lo(smem_u32(smem_q));
    if (num_kv_blocks > 0)
        q_full->wait(0);
    for (uint32_t b = 0; b < num_kv_blocks; ++b) {
        const uint32_t stage = b % kNumStages;
        // This thread's keys: rows lane / 4 and lane / 4 + 8 of its warp's 16 (their scales load under the WGMMAs).
        const uint32_t key0 = kv_begin + b * BLOCK_KV + wg * 64 + (warp_idx % 4) * 16 + lane / 4;
        float sf[2];
        #pragma unroll
        for (uint32_t r = 0; r < 2; ++r)
            sf[r] = key0 + 8 * r < seq_len_kv ? __ldg(kv_sf + key0 + 8 * r) : 0.0f;

        full[stage].wait((b / kNumStages) & 1);
        const uint32_t kv_desc_lo = kmajor_sw128_desc_lo(smem_u32(smem_kv + stage * BLOCK_KV * D + wg * 64 * D));
        mqa_tile_mma<MMA, D>(kv_desc_lo, q_desc_lo, accum);
        empty[stage].arrive();

        float sums[2][BLOCK_Q];
        Heads::reduce(accum, w, sf, sums);
        Heads::store(sums, lane, [&](uint32_t r, uint32_t q, float value) {
            const uint32_t key = key0 + 8 * r;
            const int32_t col = Config::kCompressed ? static_cast<int32_t>(key) - q_ks[q] : static_cast<int32_t>(key);
            const bool in_range = static_cast<int32_t>(key) >= q_ks[q] and static_cast<int32_t>(key) < q_ke[q] and
                                  key < seq_len_kv and
                                  (not Config::kCompressed or col < static_cast<int32_t>(max_seqlen_k));
            if (q_begin + q < seq_len and in_range)
                store_logit<Config::kOutputBF16>(logits, static_cast<uint64_t>(q_begin + q) * logits_stride + col,
                                                 value);
        });
    }

    if constexpr (Config::kClean) {
        // Every column of a query's row outside [ks, ke) becomes -inf (the math threads, row by row, coalesced).
        const uint32_t t = threadIdx.x;
        #pragma unroll
        for (uint32_t q = 0; q < BLOCK_Q; ++q) {
            if (q_begin + q >= seq_len)
                break;
            const uint32_t s = min(static_cast<uint32_t>(max(q_ks[q], 0)), seq_len_kv);
            const uint32_t e = max(s, min(static_cast<uint32_t>(max(q_ke[q], 0)), seq_len_kv));
            const uint64_t row = static_cast<uint64_t>(q_begin + q) * logits_stride;
            #pragma unroll 1
            for (uint32_t j = t; j < seq_len_kv; j += kMQAMathThreads) {
                if (j < s or j >= e)
                    store_logit<Config::kOutputBF16>(logits, row + j, __int_as_float(0xff800000u));  // -inf
            }
        }
    }
#endif
}

}  // namespace deep_gemm::sm90
