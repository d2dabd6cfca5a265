#pragma once

#include <deep_gemm/common/tma.cuh>
#include <deep_gemm/common/utils.cuh>

namespace deep_gemm::sm90 {

// Byte offset of byte `col_bytes` of row `row` in a shared-memory tile made of column atoms, each [rows][kRowBytes]
// and kAtomBytes long, whose 16-byte chunks are XOR-swizzled as TMA's kSwizzleBytes mode expects (0 = none).
template <uint32_t kRowBytes, uint32_t kSwizzleBytes, uint32_t kAtomBytes>
__device__ __forceinline__ uint32_t swizzled_offset(uint32_t row, uint32_t col_bytes) {
    const uint32_t atom = col_bytes / kRowBytes;
    uint32_t offset = row * kRowBytes + col_bytes % kRowBytes;
    if constexpr (kSwizzleBytes > 0)
        offset ^= ((offset >> 7) & (kSwizzleBytes / 16 - 1)) << 4;
    return atom * kAtomBytes + offset;
}

// Epilogue policies (the shell's `Epilogue`). A policy provides smem_d_bytes<kNumMathWGs>() (its shared-memory D
// region, a multiple of 1024 bytes: the stages after it keep the 128B swizzle's alignment) and the kernel's writes
// into it (write_warp: one warp's 16 rows of a 64-row WGMMA accumulator) and out of it (TMA stores / reductions).
// NOTES: a requantising FP8-output epilogue is one more policy here (1-byte D, its scale written beside it).

// BF16 epilogue: FP32 accumulators -> BF16 -> stmatrix into a swizzled shared-memory D tile -> TMA store.
//
// Shared-memory D tile for kSwizzleBytes = S > 0: BLOCK_N * 2 / S column "atoms", each [BLOCK_M rows][S bytes],
// with the 16-byte chunks of every row XOR-swizzled exactly as TMA's S-byte swizzle mode expects; one TMA store
// per atom (box S / 2 x BLOCK_M). For S = 0 the tile is plain row-major [BLOCK_M][BLOCK_N] (one store).
// Accumulator layout (WGMMA m64nN, per warp 16 rows): chunk c of 8 columns holds acc[4c + 0, 1] = row lane / 4,
// columns 8c + 2 (lane % 4) + {0, 1}, and acc[4c + 2, 3] = the same columns of row lane / 4 + 8.
template <uint32_t BLOCK_M, uint32_t BLOCK_N, uint32_t kSwizzleBytes>
struct BF16Epilogue {
    DG_STATIC_ASSERT(BLOCK_N % 8 == 0, "BLOCK_N must be a multiple of 8");
    DG_STATIC_ASSERT(kSwizzleBytes == 0 or (BLOCK_N * 2) % kSwizzleBytes == 0,
                     "the D swizzle width must divide one BF16 row of the tile");
    DG_STATIC_ASSERT(kSwizzleBytes == 0 or kSwizzleBytes == 32 or kSwizzleBytes == 64 or kSwizzleBytes == 128,
                     "D swizzle must be 0, 32, 64 or 128 bytes");
    static constexpr uint32_t kRowBytes = kSwizzleBytes == 0 ? BLOCK_N * 2 : kSwizzleBytes;
    static constexpr uint32_t kNumAtoms = BLOCK_N * 2 / kRowBytes;
    static constexpr uint32_t kAtomBytes = BLOCK_M * kRowBytes;
    static constexpr uint32_t kSmemBytes = BLOCK_M * BLOCK_N * 2;

    // The shell's D region (KernelShell): the whole tile, written by every math warpgroup (each its own rows).
    template <uint32_t kNumMathWGs>
    static constexpr uint32_t smem_d_bytes() {
        return align_up<uint32_t>(kSmemBytes, 1024);
    }

    // Byte offset of the 16-byte chunk `chunk` (8 columns) of tile row `row`.
    __device__ __forceinline__ static uint32_t chunk_offset(uint32_t row, uint32_t chunk) {
        return swizzled_offset<kRowBytes, kSwizzleBytes, kAtomBytes>(row, chunk * 16);
    }

