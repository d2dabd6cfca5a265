#pragma once

#include <deep_gemm/common/barrier.cuh>
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

// The 64 tile rows from `row0` of an e4m3 shared-memory tile (laid out as swizzled_offset's) copied to global memory
// by a warpgroup's 128 threads with 16-byte stores (FP8RowScaleEpilogue, SwiGLUFP8Epilogue): kChunks chunks per row,
// the tile's byte b of a row to byte col_bytes + b of D's row m_start + row (rows of `row_stride_bytes`); tile rows
// >= valid_rows and D bytes >= limit_bytes skipped. A masked group's last block: rows past the group's end must stay
// untouched, which a TMA box cannot express.
template <uint32_t kRowBytes, uint32_t kSwizzleBytes, uint32_t kAtomBytes, uint32_t kChunks>
__device__ __forceinline__ void copy_tile_rows(const uint8_t* smem, uint32_t row0, uint32_t valid_rows, uint8_t* d,
                                               uint64_t row_stride_bytes, uint32_t m_start, uint32_t col_bytes,
                                               uint32_t limit_bytes, uint32_t thread) {
    #pragma unroll 1
    for (uint32_t i = thread; i < 64 * kChunks; i += 128) {
        const uint32_t row = row0 + i / kChunks;
        const uint32_t chunk = i % kChunks;
        const uint32_t col = col_bytes + chunk * 16;
        if (row < valid_rows and col < limit_bytes)
            copy_16b_shared_to_global(d + (m_start + row) * row_stride_bytes + col,
                                      smem + swizzled_offset<kRowBytes, kSwizzleBytes, kAtomBytes>(row, chunk * 16));
    }
}

// Epilogue policies (the shell's `Epilogue`). A policy provides smem_d_bytes<kNumMathWGs>() (its shared-memory D
// region, a multiple of 1024 bytes: the stages after it keep the 128B swizzle's alignment) and the kernel's writes
// into it (write_warp: one warp's 16 rows of a 64-row WGMMA accumulator) and out of it (TMA stores / reductions).

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

// FP8 (e4m3) epilogue with one scale per row and 128-column group (1 x 128, the layout the FP8 GEMMs take as A's
// scales): per row and group, amax over its 128 FP32 accumulators (a quad of lanes holds a row's columns: two
// shuffles), scale = max(amax, 1e-4) * RN(1/448) as per_token_cast_to_fp8 computes it on the GPU, e4m3 bytes of
// x * RN(1 / scale) (within one e4m3 ulp of the cast's x / scale; +-448 saturate) -> a shared-memory D tile of
// 128-byte column atoms ([BLOCK_M][128 B] each, 128-byte TMA swizzle: the quads' 2-byte writes hit distinct banks)
// -> one TMA store per atom (box 128 x 64). The scales go straight to global memory from the quads' first lanes,
// MN-major: sf[group * sf_stride + row]. NaN accumulators do not reach the amax (fmaxf drops them).
template <uint32_t BLOCK_M, uint32_t BLOCK_N>
struct FP8RowScaleEpilogue {
    static constexpr uint32_t kGroup = 128;
    DG_STATIC_ASSERT(BLOCK_N % kGroup == 0, "FP8 output with 1 x 128 scales needs whole 128-column groups per tile");
    static constexpr uint32_t kRowBytes = 128;
    static constexpr uint32_t kNumAtoms = BLOCK_N / kRowBytes;
    static constexpr uint32_t kAtomBytes = BLOCK_M * kRowBytes;
    static constexpr uint32_t kSmemBytes = BLOCK_M * BLOCK_N;
    static constexpr uint32_t kAmaxFloorBits = 0x38d1b717u;  // float(1e-4), the casts' clamp bound
    static constexpr float kInvFp8Max = 0x1.24924ap-9f;      // RN(1 / 448), as torch's reciprocal of 448.0

