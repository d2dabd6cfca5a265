#pragma once

// Hopper (sm_90a) FP8 GEMM, D[m, n] (BF16) = dequant(A[m, k]) * dequant(B[n, k])^T, with 1x128 LHS scales (1D)
// and 128x128 RHS scales (2D). Composed in the sm90 kernel shell (kernel_shell.cuh: persistent, one TMA producer
// warpgroup, one or two WGMMA math warpgroups); what is this kernel's own: the scales (SA per stage, SB per tile from
// global memory), the K loop, in which FP32 partial sums of every 128-wide K block are scaled and promoted into FP32
// registers, and the BF16 epilogue (or an e4m3 one with per-row 1 x 128 scales: kFP8Out).
// One kernel family for the dense GEMM and the two MoE grouped layouts (see GemmType in common/scheduler.cuh):
// the grouped types differ only in how tiles map to rows of A/D, to an expert's B/SB, and in what the epilogue
// may write.
// Dense decode-sized GEMMs may cut K over a cluster of Config::kClusterSplitsK = S > 1 CTAs (as the BF16 kernel):
// the S CTAs take the same tile, each K blocks / S consecutive K blocks (S divides them), and add their promoted FP32
// tiles up in shared memory in split order (ClusterSplitEpilogue, epilogue.cuh).

#include <deep_gemm/common/scheduler.cuh>
#include <deep_gemm/common/utils.cuh>
#include <deep_gemm/sm90/epilogue.cuh>
#include <deep_gemm/sm90/kernel_shell.cuh>
#include <deep_gemm/sm90/mainloop.cuh>
#include <deep_gemm/sm90/promotion.cuh>

#if defined(__CUDA_ARCH__) and not defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "deep_gemm: the sm90 kernels need the arch-specific target sm_90a (plain sm_90 has no WGMMA/setmaxnreg)"
#endif

namespace deep_gemm::sm90 {

// Shared-memory bytes of one instantiation; the host computes the same number (heuristics/sm90.py) and passes it
// as kSmemSize, and the kernel static-asserts that the two agree.
// With cluster K splits the D region holds the FP32 partial tile and its two barriers instead; the SwiGLU GEMM's
// (kPairedScales) holds SwiGLUFP8Epilogue's e4m3 tile, amaxes and barriers.
// A stage holds kSmemRowsA rows of A (KernelShell's SmemRowsA).
template <uint32_t SHAPE_K, uint32_t BLOCK_M, uint32_t BLOCK_N, uint32_t kNumStages, bool kGatherScales,
          uint32_t kClusterSplits = 1, bool kPairedScales = false, uint32_t kSmemRowsA = BLOCK_M>
constexpr uint32_t fp8_gemm_smem_size() {
    constexpr uint32_t d =
        kPairedScales ? SwiGLUFP8Epilogue<BLOCK_M, num_math_threads<BLOCK_M>()>::template smem_d_bytes<0>()
                      : align_up<uint32_t>(BLOCK_M * BLOCK_N * (kClusterSplits > 1 ? 4 : 2) +
                                               (kClusterSplits > 1 ? 16 : 0), 1024);
    constexpr uint32_t stage = kSmemRowsA * kBlockK + BLOCK_N * kBlockK + BLOCK_M * 4;
    return d + kNumStages * stage +
           fp8_gemm_smem_sb_size<SHAPE_K, BLOCK_M, BLOCK_N, kNumStages, kGatherScales, kPairedScales>() +
           kNumStages * 2 * 8;
}

// The SwiGLU epilogue's state where there is none (every kernel but kSwiGLU's).
struct NoClusterExchange {
    __device__ __forceinline__ NoClusterExchange(uint8_t*, uint32_t) {}
};

// What this kernel's epilogue writes of a tile, and where: D through the BF16 epilogue's shared-memory tile and a TMA
// store, except rows that a TMA box cannot express (a group's last, partial block: the warpgroup copies its valid rows
// itself; a batched tile of a few rows: stored straight from registers), and, contiguous, zeros in rows of another
// expert.
template <typename Config, typename Shell>
struct FP8GemmOutput {
    static constexpr GemmType kGemmType = Config::kGemmType;
    static constexpr uint32_t SHAPE_N = Config::SHAPE_N;
    static constexpr uint32_t BLOCK_M = Config::BLOCK_M;
    static constexpr uint32_t kNumSubTiles = Shell::kNumSubTiles;
    static constexpr uint32_t kNumAccum = Shell::kNumAccum;
    using Epilogue = BF16Epilogue<BLOCK_M, Config::BLOCK_N, Config::kSwizzleDBytes>;
    using FP8Epilogue = FP8RowScaleEpilogue<BLOCK_M, (Config::kFP8Out ? Config::BLOCK_N : 128)>;
    using MathWarpgroup = typename Shell::MathWarpgroup;

