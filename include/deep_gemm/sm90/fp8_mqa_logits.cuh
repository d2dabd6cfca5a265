#pragma once

// Hopper (sm_90a) MQA logits of the DeepSeek-V3.2 attention indexer (DeepGEMM's fp8_mqa_logits): for query i and a
// key j in [ks[i], ke[i]), logits[i, j] = sum_h w[i, h] * ReLU(q[i, h] . kv[j]) * kv_sf[j], with FP8 q [S, H, D] and
// kv [Skv, D], FP32 sums. A CTA takes BLOCK_Q queries, whose BLOCK_Q x H (query, head) rows are the N side of one
// WGMMA, loaded once; it walks the union of their key ranges in blocks of BLOCK_KV keys through a ring of TMA stages,
// 64 keys (WGMMA's M side) per math warpgroup. In the accumulator a thread holds two keys and 2 x N / 8 (query, head)
// columns: it sums its columns of each query in registers, its quad (4 lanes) the rest, and stores each (key, query)
// sum. kPaddedLogits (the logits' owner padded them): every walked key is written, without range checks; else only
// keys in a query's range. With kClean the whole row outside [ks, ke) then becomes -inf. kCompressed: column j - ks[i]
// of a max_seqlen_k-wide row instead of column j.
// Built from the sm90 pieces (barriers, TMA loads, the e4m3 WGMMA and its descriptors); no GEMM tile walk fits it.
// NOTES (H100, DeepGEMM's test_attention cases): the reduction and stores, not the tensor cores, bound it, so the
// instruction count per key block sets the speed; four math warpgroups were 1.1-1.6x faster than two. With two, a
// persistent walk over query blocks (two q tiles in flight) and two accumulator sets per warpgroup were 5-20% slower.

#include <deep_gemm/common/barrier.cuh>
#include <deep_gemm/common/tma.cuh>
#include <deep_gemm/common/utils.cuh>
#include <deep_gemm/sm90/mma.cuh>
#include <deep_gemm/sm90/mqa_logits.cuh>

#if defined(__CUDA_ARCH__) and not defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "deep_gemm: the sm90 kernels need the arch-specific target sm_90a (plain sm_90 has no WGMMA/setmaxnreg)"
#endif

namespace deep_gemm::sm90 {

// Shared-memory bytes of one instantiation; mirrored by the host (heuristics/sm90_mqa.py), asserted below.
template <uint32_t kNumHeads, uint32_t kHeadDim, uint32_t BLOCK_Q, uint32_t BLOCK_KV, uint32_t kNumStages>
constexpr uint32_t mqa_logits_smem_size() {
    return BLOCK_Q * kNumHeads * kHeadDim + kNumStages * BLOCK_KV * kHeadDim + (2 * kNumStages + 1) * 8;
}

// Config: kNumHeads, kHeadDim, BLOCK_Q, BLOCK_KV, kNumStages, kMathWarpgroups, kCompressed, kClean, kOutputBF16,
// kPaddedLogits, kSmemSize. kMathWarpgroups x 128 math threads and a producer warpgroup (one warp issues the TMA
// loads; the warpgroup exists so that setmaxnreg can move its registers to the math threads).
template <typename Config>
__global__ void __launch_bounds__(Config::kMathWarpgroups * 128 + 128, 1)
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
    constexpr uint32_t kMQAMathThreads = Config::kMathWarpgroups * 128;
    // Registers: each thread enters with what the launch bounds leave (multiples of 8); the producer keeps 24 and
    // the math threads take the rest.
    constexpr uint32_t kNumThreads = kMQAMathThreads + 128;
    constexpr uint32_t kEntryRegs = 65536 / kNumThreads / 8 * 8;
    constexpr uint32_t kProducerRegs = 24;
    constexpr uint32_t kMathRegsFit = (kEntryRegs * kNumThreads - 128 * kProducerRegs) / kMQAMathThreads / 8 * 8;
    constexpr uint32_t kMathRegs = kMathRegsFit < 240 ? kMathRegsFit : 240;
    constexpr uint32_t N = BLOCK_Q * H;
    using MMA = FP8WGMMA<N>;
    using Heads = MQAHeads<BLOCK_Q, H>;
    DG_STATIC_ASSERT(D == 32 or D == 64 or D == 128, "head dim 32, 64 or 128: one swizzled row per (query, head)");
    DG_STATIC_ASSERT(H % 8 == 0 and N <= 256, "BLOCK_Q x heads must fit one WGMMA's N");
    DG_STATIC_ASSERT(BLOCK_KV == 64 * Config::kMathWarpgroups, "64 keys per math warpgroup");
    DG_STATIC_ASSERT((N * D) % 1024 == 0 and (BLOCK_KV * D) % 1024 == 0, "stages 1024-byte aligned");
    DG_STATIC_ASSERT(not (Config::kCompressed and Config::kClean), "compressed logits are not cleaned");
    DG_STATIC_ASSERT(not (Config::kCompressed and Config::kPaddedLogits), "compressed rows are written in range only");
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