    // One warp's 16 x BLOCK_N slice of a 64-row accumulator (layout as in BF16Epilogue; `row0` = its first tile row)
    // into smem_d, and the slice's scales: group g's of tile row r at sf[(first_group + g) * sf_stride + sf_row0 + r]
    // for r < valid_rows (rows past the output's end are not stored). Columns >= kShapeN (the tile starts at
    // `n_start`) stay out of the amax: in a grouped GEMM they hold the next expert's products (B is one [G * n, k]
    // tensor map), not TMA's zeros.
    template <uint32_t kShapeN>
    __device__ __forceinline__ static void write_warp(uint8_t* smem_d, const float* acc, uint32_t row0, uint32_t lane,
                                                      float* sf, uint32_t sf_stride, uint32_t first_group,
                                                      uint32_t sf_row0, uint32_t valid_rows, uint32_t n_start) {
        constexpr uint32_t kChunksPerGroup = kGroup / 8;
        #pragma unroll
        for (uint32_t g = 0; g < BLOCK_N / kGroup; ++g) {
            #pragma unroll
            for (uint32_t h = 0; h < 2; ++h) {
                float amax = 0.0f;
                #pragma unroll
                for (uint32_t c = g * kChunksPerGroup; c < (g + 1) * kChunksPerGroup; ++c) {
                    // A lane's pair shares its validity: kShapeN and the pair's first column are even.
                    if (kShapeN % BLOCK_N == 0 or n_start + c * 8 + (lane % 4) * 2 < kShapeN)
                        amax = fmaxf(amax, fmaxf(fabsf(acc[c * 4 + h * 2]), fabsf(acc[c * 4 + h * 2 + 1])));
                }
                amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
                amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 2));
                const float scale = fmaxf(amax, __uint_as_float(kAmaxFloorBits)) * kInvFp8Max;
                const float inverse = __frcp_rn(scale);
                const uint32_t row = row0 + lane / 4 + h * 8;
                if (lane % 4 == 0 and row < valid_rows)
                    sf[static_cast<uint64_t>(first_group + g) * sf_stride + sf_row0 + row] = scale;
                #pragma unroll
                for (uint32_t c = g * kChunksPerGroup; c < (g + 1) * kChunksPerGroup; ++c) {
                    uint16_t pair;
                    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;"
                        : "=h"(pair) : "f"(acc[c * 4 + h * 2 + 1] * inverse), "f"(acc[c * 4 + h * 2] * inverse));
                    const uint32_t offset =
                        swizzled_offset<kRowBytes, 128, kAtomBytes>(row, c * 8 + (lane % 4) * 2);
                    asm volatile("st.shared.u16 [%0], %1;" :: "r"(smem_u32(smem_d) + offset), "h"(pair) : "memory");
                }
            }
        }
    }

    // The same 64 rows copied by the 128 threads of a warpgroup with 16-byte stores, tile rows >= `valid_rows` and
    // columns >= `shape_n` (a multiple of 16) skipped (as BF16Epilogue::copy_rows: a masked group's last block).
    __device__ __forceinline__ static void copy_rows(const uint8_t* smem_d, uint32_t row0, uint32_t valid_rows,
                                                     uint8_t* d, uint32_t row_stride, uint32_t m_start,
                                                     uint32_t n_start, uint32_t shape_n, uint32_t thread) {
        copy_tile_rows<kRowBytes, 128, kAtomBytes, BLOCK_N / 16>(smem_d, row0, valid_rows, d, row_stride, m_start,
                                                                 n_start, shape_n, thread);
    }

    // Issue the TMA stores of the 64 tile rows starting at `row0` (one thread; as BF16Epilogue::store_rows). The D
    // tensor map is over the e4m3 bytes with box 128 x 64 and the 128-byte swizzle.
    __device__ __forceinline__ static void store_rows(const TmaDescriptor* tensor_map_d, const uint8_t* smem_d,
                                                      uint32_t row0, uint32_t m_start, uint32_t n_start) {
        #pragma unroll
        for (uint32_t atom = 0; atom < kNumAtoms; ++atom) {
            tma_store_2d(tensor_map_d, smem_d + atom * kAtomBytes + row0 * kRowBytes,
                         static_cast<int32_t>(n_start + atom * kRowBytes), static_cast<int32_t>(m_start + row0));
        }
    }
};

