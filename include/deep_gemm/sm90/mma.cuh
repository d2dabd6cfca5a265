#pragma once

// NOTES: unlocks CuTe's WGMMA atoms for N not a power of two (24, 112, 144, ...), which fill the last wave.
#ifndef CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED
#define CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED
#endif
#include <cute/arch/mma_sm90.hpp>
#include <cute/arch/mma_sm90_desc.hpp>
#include <cute/util/type_traits.hpp>

#include <deep_gemm/common/utils.cuh>

namespace deep_gemm::sm90 {

// Shared-memory matrix descriptor for a K-major FP8 tile whose rows are exactly 128 bytes and which was written
// by TMA with 128-byte swizzling (one swizzle atom = 8 rows x 128 B = 1024 B).
// NOTES: bits [0, 14) start address >> 4; [16, 30) leading byte offset >> 4 (unused for swizzled K-major);
// [32, 46) stride byte offset >> 4 = distance between 8-row groups; [62, 64) layout 1 = 128-byte swizzle.
// Moving to the next 32-wide K slice adds 32 B to the start address; the base offset stays 0 because every tile
// starts 1024-byte aligned.
__device__ __forceinline__ uint64_t make_kmajor_sw128_desc(const void* smem_ptr) {
    const uint64_t start = (smem_u32(smem_ptr) >> 4) & 0x3fff;
    constexpr uint64_t kStrideByteOffset = 1024 >> 4;
    constexpr uint64_t kLayoutSwizzle128B = 1;
    return start | (kStrideByteOffset << 32) | (kLayoutSwizzle128B << 62);
}

// One m64 x BLOCK_N x k32 e4m3 x e4m3 -> FP32 WGMMA with both operands in shared memory.
template <uint32_t BLOCK_N>
struct FP8WGMMA {
    static constexpr uint32_t M = 64;
    static constexpr uint32_t K = 32;
    static constexpr uint32_t kNumAccum = M * BLOCK_N / 128;  // FP32 accumulators per thread
    using Op = decltype(cute::SM90::GMMA::ss_op_selector<cute::float_e4m3_t, cute::float_e4m3_t, float,
                                                          cute::Shape<cute::Int<M>, cute::Int<BLOCK_N>, cute::Int<K>>,
                                                          cute::SM90::GMMA::Major::K, cute::SM90::GMMA::Major::K>());
    DG_STATIC_ASSERT(sizeof(typename Op::CRegisters) == kNumAccum * sizeof(float),
                     "CuTe picked a WGMMA atom narrower than BLOCK_N (extended shapes disabled?)");

    template <size_t... I>
    __device__ __forceinline__ static void call(uint64_t desc_a, uint64_t desc_b, float* d, bool accumulate,
                                                cute::index_sequence<I...>) {
        Op::fma(desc_a, desc_b, d[I]..., accumulate ? cute::SM90::GMMA::ScaleOut::One
                                                    : cute::SM90::GMMA::ScaleOut::Zero);
    }

    // d[kNumAccum] (+)= A[64 x 32] * B[BLOCK_N x 32]^T
    __device__ __forceinline__ static void mma(uint64_t desc_a, uint64_t desc_b, float* d, bool accumulate) {
        call(desc_a, desc_b, d, accumulate, cute::make_index_sequence<kNumAccum>{});
    }
};

}  // namespace deep_gemm::sm90
