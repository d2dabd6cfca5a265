#pragma once

#include <deep_gemm/common/utils.cuh>
#include <deep_gemm/sm90/wgmma_e4m3.cuh>

namespace deep_gemm::sm90 {

// Shared-memory matrix descriptor for a K-major FP8 tile whose rows are exactly 128 bytes and which was written
// by TMA with 128-byte swizzling (one swizzle atom = 8 rows x 128 B = 1024 B).
// NOTES: bits [0, 14) start address >> 4; [16, 30) leading byte offset >> 4 (unused for swizzled K-major);
// [32, 46) stride byte offset >> 4 = distance between 8-row groups; [62, 64) layout 1 = 128-byte swizzle.
// Only the low word differs between tiles: moving to the next 32-wide K slice adds 32 B to the start address, and
// the base offset stays 0 because every tile starts 1024-byte aligned. So callers keep the low word of their
// tile's first stage (kmajor_sw128_desc_lo of a warp-uniform 32-bit shared address) and add compile-time or
// uniform offsets per WGMMA. Rebuilding the descriptor from a pointer per WGMMA cost ~55 vector-ALU instructions
// and 16 R2UR per K block on the math warps' critical path (64-bit arithmetic under NVRTC).
__device__ __forceinline__ uint32_t kmajor_sw128_desc_lo(uint32_t smem_addr) {
    // Shared addresses stay below 2^18 (228 KiB), so the start address fits its 14 bits without a mask.
    return smem_addr >> 4;
}

__device__ __forceinline__ uint64_t kmajor_sw128_desc(uint32_t desc_lo) {
    constexpr uint32_t kStrideByteOffset = 1024 >> 4;
    constexpr uint32_t kLayoutSwizzle128B = 1;
    constexpr uint32_t kHi = kStrideByteOffset | (kLayoutSwizzle128B << 30);
    uint64_t desc;
    asm("mov.b64 %0, {%1, %2};" : "=l"(desc) : "r"(desc_lo), "n"(kHi));
    return desc;
}

// WGMMA ordering. A batch of WGMMAs is: fence the accumulators, `wgmma_fence`, issue, `wgmma_commit_group`; its
// accumulators may be read once a `wgmma_wait_group<N>` returns with at most N newer batches still in flight.
// NOTES: fence, commit and wait clobber "memory" so the compiler keeps shared-memory accesses on the right side of
// them (the WGMMA itself does not, as in CuTe).

// Registers (accumulators) written before this may be read by the WGMMAs issued after it.
__device__ __forceinline__ void wgmma_fence() {
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}

__device__ __forceinline__ void wgmma_commit_group() {
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}

template <uint32_t kNumInFlight>
__device__ __forceinline__ void wgmma_wait_group() {
    DG_STATIC_ASSERT(kNumInFlight <= 7, "wgmma.wait_group takes 0..7");
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" :: "n"(kNumInFlight) : "memory");
}

// An empty asm that reads and writes `reg`: the compiler may not move accesses to an accumulator across it, so
// nothing touches accumulators between issuing an asynchronous WGMMA and waiting for it.
__device__ __forceinline__ void wgmma_fence_operand(float& reg) {
    asm volatile("" : "+f"(reg) :: "memory");
}

// One m64 x BLOCK_N x k32 e4m3 x e4m3 -> FP32 WGMMA with both operands in shared memory.
template <uint32_t BLOCK_N>
struct FP8WGMMA {
    DG_STATIC_ASSERT(BLOCK_N % 8 == 0 and BLOCK_N >= 8 and BLOCK_N <= 256,
                     "WGMMA N must be a multiple of 8 in [8, 256]");
    static constexpr uint32_t M = 64;
    static constexpr uint32_t K = 32;                         // elements of K per instruction
    static constexpr uint32_t kElementBytes = 1;
    static constexpr uint32_t kKBytes = K * kElementBytes;     // bytes of K per instruction (descriptor step)
    static constexpr uint32_t kNumAccum = M * BLOCK_N / 128;  // FP32 accumulators per thread

    // d[kNumAccum] (+)= A[64 x 32] * B[BLOCK_N x 32]^T
    __device__ __forceinline__ static void mma(uint64_t desc_a, uint64_t desc_b, float* d, bool accumulate) {
        WGMMAE4M3<BLOCK_N>::mma(desc_a, desc_b, d, accumulate);
    }

    // d = A[64 x 128] * B[BLOCK_N x 128]^T over one 128-wide K block (d += ... with `accumulate`): kBlockK / K
    // WGMMAs on the tiles whose descriptor low words are a_lo and b_lo (see kmajor_sw128_desc_lo). Issues only;
    // fencing is the caller's.
    template <uint32_t kBlockK>
    __device__ __forceinline__ static void mma_k_block(uint32_t a_lo, uint32_t b_lo, float* d,
                                                       bool accumulate = false) {
        #pragma unroll
        for (uint32_t k = 0; k < kBlockK / K; ++k)
            mma(kmajor_sw128_desc(a_lo + k * kKBytes / 16), kmajor_sw128_desc(b_lo + k * kKBytes / 16), d,
                accumulate or k > 0);
    }
};

// ---- Operand element policies (the shell's `Operands`) ----
// What the shell needs of A's and B's element type. A policy provides
//   kElementBytes  bytes per element;
//   kBlockK        elements of K per pipeline stage: one 128-byte row of a K-major, 128B-swizzled tile, which is what
//                  the descriptors (kmajor_sw128_desc) and the TMA boxes describe;
//   MMA<BLOCK_N>   its warpgroup MMA: M = 64 rows, K elements per instruction, kNumAccum FP32 accumulators per thread,
//                  and mma_k_block<kBlockK>(a_lo, b_lo, acc, accumulate) issuing one stage's instructions (the
//                  first one overwrites acc unless `accumulate`).
// FP8 e4m3 today. NOTES: a BF16 policy is 2-byte elements, kBlockK = 64 and wgmma .bf16 m64nNk16 (the same
// descriptors: a K block is still one 128-byte row).
struct FP8E4M3Operands {
    static constexpr uint32_t kElementBytes = 1;
    static constexpr uint32_t kBlockK = 128;
    template <uint32_t BLOCK_N>
    using MMA = FP8WGMMA<BLOCK_N>;
};

// The requirements above, checked for one tile width (instantiated by the shell).
template <typename Operands, uint32_t BLOCK_N>
struct CheckOperands {
    using MMA = typename Operands::template MMA<BLOCK_N>;
    DG_STATIC_ASSERT(Operands::kBlockK * Operands::kElementBytes == 128,
                     "an operand K block must be one 128-byte swizzle row (kmajor_sw128_desc, the 128B TMA boxes)");
    DG_STATIC_ASSERT(MMA::kElementBytes == Operands::kElementBytes, "the MMA must read the operands' element type");
    DG_STATIC_ASSERT(MMA::M == 64, "a warpgroup MMA covers 64 rows (the math warpgroups' row split assumes it)");
    DG_STATIC_ASSERT(Operands::kBlockK % MMA::K == 0, "a K block must be whole MMA instructions");
    DG_STATIC_ASSERT(MMA::kNumAccum == MMA::M * BLOCK_N / 128, "an m64 x BLOCK_N FP32 accumulator per warpgroup");
    static constexpr bool kOk = true;
};

}  // namespace deep_gemm::sm90