    const TmaDescriptor* tensor_map_d;
    const int32_t* grouped_layout;
    uint32_t shape_m;
    uint8_t* d;
    uint32_t d_row_stride;
    float* d_sf;           // Config::kFP8Out: D's scales, MN-major (d_sf[group * d_sf_stride + row])
    uint32_t d_sf_stride;

    // D's column of GEMM column n (a tile's first): with head splits (Config::kHeadSplitLeft / Mid / Right), every
    // head's left + right GEMM columns land as left | mid columns left unwritten | right (DeepGEMM's
    // fp8_gemm_nt_skip_head_mid); a tile lies inside one part (BLOCK_N divides left and right).
    __device__ __forceinline__ static uint32_t d_column(uint32_t n) {
        constexpr uint32_t kLeft = Config::kHeadSplitLeft, kMid = Config::kHeadSplitMid;
        constexpr uint32_t kHead = kLeft + Config::kHeadSplitRight;
        if constexpr (kHead == 0)
            return n;
        else
            return n + (n / kHead) * kMid + (n % kHead >= kLeft ? kMid : 0);
    }

    // Contiguous layout: the experts of this thread's rows (lane_row and lane_row + 8 of its warp, per sub-tile);
    // rows of another expert (padding -1, or an index that breaks the layout) are written as zeros.
    // NOTES: loaded before the K loop and compared only in the epilogue, so that the load latency hides behind the K
    // loop; comparing at once (inside a branch) made every math warp wait out two global-memory round trips per tile
    // before its first WGMMA (SASS; NOTES issue 14, lever 17).
    __device__ __forceinline__ void load_row_experts(const Tile& tile, const MathWarpgroup& wg,
                                                     int32_t (&row_expert)[kNumSubTiles][2]) const {
        #pragma unroll
        for (uint32_t s = 0; s < kNumSubTiles; ++s) {
            #pragma unroll
            for (uint32_t h = 0; h < 2; ++h) {
                row_expert[s][h] = 0;
                if constexpr (kGemmType == GemmType::MGroupedContiguous) {
                    const uint32_t row = tile.row_base + wg.sub_tile_row(s) + wg.warp_row + wg.lane_row + h * 8;
                    // Rows past shape_m are clipped by the TMA store: any in-bounds index will do.
                    row_expert[s][h] = __ldg(grouped_layout + min(row, shape_m - 1));
                }
            }
        }
    }

    // Contiguous: zero this thread's accumulators of rows that belong to another expert or to padding (a skip tile:
    // all of them); the other kinds keep every row.
    __device__ __forceinline__ static void zero_other_experts(const Tile& tile, float (&accum)[kNumAccum],
                                                              const int32_t (&row_expert)[2]) {
        if constexpr (kGemmType == GemmType::MGroupedContiguous) {
            const auto group = static_cast<int32_t>(tile.group);
            const bool row_ok[2] = {not tile.skip and row_expert[0] == group, not tile.skip and row_expert[1] == group};
            #pragma unroll
            for (uint32_t i = 0; i < kNumAccum; ++i)
                accum[i] = row_ok[(i / 2) % 2] ? accum[i] : 0.0f;
        }
    }

