#pragma once

#include <deep_gemm/common/tma.cuh>
#include <deep_gemm/common/utils.cuh>
#include <deep_gemm/sm90/pipeline.cuh>
#include <deep_gemm/sm90/wgmma_bf16.cuh>
#include <deep_gemm/sm90/wgmma_e4m3.cuh>
#include <deep_gemm/sm90/wgmma_tf32.cuh>

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
    return desc_start_address(smem_addr);
}

// The same low word for an MN-major tile (a transposed operand, 16-bit elements): 64-element (128-byte) wide column
// chunks of kBlockK rows of K each, one after another, every chunk 128B-swizzled by TMA. The leading byte offset
// (bits [16, 30)) is the distance between two chunks; the stride byte offset (the high word, as K-major) is the
// distance between 8-row groups of K, 1024 bytes. A K step of k rows moves the start address by k * 128 bytes.
template <uint32_t kChunkBytes>
__device__ __forceinline__ uint32_t mnmajor_sw128_desc_lo(uint32_t smem_addr) {
    DG_STATIC_ASSERT(kChunkBytes % 1024 == 0 and (kChunkBytes >> 4) < (1u << 14), "chunk stride out of range");
    return desc_start_address(smem_addr) | ((kChunkBytes >> 4) << 16);
}

// The 64-bit descriptor of a K-major tile of kRowBytes-byte rows written by TMA with the swizzle of that width (32,
// 64 or 128 bytes): 8-row groups of 8 x kRowBytes bytes, layout type 3, 2 or 1. A K step inside a row moves the start
// address (the low word) as for 128-byte rows.
template <uint32_t kRowBytes>
__device__ __forceinline__ uint64_t kmajor_swizzled_desc(uint32_t desc_lo) {
    DG_STATIC_ASSERT(kRowBytes == 32 or kRowBytes == 64 or kRowBytes == 128, "swizzled rows of 32, 64 or 128 bytes");
    constexpr uint32_t kStrideByteOffset = (8 * kRowBytes) >> 4;
    constexpr uint32_t kLayout = kRowBytes == 128 ? 1 : kRowBytes == 64 ? 2 : 3;
    constexpr uint32_t kHi = kStrideByteOffset | (kLayout << 30);
    uint64_t desc;
    asm("mov.b64 %0, {%1, %2};" : "=l"(desc) : "r"(desc_lo), "n"(kHi));
    return desc;
}