    // Write one warp's 16 x BLOCK_N slice of a 64-row WGMMA accumulator; `row0` = the warp's first tile row.
    __device__ __forceinline__ static void write_warp(uint8_t* smem_d, const float* acc, uint32_t row0,
                                                      uint32_t lane) {
        constexpr uint32_t kNumChunks = BLOCK_N / 8;
        const uint32_t row = row0 + lane % 16;
        #pragma unroll
        for (uint32_t c = 0; c + 1 < kNumChunks; c += 2) {
            // Lanes 0-15 address chunk c, lanes 16-31 chunk c + 1.
            stmatrix_x4(smem_d + chunk_offset(row, c + lane / 16),
                        pack_bf16x2(acc[c * 4 + 0], acc[c * 4 + 1]), pack_bf16x2(acc[c * 4 + 2], acc[c * 4 + 3]),
                        pack_bf16x2(acc[c * 4 + 4], acc[c * 4 + 5]), pack_bf16x2(acc[c * 4 + 6], acc[c * 4 + 7]));
        }
        if constexpr (kNumChunks % 2 == 1) {
            constexpr uint32_t c = kNumChunks - 1;
            stmatrix_x2(smem_d + chunk_offset(row, c), pack_bf16x2(acc[c * 4 + 0], acc[c * 4 + 1]),
                        pack_bf16x2(acc[c * 4 + 2], acc[c * 4 + 3]));
        }
    }

    // Issue the TMA stores of the 64 tile rows starting at `row0` (one thread; the caller fenced and
    // synchronised the writers, and commits the bulk group). The D tensor map's box is S / 2 x 64.
    __device__ __forceinline__ static void store_rows(const TmaDescriptor* tensor_map_d, const uint8_t* smem_d,
                                                      uint32_t row0, uint32_t m_start, uint32_t n_start) {
        #pragma unroll
        for (uint32_t atom = 0; atom < kNumAtoms; ++atom) {
            tma_store_2d(tensor_map_d, smem_d + atom * kAtomBytes + row0 * kRowBytes,
                         static_cast<int32_t>(n_start + atom * kRowBytes / 2), static_cast<int32_t>(m_start + row0));
        }
    }

    // The same 64 rows, copied by the 128 threads of a warpgroup with plain 16-byte stores, skipping tile rows
    // >= `valid_rows` and columns >= `shape_n` (a multiple of 8). `d` is D's base, `row_stride` in elements,
    // `m_start` the D row of tile row 0. The caller synchronised the writers (a generic-proxy read needs no fence).
    // Store one warp's 16-row slice of a 64-row accumulator (layout as in write_warp; `row0` = the slice's first tile
    // row) straight to global memory, rows < valid_rows and columns < shape_n only, 4 bytes per store: for tiles
    // with a few valid rows, which then skip the shared-memory round trip and its barriers.
    __device__ __forceinline__ static void store_rows_direct(const float* acc, uint32_t row0, uint32_t lane,
                                                             uint32_t valid_rows, uint8_t* d, uint32_t row_stride,
                                                             uint32_t m_start, uint32_t n_start, uint32_t shape_n) {
        #pragma unroll
        for (uint32_t h = 0; h < 2; ++h) {
            const uint32_t row = row0 + lane / 4 + h * 8;
            if (row >= valid_rows)
                continue;
            auto* dst = reinterpret_cast<uint32_t*>(d + static_cast<uint64_t>(m_start + row) * row_stride * 2);
            #pragma unroll
            for (uint32_t c = 0; c < BLOCK_N / 8; ++c) {
                const uint32_t col = n_start + c * 8 + (lane % 4) * 2;  // even; shape_n % 8 == 0
                if (col < shape_n)
                    dst[col / 2] = pack_bf16x2(acc[c * 4 + h * 2], acc[c * 4 + h * 2 + 1]);
            }
        }
    }

    __device__ __forceinline__ static void copy_rows(const uint8_t* smem_d, uint32_t row0, uint32_t valid_rows,
                                                     uint8_t* d, uint32_t row_stride, uint32_t m_start,
                                                     uint32_t n_start, uint32_t shape_n, uint32_t thread) {
        constexpr uint32_t kNumChunks = BLOCK_N / 8;
        #pragma unroll 1
        for (uint32_t i = thread; i < 64 * kNumChunks; i += 128) {
            const uint32_t row = row0 + i / kNumChunks;
            const uint32_t chunk = i % kNumChunks;
            const uint32_t col = n_start + chunk * 8;
            if (row < valid_rows and col < shape_n) {
                const uint64_t offset = (static_cast<uint64_t>(m_start + row) * row_stride + col) * 2;
                copy_16b_shared_to_global(d + offset, smem_d + chunk_offset(row, chunk));
            }
        }
    }
};

// One warp's 16 x BLOCK_N slice of a 64-row FP32 accumulator into a shared-memory tile of kSwizzleBytes-wide column
// atoms ([64 rows][S bytes] each, S / 4 floats, 16-byte chunks swizzled as TMA's S-byte mode expects); accumulator
// layout as in BF16Epilogue.
template <uint32_t BLOCK_N, uint32_t kSwizzleBytes>
struct FP32WarpTile {
    DG_STATIC_ASSERT(kSwizzleBytes == 32 or kSwizzleBytes == 64 or kSwizzleBytes == 128,
                     "FP32 D swizzle must be 32, 64 or 128 bytes");
    DG_STATIC_ASSERT((BLOCK_N * 4) % kSwizzleBytes == 0, "the D swizzle width must divide one FP32 row of the tile");
    static constexpr uint32_t kAtomBytes = 64 * kSwizzleBytes;

