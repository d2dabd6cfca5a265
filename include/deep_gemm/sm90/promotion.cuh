#pragma once

// Scale-promotion policies of the sm90 kernel shell (the shell's `Promotion`): a kernel's scales, where they live in
// shared memory, who loads them, and what the K loop does with each K block's FP32 partial sums.
//
// A policy provides, for the shell (KernelShell):
//   kSmemBytes       its shared memory, after the stages (a multiple of 8: the stage barriers follow it);
//   kStageTxBytes    the bytes its TMA loads add to every stage (Producer::load);
//   kNumGatherWarps  0, or 1 when a warp of the producer warpgroup gathers per-stage scales with cp.async
//                    (Producer::gather; the stage's full barrier then also waits for that warp's 32 lanes);
//   kPromotes        whether every K block's partial sums are scaled into separate FP32 accumulators on the CUDA
//                    cores. NOTES: FP8 needs it: the tensor core's FP8 accumulation is reduced-precision, so its
//                    reach is bounded to one 128-wide K block (and the scales change per K block anyway). A BF16
//                    policy has no scales and accumulates all of K in the WGMMA accumulators (kPromotes = false).
// and for the kernel a Producer (`load(tile, scale_row, stage, barrier)`, `gather(tile, k_block, stage, lane)`,
// called by the shell's producer loop) and a Math side that the kernel's K loop (mainloop.cuh) drives.

#include <deep_gemm/common/barrier.cuh>
#include <deep_gemm/common/scheduler.cuh>
#include <deep_gemm/common/tma.cuh>
#include <deep_gemm/common/utils.cuh>
#include <deep_gemm/sm90/pipeline.cuh>

namespace deep_gemm::sm90 {

template <uint32_t BLOCK_M>
constexpr uint32_t num_math_threads() {
    return BLOCK_M == 64 ? 128 : 256;
}

// The requirements above (instantiated by the shell).
template <typename Promotion>
struct CheckPromotion {
    DG_STATIC_ASSERT(Promotion::kSmemBytes % sizeof(Barrier) == 0,
                     "the promotion's shared memory must keep the barriers after it aligned");
    DG_STATIC_ASSERT(Promotion::kNumGatherWarps <= 1, "at most one gather warp (the producer warpgroup's second)");
    DG_STATIC_ASSERT(Promotion::kStageTxBytes % 16 == 0, "TMA loads move whole 16-byte units");
    DG_STATIC_ASSERT(Promotion::kPromotes or (Promotion::kSmemBytes == 0 and Promotion::kNumGatherWarps == 0),
                     "a policy without promotion has no scales to keep or gather");
    static constexpr bool kOk = true;
};

// ---- No scales: the WGMMAs accumulate a tile's whole K (AccumulatingKLoop, mainloop.cuh) ----
// The policy of operands that need no dequantisation (BF16), and of unscaled FP8 where the reduced-precision
// accumulation over all of K is acceptable.
struct NoPromotion {
    static constexpr uint32_t kSmemBytes = 0;
    static constexpr uint32_t kStageTxBytes = 0;
    static constexpr uint32_t kNumGatherWarps = 0;
    static constexpr bool kPromotes = false;