    // The SwiGLU GEMM's tile (Config::kSwiGLU; SwiGLUFP8Epilogue): the activations of its 64 output columns from
    // n_start / 2, quantised with the cluster pair's common row scales (scale group n_start / 256; masked: per group,
    // as kFP8Out's). Contiguous rows of another expert are zeros (their gate and up are), with the floor scale.
    template <typename SwiGLU>
    __device__ __forceinline__ void store_swiglu(const Tile& tile, uint32_t n_start, const MathWarpgroup& wg,
                                                 uint8_t* smem_d, float (&final_accum)[kNumSubTiles][kNumAccum],
                                                 const int32_t (&row_expert)[kNumSubTiles][2], SwiGLU& swiglu) const {
        constexpr bool kMasked = kGemmType == GemmType::MGroupedMasked;
        constexpr uint32_t kOutN = SHAPE_N / 2;
        constexpr uint32_t kColumnGroups = kOutN / 128;
        const uint32_t group_row0 = kMasked ? tile.group * shape_m : 0u;
        const uint32_t valid_rows = kMasked ? tile.valid_rows
                                            : (tile.row_base < shape_m ? shape_m - tile.row_base : 0u);
        const uint32_t out_start = n_start / 2;
        float* sf = d_sf + static_cast<uint64_t>((kMasked ? tile.group * kColumnGroups : 0u) + out_start / 128) *
                               d_sf_stride;
        #pragma unroll
        for (uint32_t s = 0; s < kNumSubTiles; ++s)
            zero_other_experts(tile, final_accum[s], row_expert[s]);
        float amax[kNumSubTiles][2];
        swiglu.template activate<Config::kActivationClampBits>(final_accum, wg.lane_idx, amax);
        wg.store_tile(
            [&] {
                #pragma unroll
                for (uint32_t s = 0; s < kNumSubTiles; ++s)
                    swiglu.write_warp(smem_d, final_accum[s], amax[s], wg.sub_tile_row(s) + wg.warp_row, wg.lane_idx,
                                      sf, tile.row_base - group_row0, valid_rows);
            },
            [&](bool is_leader) {
                if (kMasked and valid_rows < BLOCK_M) {
                    #pragma unroll
                    for (uint32_t s = 0; s < kNumSubTiles; ++s)
                        SwiGLU::copy_rows(smem_d, wg.sub_tile_row(s), valid_rows, d, d_row_stride, tile.row_base,
                                          out_start, wg.wg_thread);
                } else if (is_leader) {
                    #pragma unroll
                    for (uint32_t s = 0; s < kNumSubTiles; ++s)
                        SwiGLU::store_rows(tensor_map_d, smem_d, wg.sub_tile_row(s), tile.row_base, out_start);
                    tma_store_commit();
                }
            });
    }

