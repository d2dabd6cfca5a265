#pragma once

// Blackwell (sm_100a) tensor-core machinery as the sm100 kernels use it: tensor memory (TMEM) allocation, the
// shared-memory and instruction descriptors of tcgen05.mma, the FP8 MMAs (plain kind::f8f6f4 and block-scaled
// kind::mxf8f6f4 with UE8M0 scale factors), tcgen05.commit to mbarriers, tcgen05.ld of accumulators and tcgen05.cp
// of scale factors. PTX ISA 8.7+ (CUDA 12.8+), "Tensor Core 5th Generation Family Instructions".
//
// Tensor memory: 128 lanes x 512 columns of 32-bit cells per SM. An address is (lane << 16) | column. An M = 128
// accumulator (cta_group::1, or each CTA's half of an M = 256 cta_group::2 one) puts row i of D in lane i and
// column j in column base + j. A warp may only tcgen05.ld lanes [32 (warp % 4), 32 (warp % 4) + 32).

#include <deep_gemm/common/utils.cuh>

namespace deep_gemm::sm100 {

// ---------------- Tensor memory allocation (one whole warp; cta_group::2: one warp in each CTA of the pair) ----------

template <uint32_t kCtaGroup>
__device__ __forceinline__ void tmem_alloc(uint32_t* smem_dst, uint32_t num_cols) {
    if constexpr (kCtaGroup == 1)
        asm volatile("tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%0], %1;"
                     :: "r"(smem_u32(smem_dst)), "r"(num_cols) : "memory");
    else
        asm volatile("tcgen05.alloc.cta_group::2.sync.aligned.shared::cta.b32 [%0], %1;"
                     :: "r"(smem_u32(smem_dst)), "r"(num_cols) : "memory");
}

// NOTES: a CTA that will not allocate again gives up its permit at once, so that a CTA of another kernel resident
// on the SM (programmatic launch, MPS) is not blocked waiting for tensor memory.
template <uint32_t kCtaGroup>
__device__ __forceinline__ void tmem_relinquish_alloc_permit() {
    if constexpr (kCtaGroup == 1)
        asm volatile("tcgen05.relinquish_alloc_permit.cta_group::1.sync.aligned;" ::: "memory");
    else
        asm volatile("tcgen05.relinquish_alloc_permit.cta_group::2.sync.aligned;" ::: "memory");
}

template <uint32_t kCtaGroup>
__device__ __forceinline__ void tmem_dealloc(uint32_t tmem_addr, uint32_t num_cols) {
    if constexpr (kCtaGroup == 1)
        asm volatile("tcgen05.dealloc.cta_group::1.sync.aligned.b32 %0, %1;" :: "r"(tmem_addr), "r"(num_cols)
                     : "memory");
    else
        asm volatile("tcgen05.dealloc.cta_group::2.sync.aligned.b32 %0, %1;" :: "r"(tmem_addr), "r"(num_cols)
                     : "memory");
}

// Columns to allocate for `used` columns: a power of two in [32, 512] (what tcgen05.alloc accepts).
__host__ __device__ constexpr uint32_t tmem_alloc_cols(uint32_t used) {
    return used <= 32 ? 32 : used <= 64 ? 64 : used <= 128 ? 128 : used <= 256 ? 256 : used <= 512 ? 512 : 0;
}

// ---------------- Ordering between thread synchronisation and tcgen05 operations ----------------
// A tcgen05 operation before a barrier/mbarrier that another thread waits on: `before_thread_sync` in between.
// A tcgen05 operation after such a wait: `after_thread_sync` in between.

__device__ __forceinline__ void tcgen05_before_thread_sync() {
    asm volatile("tcgen05.fence::before_thread_sync;" ::: "memory");
}

__device__ __forceinline__ void tcgen05_after_thread_sync() {
    asm volatile("tcgen05.fence::after_thread_sync;" ::: "memory");
}

// ---------------- Descriptors ----------------

// Shared-memory matrix descriptor (sm100 format) of a K-major FP8 tile whose rows are exactly 128 bytes (one 128-wide
// K block) and which TMA wrote with 128-byte swizzling; the tile starts 1024-byte aligned.
// NOTES: bits [0, 14) start address >> 4; [16, 30) leading byte offset >> 4 (unused for a swizzled K-major tile whose
// K extent is one swizzle atom: 0); [32, 46) stride byte offset >> 4 = 1024 B between 8-row groups; [46, 48) version
// = 1 (sm100 descriptors; sm90's have none); [49, 52) base offset 0 (1024-byte aligned tiles); bit 52 LBO mode 0;
// [61, 64) layout: 2 = 128-byte swizzle (sm90 encodes the same swizzle as 1 in bits [62, 64): the encodings differ).
// Moving to the next 32-wide K slice adds 32 B to the start address, as on sm90.
__device__ __forceinline__ uint32_t kmajor_sw128_desc_lo(uint32_t smem_addr) {
    return desc_start_address(smem_addr);
}

__device__ __forceinline__ uint64_t kmajor_sw128_desc(uint32_t desc_lo) {
    constexpr uint32_t kStrideByteOffset = 1024 >> 4;
    constexpr uint32_t kVersion = 1;
    constexpr uint32_t kLayoutSwizzle128B = 2;
    constexpr uint32_t kHi = kStrideByteOffset | (kVersion << (46 - 32)) | (kLayoutSwizzle128B << (61 - 32));
    uint64_t desc;
    asm("mov.b64 %0, {%1, %2};" : "=l"(desc) : "r"(desc_lo), "n"(kHi));
    return desc;
}

// Descriptor of a tcgen05.cp source: 32 rows x 16 bytes, no swizzle, rows contiguous (8-row core matrices 128 B
// apart: stride byte offset 128; one core matrix along the 16 bytes: leading byte offset unused, 0).
__device__ __forceinline__ uint64_t scale_copy_desc(uint32_t smem_addr) {
    constexpr uint32_t kStrideByteOffset = 128 >> 4;
    constexpr uint32_t kVersion = 1;
    constexpr uint32_t kHi = kStrideByteOffset | (kVersion << (46 - 32));  // layout 0: no swizzle
    uint64_t desc;
    asm("mov.b64 %0, {%1, %2};" : "=l"(desc) : "r"(desc_start_address(smem_addr)), "n"(kHi));
    return desc;
}

// Instruction descriptor of kind::f8f6f4: D F32, A and B E4M3, both K-major, no negation, dense, M x N.
// NOTES: [4, 6) D format (1 = F32); [7, 10) A format and [10, 13) B format (0 = E4M3); bit 15 / 16 A / B major
// (0 = K); [17, 23) N >> 3; [24, 29) M >> 4.
template <uint32_t M, uint32_t N>
__host__ __device__ constexpr uint32_t f8f6f4_instr_desc() {
    return (1u << 4) | ((N >> 3) << 17) | ((M >> 4) << 24);
}

// Instruction descriptor of kind::mxf8f6f4.block_scale: A and B E4M3, K-major, UE8M0 scale factors, M x N; the
// scale factor IDs (which byte of each 32-bit TMEM scale cell this MMA uses) are added per MMA (`with_sf_ids`).
// NOTES: [4, 6) B scale factor ID; [7, 10) / [10, 13) A / B format (0 = E4M3); [17, 23) N >> 3; bit 23 scale format
// (1 = UE8M0); [24, 29) M >> 4; [29, 31) A scale factor ID; bit 31 K size (0: K = 32). No D format field: D is F32.
template <uint32_t M, uint32_t N>
__host__ __device__ constexpr uint32_t mxf8f6f4_instr_desc() {
    return ((N >> 3) << 17) | (1u << 23) | ((M >> 4) << 24);
}

__device__ __forceinline__ uint32_t with_sf_ids(uint32_t idesc, uint32_t sfa_id, uint32_t sfb_id) {
    return idesc | (sfb_id << 4) | (sfa_id << 29);
}

// ---------------- MMA (issued by one thread) ----------------
// D[tmem] (+)= A[smem] * B[smem]^T, one K = 32 slice of E4M3 operands. `accumulate` = 0 overwrites D.
// cta_group::2 (issued by the even CTA of the pair): M = 256, A's rows 0-127 from this CTA and 128-255 from the peer
// (same shared-memory offsets), B's N rows split in halves the same way, D's rows 0-127 / 128-255 in each CTA's TMEM.

template <uint32_t kCtaGroup>
__device__ __forceinline__ void mma_f8f6f4(uint32_t tmem_d, uint64_t desc_a, uint64_t desc_b, uint32_t idesc,
                                           uint32_t accumulate) {
    if constexpr (kCtaGroup == 1)
        asm volatile("{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %4, 0;\n\t"
                     "tcgen05.mma.cta_group::1.kind::f8f6f4 [%0], %1, %2, %3, p;\n\t}"
                     :: "r"(tmem_d), "l"(desc_a), "l"(desc_b), "r"(idesc), "r"(accumulate));
    else
        asm volatile("{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %4, 0;\n\t"
                     "tcgen05.mma.cta_group::2.kind::f8f6f4 [%0], %1, %2, %3, p;\n\t}"
                     :: "r"(tmem_d), "l"(desc_a), "l"(desc_b), "r"(idesc), "r"(accumulate));
}

// The block-scaled MMA: A's and B's rows are multiplied by 2^(e - 127) of their UE8M0 scale factors in TMEM
// (scale_vec::1X: one factor per row per K = 32 slice), which the hardware applies inside the product.
__device__ __forceinline__ void mma_mxf8f6f4(uint32_t tmem_d, uint64_t desc_a, uint64_t desc_b, uint32_t idesc,
                                             uint32_t tmem_sfa, uint32_t tmem_sfb, uint32_t accumulate) {
    asm volatile("{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %4, 0;\n\t"
                 "tcgen05.mma.cta_group::1.kind::mxf8f6f4.block_scale.scale_vec::1X [%0], %1, %2, %3, [%5], [%6], p;"
                 "\n\t}"
                 :: "r"(tmem_d), "l"(desc_a), "l"(desc_b), "r"(idesc), "r"(accumulate), "r"(tmem_sfa),
                    "r"(tmem_sfb));
}

// ---------------- Completion: tcgen05.commit ----------------
// The mbarrier gets one arrival once every tcgen05 operation this thread issued before has completed (it also acts
// as tcgen05.fence::before_thread_sync). `cta_mask`: the barrier at the same shared-memory offset in each cluster
// CTA whose bit is set.

template <uint32_t kCtaGroup>
__device__ __forceinline__ void mma_commit(const void* bar) {
    if constexpr (kCtaGroup == 1)
        asm volatile("tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64 [%0];"
                     :: "r"(smem_u32(bar)) : "memory");
    else
        asm volatile("tcgen05.commit.cta_group::2.mbarrier::arrive::one.shared::cluster.b64 [%0];"
                     :: "r"(smem_u32(bar)) : "memory");
}

template <uint32_t kCtaGroup>
__device__ __forceinline__ void mma_commit_multicast(const void* bar, uint16_t cta_mask) {
    if constexpr (kCtaGroup == 1)
        asm volatile("tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.multicast::cluster.b64"
                     " [%0], %1;" :: "r"(smem_u32(bar)), "h"(cta_mask) : "memory");
    else
        asm volatile("tcgen05.commit.cta_group::2.mbarrier::arrive::one.shared::cluster.multicast::cluster.b64"
                     " [%0], %1;" :: "r"(smem_u32(bar)), "h"(cta_mask) : "memory");
}

// ---------------- Tensor memory -> registers ----------------

// 8 consecutive 32-bit columns of this thread's lane (shape 32x32b: thread t of the warp reads lane base + t).
// Asynchronous: the registers are valid after `tmem_load_wait`.
__device__ __forceinline__ void tmem_load_8(uint32_t tmem_addr, uint32_t (&r)[8]) {
    asm volatile("tcgen05.ld.sync.aligned.32x32b.x8.b32 {%0, %1, %2, %3, %4, %5, %6, %7}, [%8];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]), "=r"(r[4]), "=r"(r[5]), "=r"(r[6]), "=r"(r[7])
                 : "r"(tmem_addr));
}

__device__ __forceinline__ void tmem_load_wait() {
    asm volatile("tcgen05.wait::ld.sync.aligned;" ::: "memory");
}

// ---------------- Scale factors: shared memory -> tensor memory ----------------

// Copy 32 rows x 128 bits from shared memory (`scale_copy_desc`) into 4 columns of each of the 4 lane quarters
// (row r to lane 32 q + r of every quarter q). Asynchronous, ordered with the MMAs this thread issues after it.
__device__ __forceinline__ void tmem_copy_scales(uint32_t tmem_addr, uint64_t smem_desc) {
    asm volatile("tcgen05.cp.cta_group::1.32x128b.warpx4 [%0], %1;" :: "r"(tmem_addr), "l"(smem_desc) : "memory");
}

}  // namespace deep_gemm::sm100