    struct Producer {
        __device__ __forceinline__ void load(const Tile&, uint32_t, uint32_t, const Barrier*) const {}
        __device__ __forceinline__ void gather(const Tile&, uint32_t, uint32_t, uint32_t) const {}
    };
};

// ---- FP8 with 1x128 LHS scales (SA) and 128x128 RHS scales (SB): fp8_gemm_1d2d.cuh ----

// Whether a BLOCK_N-wide tile can span two 128-wide RHS scale blocks.
template <uint32_t BLOCK_N>
constexpr bool fp8_gemm_may_straddle() {
    return 128 % BLOCK_N != 0;
}

// Bytes of the RHS scales in shared memory: per tile, [math warpgroups][2 buffers][1 or 2 scale blocks][K blocks]
// fp32; with gathered scales, per stage, [stages][2] fp32 (the K block's value for the tile's one or two blocks).
// kPairedScales (the SwiGLU GEMM): every tile takes two scale blocks, its gate rows' and its up rows'.
template <uint32_t SHAPE_K, uint32_t BLOCK_M, uint32_t BLOCK_N, uint32_t kNumStages, bool kGatherScales,
          bool kPairedScales = false>
constexpr uint32_t fp8_gemm_smem_sb_size() {
    constexpr uint32_t kNumKBlocks = ceil_div(SHAPE_K, kBlockK);
    return kGatherScales ? align_up<uint32_t>(kNumStages * 2 * 4, 8)
                         : align_up<uint32_t>(num_math_threads<BLOCK_M>() / 128 * 2 * kNumKBlocks *
                                                  (fp8_gemm_may_straddle<BLOCK_N>() or kPairedScales ? 2 : 1) * 4,
                                              8);
}

// SA comes per stage (TMA from the MN-major SA tensor, or gathered from any strides: Config::kGatherScales), SB per
// tile: every math warpgroup copies its tile's [1 or 2][K blocks] RHS scales from global memory into its own
// double-buffered shared-memory slot (the next tile's while this one's K loop runs), or, gathered, per stage too.
// Promotion: final += partial * SA(row) * SB(128-column block of the column, k block).
// Config::kSwiGLU (the MoE gate/up GEMM, B's gate and up rows interleaved in runs of 64: interleave_swiglu_weights):
// a 128-wide tile j holds gate rows [64j, 64j + 64) then the up rows of the same range, whose scales are SB's
// blocks j / 2 (gate) and SHAPE_N / 256 + j / 2 (up: SB keeps the gate | up order of the weights): every tile
// straddles at column 64.
// Config: kGemmType, SHAPE_N, SHAPE_K, BLOCK_M, BLOCK_N, kNumStages, kGatherScales, kSwiGLU.
template <typename Config>
struct FP8BlockPromotion {
    static constexpr GemmType kGemmType = Config::kGemmType;
    static constexpr uint32_t SHAPE_N = Config::SHAPE_N;
    static constexpr uint32_t SHAPE_K = Config::SHAPE_K;
    static constexpr uint32_t BLOCK_M = Config::BLOCK_M;
    static constexpr uint32_t BLOCK_N = Config::BLOCK_N;
    static constexpr uint32_t kNumStages = Config::kNumStages;
    static constexpr bool kGatherScales = Config::kGatherScales;
    static constexpr bool kGrouped = kGemmType != GemmType::Normal;
    static constexpr uint32_t kNumMathWGs = num_math_threads<BLOCK_M>() / 128;
    static constexpr uint32_t kNumKBlocks = ceil_div(SHAPE_K, kBlockK);
    static constexpr uint32_t kNumSBBlocks = ceil_div(SHAPE_N, 128u);
    static constexpr bool kPairedScales = Config::kSwiGLU;
    static constexpr bool kMayStraddle = fp8_gemm_may_straddle<BLOCK_N>() or kPairedScales;
    DG_STATIC_ASSERT(not kPairedScales or (BLOCK_N == 128 and SHAPE_N % 256 == 0),
                     "paired gate / up scales: 128-wide tiles of 64 gate and 64 up rows, whole 128-row gate blocks");
    static constexpr uint32_t kScaleGcd = const_gcd(BLOCK_N, 128u);
    // Where a tile crosses into the next 128-wide RHS scale block depends on n_start % 128, a multiple of
    // gcd(BLOCK_N, 128): that many straddle cases, each with its own split column.
    static constexpr uint32_t kNumStraddleCases = kPairedScales ? 1 : kMayStraddle ? 128 / kScaleGcd : 1;
    static constexpr uint32_t kMaxStaticStraddleCases = 4;
    static constexpr uint32_t kSmemSABytes = BLOCK_M * 4;  // [BLOCK_M] fp32 per stage
    static constexpr uint32_t kNumSBPerTile = kNumKBlocks * (kMayStraddle ? 2 : 1);
    static constexpr uint32_t kSBPerThread = ceil_div(kNumSBPerTile, 128u);

