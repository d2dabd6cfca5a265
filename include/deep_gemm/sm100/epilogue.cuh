#pragma once

// The epilogue warps' side of the sm100 kernels: reading FP32 accumulators out of tensor memory and writing BF16 rows
// of D.
//
// Layout: epilogue warp w (w = 4..11) reads TMEM lanes 32 (w % 4) .. +31, i.e. one row of the CTA's 128 per thread,
// and warpgroup (w - 4) / 4 takes half of the tile's BLOCK_N columns. Each thread therefore owns BLOCK_N / 2
// consecutive columns of one row, read 8 columns (one tcgen05.ld 32x32b.x8) at a time and written as 16-byte BF16
// chunks straight to global memory.

#include <deep_gemm/common/scheduler.cuh>
#include <deep_gemm/common/utils.cuh>
#include <deep_gemm/sm100/mma.cuh>
#include <deep_gemm/sm100/pipeline.cuh>

namespace deep_gemm::sm100 {

template <uint32_t BLOCK_N>
struct RowEpilogue {
    DG_STATIC_ASSERT(BLOCK_N % 16 == 0, "each epilogue warpgroup's half of BLOCK_N must be whole 8-column chunks");
    static constexpr uint32_t kHalfN = BLOCK_N / 2;
    static constexpr uint32_t kNumChunks = kHalfN / 8;
    // Chunks loaded before one tcgen05.wait::ld: their latencies overlap (32 registers in flight).
    static constexpr uint32_t kChunksPerWait = 4;

    uint32_t tmem_row;   // TMEM address of this thread's lane, column of its first chunk in accumulator buffer 0
    uint32_t row;        // this thread's row in the CTA's 128
    uint32_t col;        // this thread's first column in the tile

    __device__ __forceinline__ RowEpilogue(uint32_t tmem_base, uint32_t warp_idx, uint32_t lane_idx)
        : tmem_row(tmem_base + (((warp_idx % 4) * 32) << 16) + ((warp_idx - kNumNonEpilogueThreads / 32) / 4) * kHalfN),
          row((warp_idx % 4) * 32 + lane_idx),
          col(((warp_idx - kNumNonEpilogueThreads / 32) / 4) * kHalfN) {}

    // Load chunks [c0, c0 + kLen) of accumulator buffer `column` (a TMEM column offset) and call f(chunk, values[8])
    // for each, once the loads have landed.
    template <uint32_t kLen, typename F>
    __device__ __forceinline__ void load_chunks(uint32_t column, uint32_t c0, F&& f) const {
        uint32_t r[kLen][8];
        // NOTES: tcgen05.ld is .sync.aligned: the warp must be converged (f may have branched per thread).
        __syncwarp();
        #pragma unroll
        for (uint32_t i = 0; i < kLen; ++i)
            tmem_load_8(tmem_row + column + (c0 + i) * 8, r[i]);
        tmem_load_wait();
        #pragma unroll
        for (uint32_t i = 0; i < kLen; ++i) {
            // NOTES: an empty asm that rewrites each register pins its uses after the wait (the compiler sees the
            // tcgen05.ld outputs as ready at the load).
            #pragma unroll
            for (uint32_t j = 0; j < 8; ++j)
                asm volatile("" : "+r"(r[i][j]));
            float v[8];
            #pragma unroll
            for (uint32_t j = 0; j < 8; ++j)
                v[j] = __uint_as_float(r[i][j]);
            f(c0 + i, v);
        }
    }

    // Every chunk of this thread's half row, kChunksPerWait per wait.
    template <typename F>
    __device__ __forceinline__ void for_each_chunk(uint32_t column, F&& f) const {
        static_for<ceil_div(kNumChunks, kChunksPerWait)>([&](auto i) {
            constexpr uint32_t c0 = decltype(i)::value * kChunksPerWait;
            constexpr uint32_t kLen = kNumChunks - c0 < kChunksPerWait ? kNumChunks - c0 : kChunksPerWait;
            load_chunks<kLen>(column, c0, f);
        });
    }

    // 8 FP32 values as 8 BF16 (16 bytes) at `dst` (16-byte aligned).
    __device__ __forceinline__ static void store_chunk(void* dst, const float* v) {
        asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};"
                     :: "l"(dst), "r"(pack_bf16x2(v[0], v[1])), "r"(pack_bf16x2(v[2], v[3])),
                        "r"(pack_bf16x2(v[4], v[5])), "r"(pack_bf16x2(v[6], v[7]))
                     : "memory");
    }
};

// One epilogue thread's row of a tile and where its chunks go: which rows are written (dense / contiguous up to m,
// contiguous rows of another expert or padding as zeros; masked up to masked_m of the group, the rest of the group's
// rows untouched) and the row's place in D (`d`, `d_row_stride` elements).
template <GemmType kGemmType, uint32_t SHAPE_N, uint32_t BLOCK_N>
struct RowOutput {
    static constexpr bool kContiguous = kGemmType == GemmType::MGroupedContiguous;
    static constexpr bool kMasked = kGemmType == GemmType::MGroupedMasked;

    bool write_row;
    bool keep_row;
    uint32_t col;       // the row's first column in D
    uint8_t* row_ptr;   // D at (d_row, col)

    __device__ __forceinline__ RowOutput(const Tile& tile, uint32_t tile_row, uint32_t d_row, uint32_t n_first,
                                         uint32_t epi_col, uint32_t shape_m, const int32_t* grouped_layout,
                                         uint8_t* d, uint32_t d_row_stride)
        : keep_row(true), col(n_first + epi_col) {
        if constexpr (kMasked) {
            write_row = tile_row < tile.valid_rows;
        } else {
            write_row = d_row < shape_m;
            if constexpr (kContiguous)
                keep_row = write_row and not tile.skip and __ldg(grouped_layout + d_row) ==
                                                            static_cast<int32_t>(tile.group);
        }
        row_ptr = d + (static_cast<uint64_t>(d_row) * d_row_stride + n_first + epi_col) * 2;
    }

    // Chunk `chunk` (8 columns) of the row's half: its values, or zeros in a row of another expert.
    __device__ __forceinline__ void store(uint32_t chunk, const float* v) const {
        if (write_row and col + chunk * 8 < SHAPE_N) {
            float out[8];
            #pragma unroll
            for (uint32_t j = 0; j < 8; ++j)
                out[j] = keep_row ? v[j] : 0.0f;
            RowEpilogue<BLOCK_N>::store_chunk(row_ptr + chunk * 16, out);
        }
    }
};

}  // namespace deep_gemm::sm100
