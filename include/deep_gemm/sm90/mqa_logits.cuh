#pragma once

// What the two MQA logits kernels (fp8_mqa_logits.cuh: prefill, fp8_paged_mqa_logits.cuh: paged decode) do alike
// with one 64-key accumulator tile of an m64 x N WGMMA (mqa_tile_mma) whose N columns are kQueries queries x H heads
// (column n: head n % H of query n / H): the thread's weights, the head reduction and the stores.
// In the accumulator (epilogue.cuh's layout) a thread holds keys lane / 4 and lane / 4 + 8 of its warp's 16 and, per
// 8-column chunk c, columns 8 c + 2 (lane % 4) + {0, 1}.

#include <deep_gemm/common/utils.cuh>
#include <deep_gemm/sm90/mma.cuh>

namespace deep_gemm::sm90 {

template <uint32_t kQueries, uint32_t H>
struct MQAHeads {
    static constexpr uint32_t kNumChunks = kQueries * H / 8;
    static constexpr uint32_t kChunksPerQuery = H / 8;
    DG_STATIC_ASSERT(H % 8 == 0 and kQueries * H <= 256, "whole 8-column chunks per query, one WGMMA's N");

    // w[c][x]: the weight of this thread's column 8 c + 2 (lane % 4) + x; `weight(query, head)` reads one.
    template <typename Weight>
    __device__ __forceinline__ static void load_weights(float (&w)[kNumChunks][2], uint32_t lane, Weight&& weight) {
        #pragma unroll
        for (uint32_t c = 0; c < kNumChunks; ++c) {
            #pragma unroll
            for (uint32_t x = 0; x < 2; ++x) {
                const uint32_t n = 8 * c + 2 * (lane % 4) + x;
                w[c][x] = weight(n / H, n % H);
            }
        }
    }

    // sums[r][q] = sf[r] * sum over heads h of w[q, h] * ReLU(accum[key r, query q, head h]): this thread's columns in
    // registers, then its quad's (every lane of the quad ends with the whole sum).
    __device__ __forceinline__ static void reduce(const float* accum, const float (&w)[kNumChunks][2],
                                                  const float (&sf)[2], float (&sums)[2][kQueries]) {
        #pragma unroll
        for (uint32_t r = 0; r < 2; ++r) {
            #pragma unroll
            for (uint32_t q = 0; q < kQueries; ++q) {
                float s = 0.0f;
                #pragma unroll
                for (uint32_t c = q * kChunksPerQuery; c < (q + 1) * kChunksPerQuery; ++c) {
                    s = fmaf(fmaxf(accum[4 * c + 2 * r], 0.0f), w[c][0], s);
                    s = fmaf(fmaxf(accum[4 * c + 2 * r + 1], 0.0f), w[c][1], s);
                }
                s += __shfl_xor_sync(0xffffffff, s, 1);
                s += __shfl_xor_sync(0xffffffff, s, 2);
                sums[r][q] = s * sf[r];
            }
        }
    }

    // Every lane of the quad stores each (key row r, query q) through store(r, q, value) (the kernel's own range
    // checks and address): the quad's four stores of one value to one address merge into one, and no lane branches.
    template <typename Store>
    __device__ __forceinline__ static void store(const float (&sums)[2][kQueries], Store&& store_one) {
        #pragma unroll
        for (uint32_t r = 0; r < 2; ++r) {
            #pragma unroll
            for (uint32_t q = 0; q < kQueries; ++q)
                store_one(r, q, sums[r][q]);
        }
    }
};

// accum = the m64 x N tile of K-major kv rows (64 keys) against K-major q rows, both D bytes wide and swizzled as wide
// (descriptor low words kv_lo and q_lo), D / 32 WGMMAs waited for before returning.
template <typename MMA, uint32_t D>
__device__ __forceinline__ void mqa_tile_mma(uint32_t kv_lo, uint32_t q_lo, float* accum) {
    #pragma unroll
    for (uint32_t i = 0; i < MMA::kNumAccum; ++i)
        wgmma_fence_operand(accum[i]);
    wgmma_fence();
    #pragma unroll
    for (uint32_t k = 0; k < D / MMA::K; ++k)
        MMA::mma(kmajor_swizzled_desc<D>(kv_lo + k * MMA::kKBytes / 16),
                 kmajor_swizzled_desc<D>(q_lo + k * MMA::kKBytes / 16), accum, k > 0);
    wgmma_commit_group();
    wgmma_wait_group<0>();
    #pragma unroll
    for (uint32_t i = 0; i < MMA::kNumAccum; ++i)
        wgmma_fence_operand(accum[i]);
}

// A logits element: FP32, or BF16 (its bits) rounded to nearest.
template <bool kBF16>
using Logit = typename Conditional<kBF16, uint16_t, float>::Type;

template <bool kBF16>
__device__ __forceinline__ Logit<kBF16> to_logit(float value) {
    if constexpr (kBF16)
        return static_cast<uint16_t>(pack_bf16x2(value, 0.0f));
    else
        return value;
}

template <bool kBF16>
__device__ __forceinline__ void store_logit(void* logits, uint64_t offset, float value) {
    static_cast<Logit<kBF16>*>(logits)[offset] = to_logit<kBF16>(value);
}

}  // namespace deep_gemm::sm90