    // The shell's requirements (see the top of this file).
    static constexpr uint32_t kSmemBytes =
        kNumStages * kSmemSABytes +
        fp8_gemm_smem_sb_size<SHAPE_K, BLOCK_M, BLOCK_N, kNumStages, kGatherScales, kPairedScales>();
    static constexpr uint32_t kStageTxBytes = kGatherScales ? 0 : kSmemSABytes;
    static constexpr uint32_t kNumGatherWarps = kGatherScales ? 1 : 0;
    static constexpr bool kPromotes = true;

    DG_STATIC_ASSERT(BLOCK_N <= 128 + const_gcd(BLOCK_N, 128u),
                     "a BLOCK_N tile may touch at most two 128-wide RHS scale blocks");

    // The shell's scale region: SA [stages][BLOCK_M], then SB [math WGs][2 buffers][kNumSBPerTile] (gathered:
    // [stages][2]).
    __device__ __forceinline__ static float* smem_sa(uint8_t* smem_scales) {
        return reinterpret_cast<float*>(smem_scales);
    }
    __device__ __forceinline__ static float* smem_sb(uint8_t* smem_scales) {
        return smem_sa(smem_scales) + kNumStages * BLOCK_M;
    }

    // ---- Producer: SA per stage (TMA by the TMA thread, or gathered with SB's values by the gather warp) ----
    struct Producer {
        const TmaDescriptor* tensor_map_sa;  // SA [ceil(k/128), m'] fp32, MN-major (not gathered)
        float* smem_sa;
        float* smem_sb;
        const float* sa;                     // gathered: SA[g][row][k block] at these strides (elements)
        uint32_t sa_group_stride;
        uint32_t sa_row_stride;
        uint32_t sa_k_stride;
        const float* sb;                     // SB [G, ceil(n/128), ceil(k/128)] fp32
        uint32_t shape_m;

        __device__ __forceinline__ void load(const Tile& tile, uint32_t scale_row, uint32_t stage,
                                             const Barrier* bar) const {
            if constexpr (not kGatherScales) {
                const uint32_t sa_col = kGemmType == GemmType::MGroupedMasked ? tile.m_block * BLOCK_M : tile.row_base;
                tma_load_2d(tensor_map_sa, bar, smem_sa + stage * BLOCK_M, static_cast<int32_t>(sa_col),
                            static_cast<int32_t>(scale_row), kTmaCacheHintEvictNormal);
            }
        }

        // Gathered: each lane copies the scales of rows lane, lane + 32, ... of the tile that exist (the others keep
        // stale values, which only reach rows the epilogue does not write).
        __device__ __forceinline__ void gather(const Tile& tile, uint32_t k_block, uint32_t stage,
                                               uint32_t lane) const {
            if constexpr (kGatherScales) {
                const uint32_t first_row = has_group_row_ends(kGemmType) ? tile.m_block * BLOCK_M : tile.row_base;
                const uint32_t rows = has_group_row_ends(kGemmType) ? tile.valid_rows
                                                                    : min(BLOCK_M, shape_m - tile.row_base);
                const float* src = sa + static_cast<uint64_t>(tile.group) * sa_group_stride +
                                   static_cast<uint64_t>(first_row) * sa_row_stride +
                                   static_cast<uint64_t>(k_block) * sa_k_stride;
                const uint32_t dst = smem_u32(smem_sa + stage * BLOCK_M);
                for (uint32_t r = lane; r < rows; r += 32)
                    cp_async_4b(dst + r * 4, src + static_cast<uint64_t>(r) * sa_row_stride);
                // SB of this K block for the tile's first and second 128-wide scale block (lanes 0 and 1).
                if (lane < 2) {
                    const uint32_t block = kPairedScales ? paired_block(tile.n_block, lane)
                                                         : min(tile.n_block * BLOCK_N / 128 + lane, kNumSBBlocks - 1);
                    cp_async_4b(smem_u32(smem_sb + stage * 2 + lane),
                                sb + (tile.group * kNumSBBlocks + block) * kNumKBlocks + k_block);
                }
            }
        }
    };