    if (threadIdx.x >= kMQAMathThreads) {
        // The producer: q once, then the key blocks through the ring.
        warpgroup_reg_dealloc<kProducerRegs>();
        if (warp_idx == kMQAMathThreads / 32 and lane == 0 and num_kv_blocks > 0) {
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
    warpgroup_reg_alloc<kMathRegs>();
    const uint32_t wg = warp_idx / 4;
    float w[Heads::kNumChunks][2];
    Heads::load_weights(w, lane, [&](uint32_t q, uint32_t h) {
        const uint32_t i = q_begin + q;
        return i < seq_len ? __ldg(weights + static_cast<uint64_t>(i) * weights_stride + h) : 0.0f;
    });
    // Query q keeps keys k with 0 <= k - q_ks[q] < q_len[q]: its range cut to the keys that exist and, compressed, to
    // the row's max_seqlen_k columns (a query past seq_len keeps none).
    int32_t q_ks[BLOCK_Q];
    uint32_t q_len[BLOCK_Q];
    #pragma unroll
    for (uint32_t q = 0; q < BLOCK_Q; ++q) {
        const bool valid = q_begin + q < seq_len;
        q_ks[q] = valid ? __ldg(ks + q_begin + q) : 0;
        int32_t e = valid ? min(__ldg(ke + q_begin + q), static_cast<int32_t>(seq_len_kv)) : 0;
        if constexpr (Config::kCompressed)
            e = min(e, q_ks[q] + static_cast<int32_t>(max_seqlen_k));
        q_len[q] = static_cast<uint32_t>(max(e - q_ks[q], 0));
    }

    float accum[MMA::kNumAccum];
    const uint32_t q_desc_lo = kmajor_sw128_desc_lo(smem_u32(smem_q));
    // This warpgroup's 64 keys of stage 0; a stage is BLOCK_KV x D bytes further (descriptor addresses count 16 bytes).
    const uint32_t kv_desc_lo0 = kmajor_sw128_desc_lo(smem_u32(smem_kv + wg * 64 * D));
    if (num_kv_blocks > 0)
        q_full->wait(0);
    // This thread's keys: rows lane / 4 and lane / 4 + 8 of its warp's 16 in each block.
    uint32_t key0 = kv_begin + wg * 64 + (warp_idx % 4) * 16 + lane / 4;
    // key0's logit of the first query (compressed: at column key0), advanced a block at a time; query q's is
    // q_offset(q) further.
    Logit<Config::kOutputBF16>* out = static_cast<Logit<Config::kOutputBF16>*>(logits) +
                                      static_cast<uint64_t>(q_begin) * logits_stride + key0;
    const auto q_offset = [&](uint32_t q) {
        return static_cast<long long>(q) * logits_stride - (Config::kCompressed ? q_ks[q] : 0);
    };
    uint32_t stage = 0, phase = 0;
    for (uint32_t b = 0; b < num_kv_blocks; ++b) {
        // The keys' scales load under the WGMMAs; a key past the end reads the last scale (its logit is not kept).
        float sf[2];
        #pragma unroll
        for (uint32_t r = 0; r < 2; ++r)
            sf[r] = __ldg(kv_sf + min(key0 + 8 * r, seq_len_kv - 1));

        full[stage].wait(phase);
        mqa_tile_mma<MMA, D>(kv_desc_lo0 + stage * (BLOCK_KV * D / 16), q_desc_lo, accum);
        empty[stage].arrive();

        float sums[2][BLOCK_Q];
        Heads::reduce(accum, w, sf, sums);
        Heads::store(sums, [&](uint32_t r, uint32_t q, float value) {
            // With padded logits rows up to the next BLOCK_Q multiple and BLOCK_KV columns past the last key exist:
            // keys outside the query's range are written too (the clean below or the caller's contract covers them).
            if (Config::kPaddedLogits or key0 + 8 * r - static_cast<uint32_t>(q_ks[q]) < q_len[q])
                out[q_offset(q) + 8 * r] = to_logit<Config::kOutputBF16>(value);
        });
        key0 += BLOCK_KV;
        out += BLOCK_KV;
        stage = stage + 1 == kNumStages ? 0 : stage + 1;
        phase ^= stage == 0;
    }

    if constexpr (Config::kClean) {
        // The logits of keys outside a query's range, written above, are overwritten after every math thread's.
        if constexpr (Config::kPaddedLogits)
            named_barrier_sync<kMQAMathThreads>(1);
        // Every column of a query's row outside [ks, ke) becomes -inf (the math threads, row by row, coalesced).
        const uint32_t t = threadIdx.x;
        #pragma unroll
        for (uint32_t q = 0; q < BLOCK_Q; ++q) {
            if (q_begin + q >= seq_len)
                break;
            const uint32_t s = min(static_cast<uint32_t>(max(q_ks[q], 0)), seq_len_kv);
            const uint32_t e = max(s, static_cast<uint32_t>(max(q_ks[q] + static_cast<int32_t>(q_len[q]), 0)));
            const uint64_t row = static_cast<uint64_t>(q_begin + q) * logits_stride;
            #pragma unroll 1
            for (uint32_t j = t; j < s; j += kMQAMathThreads)
                store_logit<Config::kOutputBF16>(logits, row + j, __int_as_float(0xff800000u));  // -inf
            #pragma unroll 1
            for (uint32_t j = e + t; j < seq_len_kv; j += kMQAMathThreads)
                store_logit<Config::kOutputBF16>(logits, row + j, __int_as_float(0xff800000u));
        }
    }
#endif
}

}  // namespace deep_gemm::sm90