// The MoE gate/up projection's epilogue with SwiGLU and FP8 output (fp8_gemm_1d2d.cuh, Config::kSwiGLU). B's gate and
// up rows are interleaved in runs of 64 (interleave_swiglu_weights), so a 128-wide tile's WGMMA chunks 0-7 hold gate
// columns j..j + 63 and chunks 8-15 the up columns of the same j, in the same thread: the tile's 64 output columns
// are act = SiLU(min(gate, clamp)) * min(max(up, -clamp), clamp) (clamp = +inf: none), in FP32. A 1 x 128 scale
// group spans two tiles: the two CTAs of the cluster (A multicast pairs N blocks 2p and 2p + 1 of one M block) each
// compute their rows' amax over their 64 columns and exchange them through distributed shared memory (barriers
// `ready` and `drained` per tile, one release arrival per warp, as ClusterSplitEpilogue), so both derive the same
// scale, max(amax, 1e-4) * RN(1/448) as FP8RowScaleEpilogue. Each math warpgroup exchanges with the peer's same
// warpgroup only (its own pair of barriers): the two warpgroups of a CTA stay free to drift, so one's epilogue still
// overlaps the other's WGMMAs. D: [BLOCK_M][64 B] e4m3 with the 64-byte TMA swizzle (box 64 x 64 per 64-row
// sub-tile); the scales: cluster rank 0's quads' first lanes.
// NOTES: one barrier pair for all four warpgroups of the cluster made the GEMM 13% slower than the BF16 one of the
// same tile at 262144 x 4096 x 7168 (H100); see benchmarks/NOTES.md.
// Shared memory (the shell's D region): the D tile, then a float2 of amaxes per quad and sub-tile, then the barriers
// ([ready, drained][math warpgroups]).
template <uint32_t BLOCK_M, uint32_t kNumMathThreads>
struct SwiGLUFP8Epilogue {
    static constexpr uint32_t kOutCols = 64;  // output columns (e4m3 bytes) of a tile row
    static constexpr uint32_t kNumSubTiles = BLOCK_M / (64 * (kNumMathThreads / 128));
    static constexpr uint32_t kTileBytes = BLOCK_M * kOutCols;
    static constexpr uint32_t kAmaxBytes = kNumSubTiles * (kNumMathThreads / 4) * 8;
    static constexpr uint32_t kNumMathWGs = kNumMathThreads / 128;
    static constexpr uint32_t kSmemBytes = kTileBytes + kAmaxBytes + 2 * kNumMathWGs * sizeof(Barrier);

    // The shell's D region (the epilogue policy's requirement): a quarter of the BF16 tile's, so a stage more fits.
    template <uint32_t kNumMathWGs_>
    static constexpr uint32_t smem_d_bytes() {
        return align_up<uint32_t>(kSmemBytes, 1024);
    }
    static constexpr uint32_t kAmaxFloorBits = 0x38d1b717u;  // float(1e-4), the casts' clamp bound
    static constexpr float kInvFp8Max = 0x1.24924ap-9f;      // RN(1 / 448)

    uint32_t amax_addr;  // shared address of this thread's quad's float2 in sub-tile 0
    Barrier* ready;
    Barrier* drained;
    uint32_t rank;
    uint32_t phase;

    __device__ __forceinline__ SwiGLUFP8Epilogue(uint8_t* smem_d, uint32_t thread)
        : amax_addr(smem_u32(smem_d + kTileBytes) + thread / 4 * 8),
          ready(reinterpret_cast<Barrier*>(smem_d + kTileBytes + kAmaxBytes) + thread / 128),
          drained(ready + kNumMathWGs),
          rank(block_rank_in_cluster()),
          phase(0) {}

    // One thread, before the cluster synchronises (the kernel, ahead of the shell's setup).
    __device__ __forceinline__ static void init(uint8_t* smem_d) {
        auto* barriers = reinterpret_cast<Barrier*>(smem_d + kTileBytes + kAmaxBytes);
        for (uint32_t i = 0; i < 2 * kNumMathWGs; ++i)
            barriers[i].init(2 * 4);  // the 4 warps of a warpgroup in each of the 2 CTAs
        fence_barrier_init();
    }

    // NOTES: __expf and a fast division: within a few float32 ulps of the exact SiLU, far below an e4m3 step; the
    // IEEE division's checks and slow-path calls were ~1000 instructions per thread and tile. The clamp (the float
    // of kClampBits; none when it is +inf) keeps NaN a NaN, as torch.clamp does (fminf / fmaxf would drop it).
    template <uint32_t kClampBits>
    __device__ __forceinline__ static float activation(float gate, float up) {
        if constexpr (kClampBits != 0x7f800000u) {
            const float clamp = __uint_as_float(kClampBits);
            gate = gate > clamp ? clamp : gate;
            up = up > clamp ? clamp : (up < -clamp ? -clamp : up);
        }
        return __fdividef(gate, 1.0f + __expf(-gate)) * up;
    }