    // The SB block of a paired-scale tile's gate (half 0) or up (half 1) rows.
    __device__ __forceinline__ static uint32_t paired_block(uint32_t n_block, uint32_t half) {
        return half * (kNumSBBlocks / 2) + n_block / 2;
    }

    // ---- Math warpgroups ----
    // RHS scales of one K block for the tile's first and (if it straddles) second 128-wide scale block.
    struct RhsScales {
        float b0, b1;
    };
    // Promotion multipliers SA(row) * SB(scale block, k block) of a thread's rows (lane_row and lane_row + 8 of its
    // warp) in one sub-tile, for the tile's first and (if it straddles) second RHS scale block.
    struct Scales {
        float lo0, hi0, lo1, hi1;
    };

    struct Math {
        const float* sb;        // SB in global memory
        float* smem_sb;         // gathered: [stages][2]
        float* wg_sb;           // this warpgroup's [2 buffers][kNumSBPerTile] (not gathered)
        uint32_t sa_addr;       // 32-bit shared address of this thread's first SA entry in stage 0
        uint32_t wg_thread;
        uint32_t tile_sb_addr;  // shared address of the current tile's RHS scales (begin_tile)

        template <typename MathWarpgroup>
        __device__ __forceinline__ Math(uint8_t* smem_scales, const float* sb, const MathWarpgroup& wg)
            : sb(sb),
              smem_sb(FP8BlockPromotion::smem_sb(smem_scales)),
              wg_sb(FP8BlockPromotion::smem_sb(smem_scales) + wg.math_wg * 2 * kNumSBPerTile),
              sa_addr(smem_u32(smem_sa(smem_scales)) + wg.thread_row() * 4),
              wg_thread(wg.wg_thread),
              tile_sb_addr(0) {}

        // RHS scales of a tile's N range for every K block, [1 or 2][kNumKBlocks], per warpgroup and double
        // buffered: the next tile's values are fetched from global memory into registers (fetch_tile_sb) while this
        // tile's K loop runs, and stored (store_tile_sb) before this tile's epilogue barrier publishes them.
        // NOTES: every math warpgroup runs its own epilogue with its own barriers, so one warpgroup's epilogue
        // overlaps the other's WGMMAs; nothing here synchronises the two warpgroups.
        __device__ __forceinline__ void fetch_tile_sb(const Tile& t, bool skip, float (&regs)[kSBPerThread]) const {
            if (kGatherScales or skip)
                return;  // a padding block: its expert index may be anything, read nothing (else t.group is 0)
            const uint32_t block0 = kPairedScales ? paired_block(t.n_block, 0) : t.n_block * BLOCK_N / 128;
            const uint32_t block1 = kPairedScales ? paired_block(t.n_block, 1) : min(block0 + 1, kNumSBBlocks - 1);
            const float* group_sb = sb + (kGrouped ? t.group * kNumSBBlocks * kNumKBlocks : 0u);
            #pragma unroll
            for (uint32_t j = 0; j < kSBPerThread; ++j) {
                const uint32_t i = wg_thread + j * 128;
                if (i < kNumSBPerTile)
                    regs[j] = __ldg(group_sb + (i < kNumKBlocks ? block0 : block1) * kNumKBlocks + i % kNumKBlocks);
            }
        }
        __device__ __forceinline__ void store_tile_sb(uint32_t buf, const float (&regs)[kSBPerThread]) const {
            if constexpr (kGatherScales)
                return;
            #pragma unroll
            for (uint32_t j = 0; j < kSBPerThread; ++j) {
                const uint32_t i = wg_thread + j * 128;
                if (i < kNumSBPerTile)
                    wg_sb[buf * kNumSBPerTile + i] = regs[j];
            }
        }
        // The tile's RHS scales are in buffer `buf`.
        __device__ __forceinline__ void begin_tile(uint32_t buf) {
            tile_sb_addr = smem_u32(wg_sb + buf * kNumSBPerTile);
        }
        // The K loop covers one split of K starting at K block `k_base` (cluster K splits): prefetch(k) is then
        // K block k_base + k's.
        __device__ __forceinline__ void begin_split(uint32_t k_base) { tile_sb_addr += k_base * 4; }