    __device__ __forceinline__ static void write_warp(uint8_t* smem_d, const float* acc, uint32_t row0,
                                                      uint32_t lane) {
        const uint32_t row = row0 + lane / 4;
        #pragma unroll
        for (uint32_t c = 0; c < BLOCK_N / 8; ++c) {
            const uint32_t col_bytes = (c * 8 + (lane % 4) * 2) * 4;
            st_shared_v2(smem_d + swizzled_offset<kSwizzleBytes, kSwizzleBytes, kAtomBytes>(row, col_bytes),
                         acc[c * 4 + 0], acc[c * 4 + 1]);
            st_shared_v2(smem_d + swizzled_offset<kSwizzleBytes, kSwizzleBytes, kAtomBytes>(row + 8, col_bytes),
                         acc[c * 4 + 2], acc[c * 4 + 3]);
        }
    }
};

// Per-warpgroup output tile: one 64-row shared-memory tile per math warpgroup (a 256-row tile's second sub-tile
// reuses it once the first is stored) of BF16 (BF16Epilogue's swizzled layout, stmatrix) or FP32 (FP32WarpTile)
// elements, then one TMA store, or with kAdd one TMA reduce-add (D += tile, in L2, in D's element type: every element
// of D is read and written once), per kSwizzleBytes-wide column atom into a 3-D map [groups, m, n] with box
// (kSwizzleBytes / element bytes) x 64 x 1. The BF16 GEMM (bf16_gemm.cuh) and the FP8 weight gradient (FP32, kAdd).
template <uint32_t BLOCK_N, uint32_t kSwizzleBytes, bool kFP32, bool kAdd>
struct WarpgroupTileEpilogue {
    DG_STATIC_ASSERT(kSwizzleBytes == 32 or kSwizzleBytes == 64 or kSwizzleBytes == 128,
                     "D swizzle must be 32, 64 or 128 bytes");
    static constexpr uint32_t kElementBytes = kFP32 ? 4 : 2;
    DG_STATIC_ASSERT((BLOCK_N * kElementBytes) % kSwizzleBytes == 0, "the D swizzle width must divide a tile row");
    static constexpr uint32_t kNumAtoms = BLOCK_N * kElementBytes / kSwizzleBytes;
    static constexpr uint32_t kAtomBytes = 64 * kSwizzleBytes;
    static constexpr uint32_t kSmemBytes = 64 * BLOCK_N * kElementBytes;  // per warpgroup
    DG_STATIC_ASSERT(kSmemBytes % 1024 == 0, "each warpgroup's D tile must stay 1024-byte aligned");

    template <uint32_t kNumMathWGs>
    static constexpr uint32_t smem_d_bytes() {
        return kNumMathWGs * kSmemBytes;
    }

    // One warp's 16 x BLOCK_N slice of a 64-row accumulator; `row0` = its first row in the 64-row tile.
    __device__ __forceinline__ static void write_warp(uint8_t* smem_d, const float* acc, uint32_t row0,
                                                      uint32_t lane) {
        if constexpr (kFP32)
            FP32WarpTile<BLOCK_N, kSwizzleBytes>::write_warp(smem_d, acc, row0, lane);
        else
            BF16Epilogue<64, BLOCK_N, kSwizzleBytes>::write_warp(smem_d, acc, row0, lane);
    }

    // Store (or add) the 64-row tile at (group, m_start, n_start) (one thread; the caller fenced and synchronised
    // the writers, and commits the bulk group). Rows and columns past D's extent are clipped by TMA.
    __device__ __forceinline__ static void store(const TmaDescriptor* tensor_map_d, const uint8_t* smem_d,
                                                 uint32_t group, uint32_t m_start, uint32_t n_start) {
        #pragma unroll
        for (uint32_t atom = 0; atom < kNumAtoms; ++atom) {
            const auto col = static_cast<int32_t>(n_start + atom * kSwizzleBytes / kElementBytes);
            if constexpr (kAdd)
                tma_reduce_add_3d(tensor_map_d, smem_d + atom * kAtomBytes, col, static_cast<int32_t>(m_start),
                                  static_cast<int32_t>(group));
            else
                tma_store_3d(tensor_map_d, smem_d + atom * kAtomBytes, col, static_cast<int32_t>(m_start),
                             static_cast<int32_t>(group));
        }
    }
};

}  // namespace deep_gemm::sm90