    // The tile's activations in place of its gate accumulators (chunks 0-7), and this thread's rows' amax over the
    // cluster's 128 columns: `amax[s][h]` for rows lane_row + 8h of sub-tile s.
    template <uint32_t kClampBits>
    __device__ __forceinline__ void activate(float (&acc)[kNumSubTiles][64], uint32_t lane,
                                             float (&amax)[kNumSubTiles][2]) {
        #pragma unroll
        for (uint32_t s = 0; s < kNumSubTiles; ++s) {
            #pragma unroll
            for (uint32_t h = 0; h < 2; ++h) {
                float m = 0.0f;
                #pragma unroll
                for (uint32_t c = 0; c < 8; ++c) {
                    #pragma unroll
                    for (uint32_t i = 0; i < 2; ++i) {
                        const uint32_t j = c * 4 + h * 2 + i;
                        acc[s][j] = activation<kClampBits>(acc[s][j], acc[s][j + 32]);
                        m = fmaxf(m, fabsf(acc[s][j]));
                    }
                }
                m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));
                amax[s][h] = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 2));
            }
        }
        // The exchange: once the peer has read this CTA's previous amaxes, publish these, then read the peer's.
        drained->wait_cluster_acquire(phase ^ 1);
        if (lane % 4 == 0) {
            #pragma unroll
            for (uint32_t s = 0; s < kNumSubTiles; ++s)
                asm volatile("st.shared.v2.f32 [%0], {%1, %2};"
                             :: "r"(amax_addr + s * (kNumMathThreads / 4) * 8), "f"(amax[s][0]), "f"(amax[s][1])
                             : "memory");
        }
        __syncwarp();
        if (lane < 2)
            ready->arrive_cluster_release(lane);
        ready->wait_cluster_acquire(phase);
        #pragma unroll
        for (uint32_t s = 0; s < kNumSubTiles; ++s) {
            const float2 peer = ld_shared_cluster_v2_f32(amax_addr + s * (kNumMathThreads / 4) * 8, rank ^ 1);
            amax[s][0] = fmaxf(amax[s][0], peer.x);  // max is symmetric: both CTAs get the same value
            amax[s][1] = fmaxf(amax[s][1], peer.y);
        }
        __syncwarp();
        if (lane < 2)
            drained->arrive_cluster_release(lane);
        phase ^= 1;
    }

    // One warp's 16 rows of sub-tile s (activations in chunks 0-7 of `acc`) as e4m3 into the D tile, and (cluster
    // rank 0) the rows' scales at sf[sf_row0 + row] for tile rows < valid_rows (sf: the scale group's column).
    __device__ __forceinline__ void write_warp(uint8_t* smem_d, const float* acc, const float (&amax)[2],
                                               uint32_t row0, uint32_t lane, float* sf, uint32_t sf_row0,
                                               uint32_t valid_rows) const {
        #pragma unroll
        for (uint32_t h = 0; h < 2; ++h) {
            const float scale = fmaxf(amax[h], __uint_as_float(kAmaxFloorBits)) * kInvFp8Max;
            const float inverse = __frcp_rn(scale);
            const uint32_t row = row0 + lane / 4 + h * 8;
            if (rank == 0 and lane % 4 == 0 and row < valid_rows)
                sf[sf_row0 + row] = scale;
            #pragma unroll
            for (uint32_t c = 0; c < 8; ++c) {
                uint16_t pair;
                asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;"
                    : "=h"(pair) : "f"(acc[c * 4 + h * 2 + 1] * inverse), "f"(acc[c * 4 + h * 2] * inverse));
                const uint32_t offset = swizzled_offset<kOutCols, 64, kTileBytes>(row, c * 8 + (lane % 4) * 2);
                asm volatile("st.shared.u16 [%0], %1;" :: "r"(smem_u32(smem_d) + offset), "h"(pair) : "memory");
            }
        }
    }

    // The 64 rows from `row0` copied by a warpgroup's 128 threads with 16-byte stores, tile rows >= valid_rows
    // skipped (a masked group's last block).
    __device__ __forceinline__ static void copy_rows(const uint8_t* smem_d, uint32_t row0, uint32_t valid_rows,
                                                     uint8_t* d, uint32_t row_stride, uint32_t m_start,
                                                     uint32_t n_start, uint32_t thread) {
        copy_tile_rows<kOutCols, 64, kTileBytes, kOutCols / 16>(smem_d, row0, valid_rows, d, row_stride, m_start,
                                                                n_start, ~0u, thread);
    }

    // TMA store of the 64 rows from `row0` (one thread; D's map: e4m3 bytes, box 64 x 64, 64-byte swizzle).
    __device__ __forceinline__ static void store_rows(const TmaDescriptor* tensor_map_d, const uint8_t* smem_d,
                                                      uint32_t row0, uint32_t m_start, uint32_t n_start) {
        tma_store_2d(tensor_map_d, smem_d + row0 * kOutCols, static_cast<int32_t>(n_start),
                     static_cast<int32_t>(m_start + row0));
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

// What the shell needs of an epilogue whose CTAs cooperate across a cluster: its CTAs per cluster (kClusterCtas) and
// the one-thread initialisation of its barriers before the cluster synchronises (init(smem_d)); an epilogue without
// kClusterCtas works within its CTA (1, nothing to initialise).
template <typename Epilogue, typename = void>
struct ClusterEpilogue {
    static constexpr uint32_t kClusterCtas = 1;
    __device__ __forceinline__ static void init(uint8_t*) {}
};
template <typename Epilogue>
struct ClusterEpilogue<Epilogue, decltype(void(Epilogue::kClusterCtas))> {
    static constexpr uint32_t kClusterCtas = Epilogue::kClusterCtas;
    __device__ __forceinline__ static void init(uint8_t* smem_d) { Epilogue::init(smem_d); }
};

// K splits over a cluster (dense GEMMs too small to give every SM an output tile): the kSplits CTAs of a cluster
// compute one output tile, each over its own contiguous range of K (KSplits; split = cluster rank). Every CTA writes
// its FP32 accumulators into its own shared memory; then each CTA adds up a share of the tile's accumulator pairs
// over all kSplits partial tiles (read through distributed shared memory) in split order, so the result never
// depends on timing (bitwise reproducible), and writes them to D with plain stores (BF16 or FP32; with kAdd, added
// to D's values). No global workspace, no extra launch. Two cluster-wide barriers per tile in every CTA: `ready`
// (every CTA's partial tile is written) and `drained` (every CTA has read this one's, so the next tile may
// overwrite it); one release arrival per math warp of each CTA on each.
// Shared memory (the shell's D region): [kNumPairs][kNumMathThreads] float2 partial sums, then the two barriers.
template <uint32_t kSplits, uint32_t BLOCK_M, uint32_t BLOCK_N, uint32_t kNumMathThreads, bool kFP32, bool kAdd>
struct ClusterSplitEpilogue {
    DG_STATIC_ASSERT(kSplits >= 2 and kSplits <= 16, "a cluster holds 2 to 16 K splits (above 8: non-portable)");
    static constexpr uint32_t kClusterCtas = kSplits;  // the shell launches, sets up and tears down a cluster
    static constexpr uint32_t kNumValues = BLOCK_M * BLOCK_N / kNumMathThreads;  // accumulators per thread
    static constexpr uint32_t kNumPairs = kNumValues / 2;
    static constexpr uint32_t kPartialBytes = kNumPairs * kNumMathThreads * 8;

    template <uint32_t kNumMathWGs>
    static constexpr uint32_t smem_d_bytes() {
        return align_up<uint32_t>(kPartialBytes + 2 * sizeof(Barrier), 1024);
    }

    uint32_t partial;  // shared-memory address of this thread's pair 0 (pair j at + j * kNumMathThreads * 8)
    Barrier* ready;
    Barrier* drained;
    uint32_t rank;
    uint32_t phase;

    __device__ __forceinline__ ClusterSplitEpilogue(uint8_t* smem_d, uint32_t thread)
        : partial(smem_u32(smem_d) + thread * 8),
          ready(reinterpret_cast<Barrier*>(smem_d + kPartialBytes)),
          drained(ready + 1),
          rank(blockIdx.x % kSplits),  // the cluster rank of a 1-D cluster
          phase(0) {}

    // One thread, before the cluster synchronises (the arrivals come from every CTA of the cluster): the shell's
    // setup (ClusterEpilogue).
    __device__ __forceinline__ static void init(uint8_t* smem_d) {
        auto* barriers = reinterpret_cast<Barrier*>(smem_d + kPartialBytes);
        barriers[0].init(kSplits * kNumMathThreads / 32);
        barriers[1].init(kSplits * kNumMathThreads / 32);
        fence_barrier_init();
    }

    // Every math thread, once per tile, with its kNumValues accumulators: `store(j, sum)` writes pair j's total
    // (accumulators 2j and 2j + 1) for the pairs this CTA adds up.
    template <typename Store>
    __device__ __forceinline__ void reduce(const float* acc, uint32_t warp, uint32_t lane, Store store) {
        drained->wait_cluster_acquire(phase ^ 1);  // every CTA has read the previous tile's partial sums
        #pragma unroll
        for (uint32_t j = 0; j < kNumPairs; ++j)
            asm volatile("st.shared.v2.f32 [%0], {%1, %2};"
                         :: "r"(partial + j * kNumMathThreads * 8), "f"(acc[2 * j]), "f"(acc[2 * j + 1]) : "memory");
        __syncwarp();
        if (lane < kSplits)
            ready->arrive_cluster_release(lane);
        ready->wait_cluster_acquire(phase);
        // Pair j is added up by CTA (j + warp) % kSplits: every CTA gets a share of each warp's rows.
        #pragma unroll
        for (uint32_t j = 0; j < kNumPairs; ++j) {
            if ((j + warp) % kSplits != rank)
                continue;
            float2 sum = make_float2(0.0f, 0.0f);
            #pragma unroll
            for (uint32_t s = 0; s < kSplits; ++s) {
                const float2 v = s == rank ? make_float2(acc[2 * j], acc[2 * j + 1])
                                           : ld_shared_cluster_v2_f32(partial + j * kNumMathThreads * 8, s);
                sum.x = s == 0 ? v.x : sum.x + v.x;
                sum.y = s == 0 ? v.y : sum.y + v.y;
            }
            store(j, sum);
        }
        __syncwarp();
        if (lane < kSplits)
            drained->arrive_cluster_release(lane);
        phase ^= 1;
    }

    // `reduce`, each sum stored to D (at `row_stride` elements per row) at the tile's (row_base, col_base) plus the
    // pair's place (MathWarpgroup::pair_position), rows >= shape_m and columns >= shape_n skipped.
    template <typename MathWarpgroup>
    __device__ __forceinline__ void reduce_to_d(const float* acc, const MathWarpgroup& wg, uint32_t row_base,
                                                uint32_t col_base, uint32_t shape_m, uint32_t shape_n, uint8_t* d,
                                                uint32_t row_stride) {
        reduce(acc, threadIdx.x / 32, wg.lane_idx, [&](uint32_t j, float2 sum) {
            uint32_t row, col;
            wg.pair_position(j, row, col);
            if (row_base + row < shape_m)
                store_pair(d, row_stride, row_base + row, col_base + col, shape_n, sum);
        });
    }

    // D[row][col, col + 1] (+)= v, columns >= shape_n skipped (`row_stride` in elements).
    __device__ __forceinline__ static void store_pair(uint8_t* d, uint32_t row_stride, uint32_t row, uint32_t col,
                                                      uint32_t shape_n, float2 v) {
        const uint64_t offset = static_cast<uint64_t>(row) * row_stride + col;
        if constexpr (kFP32) {
            float* dst = reinterpret_cast<float*>(d) + offset;
            if (col + 1 < shape_n and offset % 2 == 0) {
                float2 out = v;
                if constexpr (kAdd) {
                    const float2 old = *reinterpret_cast<const float2*>(dst);
                    out = make_float2(old.x + v.x, old.y + v.y);
                }
                *reinterpret_cast<float2*>(dst) = out;
            } else {
                if (col < shape_n)
                    dst[0] = kAdd ? dst[0] + v.x : v.x;
                if (col + 1 < shape_n)
                    dst[1] = kAdd ? dst[1] + v.y : v.y;
            }
        } else {
            auto* dst = reinterpret_cast<uint16_t*>(d) + offset;  // BF16 bits
            if constexpr (kAdd) {
                if (col < shape_n)
                    v.x += bf16_bits_to_float(dst[0]);
                if (col + 1 < shape_n)
                    v.y += bf16_bits_to_float(dst[1]);
            }
            const uint32_t packed = pack_bf16x2(v.x, v.y);
            if (col + 1 < shape_n and offset % 2 == 0) {
                *reinterpret_cast<uint32_t*>(dst) = packed;
            } else {
                if (col < shape_n)
                    dst[0] = static_cast<uint16_t>(packed & 0xffff);
                if (col + 1 < shape_n)
                    dst[1] = static_cast<uint16_t>(packed >> 16);
            }
        }
    }
};

}  // namespace deep_gemm::sm90