    // Write the tile's final accumulators (per warpgroup; `smem_d` the shell's D tile; `n_start` = its first column).
    __device__ __forceinline__ void store(const Tile& tile, uint32_t n_start, const MathWarpgroup& wg, uint8_t* smem_d,
                                          float (&final_accum)[kNumSubTiles][kNumAccum],
                                          const int32_t (&row_expert)[kNumSubTiles][2]) const {
        if constexpr (Config::kFP8Out) {
            // Dense, contiguous or masked (static_assert in the kernel). Rows whose scales are stored: dense and
            // contiguous, those below shape_m (the TMA store clips D's; contiguous rows of another expert are
            // zeros, with the floor scale, as the BF16 output's zeros); masked, those below the group's masked_m
            // (valid_rows), whose last, partial block the warpgroup copies itself. SFD is MN-major (masked: per
            // group, [G, m_max, ceil(n/128)] as get_mn_major_tma_aligned_tensor lays it out, group g's column
            // group c at (g * groups + c) * d_sf_stride).
            constexpr bool kMasked = kGemmType == GemmType::MGroupedMasked;
            constexpr uint32_t kColumnGroups = ceil_div(SHAPE_N, FP8Epilogue::kGroup);
            const uint32_t group_row0 = kMasked ? tile.group * shape_m : 0u;  // D row of the group's row 0
            // (A contiguous phantom M block lies past shape_m: no rows.)
            const uint32_t valid_rows = kMasked ? tile.valid_rows
                                                : (tile.row_base < shape_m ? shape_m - tile.row_base : 0u);
            const uint32_t first_group = (kMasked ? tile.group * kColumnGroups : 0u) + n_start / FP8Epilogue::kGroup;
            wg.store_tile(
                [&] {
                    #pragma unroll
                    for (uint32_t s = 0; s < kNumSubTiles; ++s) {
                        zero_other_experts(tile, final_accum[s], row_expert[s]);
                        FP8Epilogue::template write_warp<SHAPE_N>(smem_d, final_accum[s],
                                                                  wg.sub_tile_row(s) + wg.warp_row, wg.lane_idx,
                                                                  d_sf, d_sf_stride, first_group,
                                                                  tile.row_base - group_row0, valid_rows, n_start);
                    }
                },
                [&](bool is_leader) {
                    if (kMasked and valid_rows < BLOCK_M) {
                        #pragma unroll
                        for (uint32_t s = 0; s < kNumSubTiles; ++s)
                            FP8Epilogue::copy_rows(smem_d, wg.sub_tile_row(s), valid_rows, d, d_row_stride,
                                                   tile.row_base, n_start, SHAPE_N, wg.wg_thread);
                    } else if (is_leader) {
                        #pragma unroll
                        for (uint32_t s = 0; s < kNumSubTiles; ++s)
                            FP8Epilogue::store_rows(tensor_map_d, smem_d, wg.sub_tile_row(s), tile.row_base, n_start);
                        tma_store_commit();
                    }
                });
            return;
        }
        // NOTES: a batched tile of a few valid rows (decode) stores them from registers: its smem round trip and
        // barriers sat on every tile's critical path at m <= 16 (H200: 128x1x512x128 7.2 -> 6.0 us). Only with
        // gathered scales: otherwise the epilogue's warpgroup barrier is what publishes the next tile's SB
        // (store_tile_sb) to the whole warpgroup, and skipping it gave masked GEMMs stale scales (GPU suite: NaN and
        // non-deterministic results).
        constexpr uint32_t kDirectStoreRows = 16;
        if (Config::kGatherScales and tile.valid_rows <= kDirectStoreRows) {
            #pragma unroll
            for (uint32_t s = 0; s < kNumSubTiles; ++s)
                Epilogue::store_rows_direct(final_accum[s], wg.sub_tile_row(s) + wg.warp_row, wg.lane_idx,
                                            tile.valid_rows, d, d_row_stride, tile.row_base, n_start, SHAPE_N);
            return;
        }
        wg.store_tile(
            [&] {
                #pragma unroll
                for (uint32_t s = 0; s < kNumSubTiles; ++s) {
                    zero_other_experts(tile, final_accum[s], row_expert[s]);
                    Epilogue::write_warp(smem_d, final_accum[s], wg.sub_tile_row(s) + wg.warp_row, wg.lane_idx);
                }
            },
            [&](bool is_leader) {
                if (has_group_row_ends(kGemmType) and tile.valid_rows < BLOCK_M) {
                    // A group's last block: rows past the group's end must stay untouched, which a TMA box cannot
                    // express, so the warpgroup copies its valid rows out of smem_d itself (16-byte chunks).
                    #pragma unroll
                    for (uint32_t s = 0; s < kNumSubTiles; ++s)
                        Epilogue::copy_rows(smem_d, wg.sub_tile_row(s), tile.valid_rows, d, d_row_stride,
                                            tile.row_base, n_start, SHAPE_N, wg.wg_thread);
                } else if (is_leader) {
                    #pragma unroll
                    for (uint32_t s = 0; s < kNumSubTiles; ++s)
                        Epilogue::store_rows(tensor_map_d, smem_d, wg.sub_tile_row(s), tile.row_base,
                                             d_column(n_start));
                    tma_store_commit();
                }
            });
    }
};

// Config (see kernel_shell.cuh): kGemmType, SHAPE_N, SHAPE_K, BLOCK_M, BLOCK_N, kNumStages, kNumMulticast,
// kMulticastOnA, kSwizzleDBytes, kSmemSize, kPsumAlignment (psum layout: the row alignment of the experts' starts;
// 0 for the other types), kGatherScales (the producer warpgroup's gather warp copies each stage's scales with
// cp.async: SA's BLOCK_M values through `sa` and its three strides, whatever its layout, instead of `tensor_map_sa`,
// so the caller's row-major per-token scales need no conversion; and SB's one or two values of the K block, so
// that no tile waits for its SB on a global load: with short K loops that load's latency was exposed per tile),
// kLoadRowsA (rows of A each stage loads: BLOCK_M, or fewer when no group has more rows (batched GEMMs with
// m < BLOCK_M, dense ones without multicast); the rest of the stage's A tile keeps stale data, which only reaches
// rows the epilogue does not write), kOneMBlock (batched GEMMs with m <= BLOCK_M: one M block per batch, a tile walk without run-time
// divisions; TileScheduler), kClusterSplitsK (1, or 2-8 CTAs of a cluster cutting a dense tile's K; the launch's
// cluster size), kHeadSplitLeft / kHeadSplitMid / kHeadSplitRight (0, or a dense GEMM's head splits:
// FP8GemmOutput::d_column; D is [m, n + n / (left + right) * mid]), kFP8Out (a dense or M-grouped GEMM whose D is e4m3
// with one FP32 scale per row and 128 columns, computed in the epilogue: FP8RowScaleEpilogue; `tensor_map_d` is then
// over D's bytes with box 128 x 64 and the 128-byte swizzle, and `d_sf` / `d_sf_stride` address the MN-major
// scales), kSwiGLU with kActivationClampBits (the MoE gate/up GEMM: B's gate and up rows interleaved in runs of 64, D
// [m, n / 2] e4m3 = the 1 x 128 quantised SiLU(gate) * up, clamped by the float of those bits unless it is +inf;
// SwiGLUFP8Epilogue).
// Grouped launches: A / D hold all experts' rows ([m_sum, *], or [G * m_max, *] for masked), B is [G * n, k],
// SB is [G, ceil(n/128), ceil(k/128)], and SA is [ceil(k/128), m_sum'] (contiguous) or [G * ceil(k/128), m_max']
// (masked), MN-major; the psum layout is addressed like contiguous. `grouped_layout` is m_indices (contiguous),
// masked_m (masked) or the running row counts (psum), `num_groups` = G.
// Batched: A / D [B * m, *] (batch b's rows from b * m), B [B * n, k], SB [B, ceil(n/128), ceil(k/128)], SA gathered.
// `d` / `d_row_stride` (elements) address D for the stores a TMA box cannot make (partial tiles of a group).
template <typename Config>
__global__ void __launch_bounds__(kernel_num_threads<Config>(), 1)
fp8_gemm_1d2d_impl(const __grid_constant__ TmaDescriptor tensor_map_a,   // A  [m, k] e4m3, K-major
                   const __grid_constant__ TmaDescriptor tensor_map_b,   // B  [n, k] e4m3, K-major
                   const __grid_constant__ TmaDescriptor tensor_map_sa,  // SA [ceil(k/128), m'] fp32, MN-major
                   const __grid_constant__ TmaDescriptor tensor_map_d,   // D  [m, n] bf16
                   const float* __restrict__ sb,                        // SB [ceil(n/128), ceil(k/128)] fp32
                   const uint32_t shape_m,                              // m (dense, contiguous) or m_max
                   const int32_t* __restrict__ grouped_layout,          // grouped only (else unused)
                   const uint32_t num_groups,
                   uint8_t* __restrict__ d,
                   const uint32_t d_row_stride,
                   const float* __restrict__ sa,         // kGatherScales: SA[g][row][k block] at these strides
                   const uint32_t sa_group_stride,      // (elements; the group stride is 0 where rows are
                   const uint32_t sa_row_stride,        // numbered across groups: dense, contiguous, psum)
                   const uint32_t sa_k_stride,
                   float* __restrict__ d_sf,             // kFP8Out: D's scales, MN-major (per group if masked)
                   const uint32_t d_sf_stride) {
#if defined(__CUDA_ARCH__)
    // ---- Compile-time shape and the composition: FP8 operands, per-128-K promotion, BF16 epilogue ----
    constexpr GemmType kGemmType = Config::kGemmType;
    constexpr uint32_t SHAPE_N = Config::SHAPE_N;
    constexpr uint32_t SHAPE_K = Config::SHAPE_K;
    constexpr uint32_t BLOCK_M = Config::BLOCK_M;
    constexpr uint32_t BLOCK_N = Config::BLOCK_N;
    constexpr uint32_t kNumStages = Config::kNumStages;
    constexpr uint32_t kNumMulticast = Config::kNumMulticast;
    constexpr bool kMulticastOnA = Config::kMulticastOnA;
    constexpr bool kGatherScales = Config::kGatherScales;
    constexpr uint32_t kClusterSplits = Config::kClusterSplitsK;
    constexpr bool kSplitsInCluster = kClusterSplits > 1;
    using Promotion = FP8BlockPromotion<Config>;
    constexpr uint32_t kNumKBlocks = Promotion::kNumKBlocks;
    constexpr uint32_t kSplitKBlocks = kNumKBlocks / kClusterSplits;  // K blocks per cluster split
    using TileEpilogue = BF16Epilogue<BLOCK_M, BLOCK_N, Config::kSwizzleDBytes>;
    using SplitEpilogue = ClusterSplitEpilogue<kClusterSplits < 2 ? 2 : kClusterSplits, BLOCK_M, BLOCK_N,
                                               num_math_threads<BLOCK_M>(), false, false>;
    using SwiGLU = SwiGLUFP8Epilogue<BLOCK_M, num_math_threads<BLOCK_M>()>;
    using Epilogue = typename Conditional<kSplitsInCluster, SplitEpilogue,
                                          typename Conditional<Config::kSwiGLU, SwiGLU, TileEpilogue>::Type>::Type;
    using Shell = KernelShell<Config, FP8E4M3Operands, Promotion, Epilogue>;
    using KLoop = PromotedKLoop<Shell, Promotion, kSplitKBlocks>;
    constexpr uint32_t kNumSubTiles = Shell::kNumSubTiles;
    constexpr uint32_t kNumAccum = Shell::kNumAccum;
    constexpr uint32_t kStageTxBytes = Shell::stage_tx_bytes(Config::kLoadRowsA);

    DG_STATIC_ASSERT(BLOCK_N % 8 == 0 and BLOCK_N >= 8 and BLOCK_N <= 256,
                     "BLOCK_N must be a multiple of 8 in [8, 256]");
    DG_STATIC_ASSERT(kNumSubTiles * kNumAccum <= 128, "final accumulators would not fit in the register budget");
    DG_STATIC_ASSERT(SHAPE_N > 0 and SHAPE_K > 0, "empty problems are handled on the host");
    DG_STATIC_ASSERT(kGemmType != GemmType::MGroupedContiguous or BLOCK_M <= 128,
                     "contiguous grouped tiles must not span two 128-row expert segments");
    DG_STATIC_ASSERT(not has_group_row_ends(kGemmType) or kNumMulticast == 1 or kMulticastOnA or
                     kGemmType == GemmType::MGroupedMasked,
                     "psum / batched GEMMs multicast only A (the pair shares the M block, hence the group)");
    DG_STATIC_ASSERT(kGemmType != GemmType::Batched or kGatherScales, "the batched GEMM reads SA as the caller has it");
    DG_STATIC_ASSERT(Config::kLoadRowsA % 8 == 0 and Config::kLoadRowsA <= BLOCK_M and
                     (Config::kLoadRowsA == BLOCK_M or kGemmType == GemmType::Batched or
                      (kGemmType == GemmType::Normal and kNumMulticast == 1)),
                     "A rows per stage: a multiple of 8 up to BLOCK_M; fewer only for batched or unshared dense "
                     "GEMMs with m < it");
    DG_STATIC_ASSERT(Config::kSmemRowsA == Config::kLoadRowsA, "a stage's A slot holds exactly the rows it loads");
    DG_STATIC_ASSERT((kGemmType == GemmType::MGroupedPsum) == (Config::kPsumAlignment > 0),
                     "kPsumAlignment is set exactly for the psum layout");
    DG_STATIC_ASSERT(Config::kSmemSize == (fp8_gemm_smem_size<SHAPE_K, BLOCK_M, BLOCK_N, kNumStages, kGatherScales,
                                                              kClusterSplits, Config::kSwiGLU, Config::kSmemRowsA>()),
                     "host and device disagree on the shared-memory size");
    DG_STATIC_ASSERT(kClusterSplits >= 1 and kClusterSplits <= 8, "cluster K splits: 1 (none) to 8 CTAs");
    DG_STATIC_ASSERT(not Shell::kMulticastA or ceil_div(SHAPE_N, BLOCK_N) % 2 == 0,
                     "A multicast pairs N blocks: their count must be even (the host picks it only then)");
    DG_STATIC_ASSERT(Config::kHeadSplitLeft + Config::kHeadSplitRight == 0 or
                         (kGemmType == GemmType::Normal and not kSplitsInCluster and Config::kHeadSplitLeft > 0 and
                          Config::kHeadSplitRight > 0 and Config::kHeadSplitLeft % BLOCK_N == 0 and
                          Config::kHeadSplitRight % BLOCK_N == 0 and SHAPE_N % (Config::kHeadSplitLeft +
                                                                             Config::kHeadSplitRight) == 0),
                     "head splits: a dense GEMM stored by TMA whose tiles lie inside one head part");
    DG_STATIC_ASSERT(not Config::kFP8Out or ((kGemmType == GemmType::Normal or
                                              kGemmType == GemmType::MGroupedContiguous or
                                              kGemmType == GemmType::MGroupedMasked) and not kSplitsInCluster and
                                             Config::kHeadSplitLeft + Config::kHeadSplitRight == 0 and
                                             BLOCK_N % 128 == 0),
                     "FP8 output: a dense, contiguous or masked GEMM whose tiles hold whole 128-column scale groups");
    DG_STATIC_ASSERT(not Config::kSwiGLU or (Config::kFP8Out and (kGemmType == GemmType::MGroupedContiguous or
                                                                  kGemmType == GemmType::MGroupedMasked) and
                                             BLOCK_N == 128 and BLOCK_M <= 128 and kNumMulticast == 2 and
                                             kMulticastOnA and SHAPE_N % 256 == 0),
                     "SwiGLU: a contiguous or masked GEMM with an FP8 d, 128-wide tiles paired over N by A multicast "
                     "(the two halves of a 1 x 128 scale group), whole 128-row gate blocks");
    DG_STATIC_ASSERT(not kSplitsInCluster or (kGemmType == GemmType::Normal and kNumMulticast == 1 and
                                              kNumKBlocks % kClusterSplits == 0),
                     "cluster K splits: dense GEMMs without multicast, the split count dividing the K blocks");
    // Grouped with B multicast: the pair's two M blocks may belong to two experts, or (masked) two N blocks (each
    // CTA then loads its own B), or one may be padding (contiguous) or a phantom (masked, TileScheduler). Both CTAs
    // must walk the same stages (a multicast lands in the peer's stage and barrier of the same index), so padding
    // blocks run the pipeline too and are written as zeros, phantoms not at all (valid_rows 0).
    constexpr bool kPairMayDiffer = (kGemmType == GemmType::MGroupedContiguous or
                                     kGemmType == GemmType::MGroupedMasked) and Shell::kMulticastB;
    constexpr bool kSkipPadding = kGemmType == GemmType::MGroupedContiguous and not kPairMayDiffer;

    extern __shared__ __align__(1024) uint8_t smem[];
    const Shell shell(smem);
    if constexpr (Config::kSwiGLU) {
        if (Shell::is_tma_thread())
            SwiGLU::init(shell.smem_d);  // published with the shell's barriers by its cluster sync
    }
    shell.setup(&tensor_map_a, &tensor_map_b, &tensor_map_sa, &tensor_map_d);
    using Scheduler = typename Shell::template Scheduler<kGemmType, SHAPE_N, Config::kPsumAlignment,
                                                         Config::kOneMBlock, kClusterSplits>;
    // Cluster K splits: this CTA's first K block (split = cluster rank = blockIdx.x % kClusterSplits, 1-D cluster).
    const uint32_t k_base = kSplitsInCluster ? blockIdx.x % kClusterSplits * kSplitKBlocks : 0u;
    auto make_scheduler = [&] { return Scheduler(shape_m, grouped_layout, num_groups); };

    if (Shell::is_producer()) {
        auto operands = [&](const Tile& tile) {
            TileOperands ops;
            ops.map_a = &tensor_map_a;
            ops.map_b = &tensor_map_b;
            ops.m_idx = static_cast<int32_t>(tile.row_base);
            ops.n_idx = static_cast<int32_t>(tile.group * SHAPE_N + tile.n_block * BLOCK_N);
            // NOTES: a compile-time trip count with a run-time first block made the producer's loop unroll fully
            // and precompute every stage's coordinates, past its 40 registers (ptxas spilled 0.5 KB at 14 blocks).
            ops.num_k_blocks = kSplitsInCluster ? opaque_u32(kSplitKBlocks) : kSplitKBlocks;
            ops.first_k_block = k_base;
            // Masked SA stacks the experts' [ceil(k/128), m_max'] blocks along K.
            // psum: as contiguous.
            ops.scale_row = kGemmType == GemmType::MGroupedMasked ? tile.group * kNumKBlocks : k_base;
            ops.skip = kSkipPadding and tile.skip;
            ops.peer_shares_b = not kPairMayDiffer or tile.pair_shares_b;
            return ops;
        };
        const typename Promotion::Producer scales{&tensor_map_sa, Promotion::smem_sa(shell.smem_scales),
                                                  Promotion::smem_sb(shell.smem_scales), sa, sa_group_stride,
                                                  sa_row_stride, sa_k_stride, sb, shape_m};
        shell.template produce<kStageTxBytes>(make_scheduler, operands, scales);
    } else {
        const auto wg = shell.math_warpgroup();
        typename Promotion::Math promotion(shell.smem_scales, sb, wg);
        const FP8GemmOutput<Config, Shell> output{&tensor_map_d, grouped_layout, shape_m, d, d_row_stride, d_sf,
                                                  d_sf_stride};
        SplitEpilogue split_epilogue(shell.smem_d, threadIdx.x);  // used with cluster K splits only
        typename Conditional<Config::kSwiGLU, SwiGLU, NoClusterExchange>::Type swiglu(shell.smem_d, threadIdx.x);
        float partial[KLoop::kNumPartials][kNumAccum];
        float final_accum[kNumSubTiles][kNumAccum];

        auto scheduler = make_scheduler();
        Tile tile;
        typename Shell::Stages stages;
        uint32_t sb_buf = 0;
        bool has_tile = scheduler.next(tile);
        if (has_tile) {
            float regs[Promotion::kSBPerThread];
            promotion.fetch_tile_sb(tile, kSkipPadding and tile.skip, regs);
            promotion.store_tile_sb(0, regs);
            wg.sync();
        }
        while (has_tile) {
            // NOTES: computed once, here, and passed on: recomputed from `tile` in the epilogue, it was rematerialised
            // inside the K loop (an R2UR per chunk at 64x56).
            const uint32_t n_start = tile.n_block * BLOCK_N;
            promotion.begin_tile(sb_buf);
            if constexpr (kSplitsInCluster)
                promotion.begin_split(k_base);
            Tile next_tile;
            const bool has_next = scheduler.next(next_tile);
            float next_sb[Promotion::kSBPerThread];
            if (has_next)
                promotion.fetch_tile_sb(next_tile, kSkipPadding and next_tile.skip, next_sb);
            int32_t row_expert[kNumSubTiles][2];
            output.load_row_experts(tile, wg, row_expert);
            const uint32_t straddle_case = Promotion::Math::straddle_case(n_start);

            #pragma unroll
            for (uint32_t s = 0; s < kNumSubTiles; ++s)
                #pragma unroll
                for (uint32_t i = 0; i < kNumAccum; ++i)
                    final_accum[s][i] = 0;
            // A padding block does no MMA work; the epilogue writes zeros.
            if (not (kSkipPadding and tile.skip)) {
                KLoop k_loop{shell, wg, promotion, stages, partial, final_accum};
                Promotion::Math::with_straddle_case(straddle_case, [&](auto straddle) { k_loop.run(straddle); });
            }

            // ---- Epilogue (per warpgroup) ----
            if (has_next)
                promotion.store_tile_sb(sb_buf ^ 1, next_sb);
            if constexpr (kSplitsInCluster) {
                // The cluster's partial tiles added up, then the warpgroup barrier that publishes the next tile's RHS
                // scales (output.store's, otherwise).
                split_epilogue.reduce_to_d(&final_accum[0][0], wg, tile.row_base, n_start, shape_m, SHAPE_N, d,
                                           d_row_stride);
                wg.sync();
            } else if constexpr (Config::kSwiGLU) {
                output.store_swiglu(tile, n_start, wg, shell.smem_d, final_accum, row_expert, swiglu);
            } else {
                output.store(tile, n_start, wg, shell.smem_d, final_accum, row_expert);
            }
            tile = next_tile, has_tile = has_next, sb_buf ^= 1;
        }
        wg.finish();
    }
    Shell::teardown();
#endif
}

}  // namespace deep_gemm::sm90