        // K block k_block's RHS scales from the tile's buffer.
        // NOTES: this warpgroup wrote them itself (store_tile_sb), so they are read before the stage's full-barrier
        // wait, once per K block for all sub-tiles.
        __device__ __forceinline__ RhsScales prefetch(uint32_t k_block) const {
            if constexpr (kGatherScales)
                return RhsScales{0.0f, 0.0f};  // in the stage instead: `at_stage` once it is full
            const float sb0 = ld_shared_f32(tile_sb_addr + k_block * 4);
            const float sb1 = kMayStraddle ? ld_shared_f32(tile_sb_addr + (kNumKBlocks + k_block) * 4) : sb0;
            return RhsScales{sb0, sb1};
        }
        // Gathered scales: the K block's RHS scales from its (full) stage.
        __device__ __forceinline__ RhsScales at_stage(uint32_t stage, const RhsScales& rhs) const {
            if constexpr (not kGatherScales)
                return rhs;
            const uint32_t addr = smem_u32(smem_sb + stage * 2);
            return RhsScales{ld_shared_f32(addr), kMayStraddle ? ld_shared_f32(addr + 4) : ld_shared_f32(addr)};
        }
        // The multipliers of sub-tile s in `stage`. NOTES: loaded before the K block's WGMMAs are issued so that
        // neither the shared-memory latency nor the multiplies sit between the WGMMA wait and the promotion.
        __device__ __forceinline__ Scales multipliers(uint32_t stage, uint32_t s, const RhsScales& rhs) const {
            const uint32_t sa_stage = sa_addr + (stage * BLOCK_M + s * kNumMathWGs * 64) * 4;
            const float sa_lo = ld_shared_f32(sa_stage);
            const float sa_hi = ld_shared_f32(sa_stage + 8 * 4);
            return Scales{sa_lo * rhs.b0, sa_hi * rhs.b0, sa_lo * rhs.b1, sa_hi * rhs.b1};
        }

        // final += partial * SA(row) * SB(n block of the column, k block), over kNumAccum accumulators in the WGMMA
        // layout (chunk c of 8 columns: acc[4c + 0, 1] row lane_row, acc[4c + 2, 3] row lane_row + 8).
        // `straddle` is the tile's straddle case (see kNumStraddleCases): an Int (columns' scales chosen at compile
        // time) or a uint32_t (chosen per column at run time).
        template <uint32_t kNumAccum, typename Straddle>
        __device__ __forceinline__ static void promote(float* final_acc, const float* acc, const Scales& scales,
                                                       Straddle straddle) {
            const uint32_t straddle_col = kPairedScales ? 64u : 128 - static_cast<uint32_t>(straddle) * kScaleGcd;
            #pragma unroll
            for (uint32_t c = 0; c < kNumAccum / 4; ++c) {
                const bool second = kMayStraddle and c * 8 >= straddle_col;
                const float s_lo = second ? scales.lo1 : scales.lo0;
                const float s_hi = second ? scales.hi1 : scales.hi0;
                final_acc[c * 4 + 0] += s_lo * acc[c * 4 + 0];
                final_acc[c * 4 + 1] += s_lo * acc[c * 4 + 1];
                final_acc[c * 4 + 2] += s_hi * acc[c * 4 + 2];
                final_acc[c * 4 + 3] += s_hi * acc[c * 4 + 3];
            }
        }