// The 64-bit descriptor of either 128-byte form (both have 1024-byte 8-row groups and the 128B swizzle mode).
__device__ __forceinline__ uint64_t kmajor_sw128_desc(uint32_t desc_lo) {
    return kmajor_swizzled_desc<128>(desc_lo);
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

// One m64 x BLOCK_N x k16 bf16 x bf16 -> FP32 WGMMA with both operands in shared memory, each K-major or MN-major
// (kMNMajorA / kMNMajorB; see mnmajor_sw128_desc_lo).
template <uint32_t BLOCK_N, bool kMNMajorA, bool kMNMajorB>
struct BF16WGMMA {
    DG_STATIC_ASSERT(BLOCK_N % 8 == 0 and BLOCK_N >= 8 and BLOCK_N <= 256,
                     "WGMMA N must be a multiple of 8 in [8, 256]");
    static constexpr uint32_t M = 64;
    static constexpr uint32_t K = 16;
    static constexpr uint32_t kElementBytes = 2;
    static constexpr uint32_t kNumAccum = M * BLOCK_N / 128;
    // Descriptor start-address step (16-byte units) per instruction: 32 bytes along a K-major row, 16 rows of 128
    // bytes down an MN-major chunk.
    static constexpr uint32_t kStepA = (kMNMajorA ? K * 128 : K * kElementBytes) / 16;
    static constexpr uint32_t kStepB = (kMNMajorB ? K * 128 : K * kElementBytes) / 16;

    template <uint32_t kBlockK>
    __device__ __forceinline__ static void mma_k_block(uint32_t a_lo, uint32_t b_lo, float* d,
                                                       bool accumulate = false) {
        #pragma unroll
        for (uint32_t k = 0; k < kBlockK / K; ++k)
            WGMMABF16<BLOCK_N, kMNMajorA, kMNMajorB>::mma(kmajor_sw128_desc(a_lo + k * kStepA),
                                                          kmajor_sw128_desc(b_lo + k * kStepB), d,
                                                          accumulate or k > 0);
    }
};

// ---- Operand element policies (the shell's `Operands`) ----
// What the shell needs of A's and B's element type and layout. A policy provides
//   kElementBytes  bytes per element;
//   kBlockK        elements of K per pipeline stage: 128 bytes of each row (K-major) or kBlockK rows of 128-byte
//                  column chunks (MN-major), which is what the descriptors and the TMA boxes describe;
//   kRowBytesB     bytes of one B row (of one stage's kBlockK elements): 128, or a multiple for a wider B element;
//   MMA<BLOCK_N>   its warpgroup MMA: M = 64 rows, K elements per instruction, kNumAccum FP32 accumulators per thread,
//                  and mma_k_block<kBlockK>(a_lo, b_lo, acc, accumulate) issuing one stage's instructions (the
//                  first one overwrites acc unless `accumulate`);
//   desc_lo_a/b(smem address)  the descriptor low word of a stage's A / B tile;
//   load_a/b<kShared, kRows>(map, barrier, smem, k, row, is_leader, hint)  the TMA load(s) of one stage's tile of
//                  kRows rows (multicast to the cluster pair by its leader when kShared).
// The part of a policy whose A (and B) stage tiles are K-major 128-byte swizzled rows loaded by one TMA box each.
struct KMajorSw128Loads {
    __device__ __forceinline__ static uint32_t desc_lo_a(uint32_t smem_addr) { return kmajor_sw128_desc_lo(smem_addr); }
    __device__ __forceinline__ static uint32_t desc_lo_b(uint32_t smem_addr) { return kmajor_sw128_desc_lo(smem_addr); }
    template <bool kShared, uint32_t kRows>
    __device__ __forceinline__ static void load_a(const TmaDescriptor* map, const Barrier* bar, void* smem,
                                                  int32_t k_idx, int32_t row, bool is_leader, uint64_t hint) {
        tma_load_operand<kShared>(map, bar, smem, k_idx, row, is_leader, hint);
    }
};

struct FP8E4M3Operands : KMajorSw128Loads {
    static constexpr uint32_t kElementBytes = 1;
    static constexpr uint32_t kBlockK = 128;
    static constexpr uint32_t kRowBytesB = 128;
    template <uint32_t BLOCK_N>
    using MMA = FP8WGMMA<BLOCK_N>;

    template <bool kShared, uint32_t kRows>
    __device__ __forceinline__ static void load_b(const TmaDescriptor* map, const Barrier* bar, void* smem,
                                                  int32_t k_idx, int32_t row, bool is_leader, uint64_t hint) {
        load_a<kShared, kRows>(map, bar, smem, k_idx, row, is_leader, hint);
    }
};

// BF16, each operand K-major (a [rows, K] matrix, TMA box 64 x rows) or MN-major (a [K, rows] matrix with unit
// stride along the rows: a transposed operand, TMA box 64 x 64, kRows / 64 boxes per stage).
template <bool kMNMajorA, bool kMNMajorB>
struct BF16Operands {
    static constexpr uint32_t kElementBytes = 2;
    static constexpr uint32_t kBlockK = 64;
    static constexpr uint32_t kRowBytesB = 128;
    static constexpr uint32_t kChunkBytes = kBlockK * 128;  // one MN-major column chunk: 64 rows x kBlockK
    template <uint32_t BLOCK_N>
    using MMA = BF16WGMMA<BLOCK_N, kMNMajorA, kMNMajorB>;

    template <bool kMNMajor>
    __device__ __forceinline__ static uint32_t desc_lo(uint32_t smem_addr) {
        if constexpr (kMNMajor)
            return mnmajor_sw128_desc_lo<kChunkBytes>(smem_addr);
        else
            return kmajor_sw128_desc_lo(smem_addr);
    }
    __device__ __forceinline__ static uint32_t desc_lo_a(uint32_t smem_addr) { return desc_lo<kMNMajorA>(smem_addr); }
    __device__ __forceinline__ static uint32_t desc_lo_b(uint32_t smem_addr) { return desc_lo<kMNMajorB>(smem_addr); }

    template <bool kMNMajor, bool kShared, uint32_t kRows>
    __device__ __forceinline__ static void load(const TmaDescriptor* map, const Barrier* bar, void* smem,
                                                int32_t k_idx, int32_t row, bool is_leader, uint64_t hint) {
        if constexpr (kMNMajor) {
            DG_STATIC_ASSERT(kRows % 64 == 0, "an MN-major tile is whole 64-wide column chunks");
            #pragma unroll
            for (uint32_t c = 0; c < kRows / 64; ++c)
                tma_load_operand<kShared>(map, bar, static_cast<uint8_t*>(smem) + c * kChunkBytes,
                                          row + static_cast<int32_t>(c * 64), k_idx, is_leader, hint);
        } else {
            tma_load_operand<kShared>(map, bar, smem, k_idx, row, is_leader, hint);
        }
    }
    template <bool kShared, uint32_t kRows>
    __device__ __forceinline__ static void load_a(const TmaDescriptor* map, const Barrier* bar, void* smem,
                                                  int32_t k_idx, int32_t row, bool is_leader, uint64_t hint) {
        load<kMNMajorA, kShared, kRows>(map, bar, smem, k_idx, row, is_leader, hint);
    }
    template <bool kShared, uint32_t kRows>
    __device__ __forceinline__ static void load_b(const TmaDescriptor* map, const Barrier* bar, void* smem,
                                                  int32_t k_idx, int32_t row, bool is_leader, uint64_t hint) {
        load<kMNMajorB, kShared, kRows>(map, bar, smem, k_idx, row, is_leader, hint);
    }
};

// One m64 x BLOCK_N x k8 TF32 WGMMA step with A from registers, and a stage's worth of them over a BF16 A tile in
// shared memory (K-major, 128B-swizzled, 64 elements per row) converted exactly to FP32 in registers on the way.
template <uint32_t BLOCK_N>
struct TF32RegAWGMMA {
    static constexpr uint32_t M = 64;
    static constexpr uint32_t K = 8;
    static constexpr uint32_t kElementBytes = 2;  // of A as it sits in shared memory (BF16)
    static constexpr uint32_t kNumAccum = M * BLOCK_N / 128;

    // This thread's A fragments of one 64 x kBlockK BF16 stage tile (rows warp_row + lane_row and + 8, columns
    // (lane % 4) and + 4 of every 8-wide K step), as FP32, and the sum of their squares per row into sqr[2].
    template <uint32_t kBlockK>
    __device__ __forceinline__ static void load_a(uint32_t tile_smem, uint32_t row, uint32_t lane,
                                                  float (&a)[kBlockK / K][4], float (&sqr)[2]) {
        DG_STATIC_ASSERT(kBlockK * 2 == 128, "one 128-byte swizzled row of BF16 per stage");
        const uint32_t upper = tile_smem + row * 128, lower = upper + 8 * 128;
        const uint32_t col = (lane % 4) * 2;
        #pragma unroll
        for (uint32_t j = 0; j < kBlockK / K; ++j) {
            const uint32_t chunk = ((j ^ (row % 8)) * 16) + col;  // the 128B swizzle moves 16-byte chunks
            a[j][0] = bf16_bits_to_float(ld_shared_u16(upper + chunk));
            a[j][1] = bf16_bits_to_float(ld_shared_u16(lower + chunk));
            a[j][2] = bf16_bits_to_float(ld_shared_u16(upper + chunk + 8));
            a[j][3] = bf16_bits_to_float(ld_shared_u16(lower + chunk + 8));
            sqr[0] = fmaf(a[j][0], a[j][0], fmaf(a[j][2], a[j][2], sqr[0]));
            sqr[1] = fmaf(a[j][1], a[j][1], fmaf(a[j][3], a[j][3], sqr[1]));
        }
    }

    // d (+)= A B^T over one stage: B's rows are kBlockK FP32 = kBlockK / 32 128B-swizzled chunks of 32 elements,
    // chunk c at b_lo + c * BLOCK_N * 128 bytes.
    template <uint32_t kBlockK>
    __device__ __forceinline__ static void mma_k_block(const float (&a)[kBlockK / K][4], uint32_t b_lo, float* d,
                                                       bool accumulate) {
        #pragma unroll
        for (uint32_t j = 0; j < kBlockK / K; ++j) {
            const uint32_t offset = (j / 4) * BLOCK_N * 128 + (j % 4) * K * 4;
            WGMMATF32RegA<BLOCK_N>::mma(a[j], kmajor_sw128_desc(b_lo + offset / 16), d, accumulate or j > 0);
        }
    }
};

// BF16 A, FP32 B, multiplied on the TF32 tensor cores (the hyper-connection pre-norm GEMM): A is loaded as BF16
// (64 elements = one 128-byte swizzled row per stage) and converted to FP32 in registers, exactly; B's 64 FP32 per
// row and stage are two TMA boxes of 32 (128 bytes each), one after the other. The MMA reads A from registers (its
// kernel's own K loop, not the shell's issue_mma).
struct TF32RegAOperands : KMajorSw128Loads {
    static constexpr uint32_t kElementBytes = 2;
    static constexpr uint32_t kBlockK = 64;
    static constexpr uint32_t kRowBytesB = kBlockK * 4;
    template <uint32_t BLOCK_N>
    using MMA = TF32RegAWGMMA<BLOCK_N>;

    template <bool kShared, uint32_t kRows>
    __device__ __forceinline__ static void load_b(const TmaDescriptor* map, const Barrier* bar, void* smem,
                                                  int32_t k_idx, int32_t row, bool is_leader, uint64_t hint) {
        #pragma unroll
        for (uint32_t c = 0; c < kRowBytesB / 128; ++c)
            tma_load_operand<kShared>(map, bar, static_cast<uint8_t*>(smem) + c * kRows * 128,
                                      k_idx + static_cast<int32_t>(c * 32), row, is_leader, hint);
    }
};

// The requirements above, checked for one tile width (instantiated by the shell).
template <typename Operands, uint32_t BLOCK_N>
struct CheckOperands {
    using MMA = typename Operands::template MMA<BLOCK_N>;
    DG_STATIC_ASSERT(Operands::kBlockK * Operands::kElementBytes == 128,
                     "an operand K block must be one 128-byte swizzle row (kmajor_sw128_desc, the 128B TMA boxes)");
    DG_STATIC_ASSERT(Operands::kRowBytesB % 128 == 0, "B's stage rows are whole 128-byte swizzle rows");
    DG_STATIC_ASSERT(MMA::kElementBytes == Operands::kElementBytes, "the MMA must read the operands' element type");
    DG_STATIC_ASSERT(MMA::M == 64, "a warpgroup MMA covers 64 rows (the math warpgroups' row split assumes it)");
    DG_STATIC_ASSERT(Operands::kBlockK % MMA::K == 0, "a K block must be whole MMA instructions");
    DG_STATIC_ASSERT(MMA::kNumAccum == MMA::M * BLOCK_N / 128, "an m64 x BLOCK_N FP32 accumulator per warpgroup");
    static constexpr bool kOk = true;
};

}  // namespace deep_gemm::sm90