        // Call f(straddle) with the tile's straddle case: which of the kNumStraddleCases column splits the tile at
        // `n_start` has.
        // NOTES: a per-column run-time choice of RHS scale cost 15-20% of the whole GEMM at BLOCK_N = 112..192
        // (measured on the H200); with few straddle cases the whole K loop is instantiated once per case and picked
        // per tile, with many it stays a run-time choice (the heuristic avoids those widths where the GEMM is
        // compute-bound).
        template <typename F>
        __device__ __forceinline__ static void with_straddle_case(uint32_t straddle_case, F&& f) {
            if constexpr (kNumStraddleCases == 1) {
                f(Int<0>{});
            } else if constexpr (kNumStraddleCases <= kMaxStaticStraddleCases) {
                static_for<kNumStraddleCases>([&](auto c) {
                    if (straddle_case == decltype(c)::value)
                        f(c);
                });
            } else {
                f(straddle_case);
            }
        }
        __device__ __forceinline__ static uint32_t straddle_case(uint32_t n_start) {
            return kMayStraddle and not kPairedScales ? (n_start % 128) / kScaleGcd : 0;
        }
    };
};

// ---- FP8 with 1x128 scales on both operands (SA per row, SB per column, per K block): fp8_wgrad_1d1d.cuh ----

// Bytes of one stage's scale vector of `kRows` floats: a TMA destination must be 128-byte aligned.
template <uint32_t kRows>
constexpr uint32_t fp8_wgrad_scale_stage_bytes() {
    return align_up<uint32_t>(kRows * 4, 128);
}

// SA and SB of every K block come with its stage (TMA from the stacked [K blocks, m'] / [K blocks, n'] tensors).
// Promotion: final += partial * SA(row) * SB(column).
// Config: BLOCK_M, BLOCK_N, kNumStages.
template <typename Config>
struct FP8RowColPromotion {
    static constexpr uint32_t BLOCK_M = Config::BLOCK_M;
    static constexpr uint32_t BLOCK_N = Config::BLOCK_N;
    static constexpr uint32_t kNumStages = Config::kNumStages;
    static constexpr uint32_t kNumMathWGs = num_math_threads<BLOCK_M>() / 128;
    static constexpr uint32_t kNumSubTiles = BLOCK_M / (64 * kNumMathWGs);
    static constexpr uint32_t kNumAccum = BLOCK_N / 2;  // of an m64 x BLOCK_N WGMMA accumulator per thread
    static constexpr uint32_t kSmemSAStride = fp8_wgrad_scale_stage_bytes<BLOCK_M>() / 4;  // floats per stage
    static constexpr uint32_t kSmemSBStride = fp8_wgrad_scale_stage_bytes<BLOCK_N>() / 4;
    // NOTES: shared memory bandwidth is the limit here, and every warp needs all BLOCK_N column scales of a K block
    // (16 LDS.64 per warp at BLOCK_N = 128, ~25% on top of the WGMMA and TMA traffic of a 128x128 tile). Where the
    // registers allow, they are read once per K block and kept for both sub-tiles of a 256-row tile; otherwise they
    // are read chunk by chunk during each promotion.
    static constexpr bool kPreloadSB = (kNumSubTiles + 1) * kNumAccum + kNumAccum / 2 <= 200;
    static constexpr uint32_t kNumPreloaded = kPreloadSB ? BLOCK_N / 4 : 1;  // column scales per thread

    // The shell's requirements (see the top of this file).
    static constexpr uint32_t kSmemBytes = kNumStages * (kSmemSAStride + kSmemSBStride) * 4;
    static constexpr uint32_t kStageTxBytes = BLOCK_M * 4 + BLOCK_N * 4;
    static constexpr uint32_t kNumGatherWarps = 0;
    static constexpr bool kPromotes = true;

    // The shell's scale region: SA [stages][BLOCK_M (+pad)], then SB [stages][BLOCK_N (+pad)].
    __device__ __forceinline__ static float* smem_sa(uint8_t* smem_scales) {
        return reinterpret_cast<float*>(smem_scales);
    }
    __device__ __forceinline__ static float* smem_sb(uint8_t* smem_scales) {
        return smem_sa(smem_scales) + kNumStages * kSmemSAStride;
    }

    struct Producer {
        const TmaDescriptor* tensor_map_sa;  // SA [sum_g ceil(k_g/128), m'] fp32
        const TmaDescriptor* tensor_map_sb;  // SB [sum_g ceil(k_g/128), n'] fp32
        float* smem_sa;
        float* smem_sb;

        __device__ __forceinline__ void load(const Tile& tile, uint32_t scale_row, uint32_t stage,
                                             const Barrier* bar) const {
            const auto row = static_cast<int32_t>(scale_row);
            tma_load_2d(tensor_map_sa, bar, smem_sa + stage * kSmemSAStride, static_cast<int32_t>(tile.row_base), row,
                        kTmaCacheHintEvictNormal);
            tma_load_2d(tensor_map_sb, bar, smem_sb + stage * kSmemSBStride,
                        static_cast<int32_t>(tile.n_block * BLOCK_N), row, kTmaCacheHintEvictNormal);
        }
        __device__ __forceinline__ void gather(const Tile&, uint32_t, uint32_t, uint32_t) const {}
    };

    struct Math {
        uint32_t sa_addr;  // 32-bit shared addresses of this thread's first SA / SB entries in stage 0
        uint32_t sb_addr;

        template <typename MathWarpgroup>
        __device__ __forceinline__ Math(uint8_t* smem_scales, const MathWarpgroup& wg)
            : sa_addr(smem_u32(smem_sa(smem_scales)) + wg.thread_row() * 4),
              // this thread's columns: 8c + lane_col + {0, 1}
              sb_addr(smem_u32(smem_sb(smem_scales)) + (wg.lane_idx % 4) * 2 * 4) {}

        // The column scales of `stage` (its shared address), and their preload into registers (kPreloadSB).
        __device__ __forceinline__ uint32_t column_scales(uint32_t stage) const {
            return sb_addr + stage * kSmemSBStride * 4;
        }
        __device__ __forceinline__ static void preload_columns(uint32_t sb_stage, float (&sb)[kNumPreloaded]) {
            if constexpr (kPreloadSB) {
                #pragma unroll
                for (uint32_t c = 0; c < BLOCK_N / 8; ++c)
                    ld_shared_v2_f32(sb_stage + c * 8 * 4, sb[c * 2], sb[c * 2 + 1]);
            }
        }
        // SA of this thread's two rows of sub-tile s in `stage`.
        __device__ __forceinline__ void row_scales(uint32_t stage, uint32_t s, float& sa_lo, float& sa_hi) const {
            const uint32_t sa_stage = sa_addr + (stage * kSmemSAStride + s * kNumMathWGs * 64) * 4;
            sa_lo = ld_shared_f32(sa_stage);
            sa_hi = ld_shared_f32(sa_stage + 8 * 4);
        }

        // final += partial * SA(row) * SB(column), the column scales preloaded or read chunk by chunk.
        __device__ __forceinline__ static void promote(float* final_acc, const float* partial, float sa_lo,
                                                       float sa_hi, uint32_t sb_stage,
                                                       const float (&sb)[kNumPreloaded]) {
            #pragma unroll
            for (uint32_t c = 0; c < BLOCK_N / 8; ++c) {
                if constexpr (kPreloadSB) {
                    promote_chunk(final_acc, partial, c, sa_lo, sa_hi, sb[c * 2], sb[c * 2 + 1]);
                } else {
                    float sb0, sb1;
                    ld_shared_v2_f32(sb_stage + c * 8 * 4, sb0, sb1);
                    promote_chunk(final_acc, partial, c, sa_lo, sa_hi, sb0, sb1);
                }
            }
        }
        // The 8-column chunk c with column scales (sb0, sb1).
        __device__ __forceinline__ static void promote_chunk(float* final_acc, const float* partial, uint32_t c,
                                                             float sa_lo, float sa_hi, float sb0, float sb1) {
            final_acc[c * 4 + 0] += partial[c * 4 + 0] * (sa_lo * sb0);
            final_acc[c * 4 + 1] += partial[c * 4 + 1] * (sa_lo * sb1);
            final_acc[c * 4 + 2] += partial[c * 4 + 2] * (sa_hi * sb0);
            final_acc[c * 4 + 3] += partial[c * 4 + 3] * (sa_hi * sb1);
        }
    };
};

}  // namespace deep_gemm::sm90
