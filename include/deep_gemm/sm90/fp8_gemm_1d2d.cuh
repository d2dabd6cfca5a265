#pragma once

// Hopper (sm_90a) FP8 GEMM, D[m, n] (BF16) = dequant(A[m, k]) * dequant(B[n, k])^T, with 1x128 LHS scales (1D)
// and 128x128 RHS scales (2D). Composed in the sm90 kernel shell (kernel_shell.cuh: persistent, one TMA producer
// warpgroup, one or two WGMMA math warpgroups); what is this kernel's own: the scales (SA per stage, SB per tile from
// global memory), the K loop, in which FP32 partial sums of every 128-wide K block are scaled and promoted into FP32
// registers, and the BF16 epilogue.
// One kernel family for the dense GEMM and the two MoE grouped layouts (see GemmType in common/scheduler.cuh):
// the grouped types differ only in how tiles map to rows of A/D, to an expert's B/SB, and in what the epilogue
// may write.

#include <deep_gemm/common/scheduler.cuh>
#include <deep_gemm/common/utils.cuh>
#include <deep_gemm/sm90/epilogue.cuh>
#include <deep_gemm/sm90/kernel_shell.cuh>

#if defined(__CUDA_ARCH__) and not defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "deep_gemm: the sm90 kernels need the arch-specific target sm_90a (plain sm_90 has no WGMMA/setmaxnreg)"
#endif

namespace deep_gemm::sm90 {

// Whether a BLOCK_N-wide tile can span two 128-wide RHS scale blocks.
template <uint32_t BLOCK_N>
constexpr bool fp8_gemm_may_straddle() {
    return 128 % BLOCK_N != 0;
}

// Bytes of the RHS scales in shared memory: per tile, [math warpgroups][2 buffers][1 or 2 scale blocks][K blocks]
// fp32; with gathered scales, per stage, [stages][2] fp32 (the K block's value for the tile's one or two blocks).
template <uint32_t SHAPE_K, uint32_t BLOCK_M, uint32_t BLOCK_N, uint32_t kNumStages, bool kGatherScales>
constexpr uint32_t fp8_gemm_smem_sb_size() {
    constexpr uint32_t kNumKBlocks = ceil_div(SHAPE_K, kBlockK);
    return kGatherScales ? align_up<uint32_t>(kNumStages * 2 * 4, 8)
                         : align_up<uint32_t>(num_math_threads<BLOCK_M>() / 128 * 2 * kNumKBlocks *
                                                  (fp8_gemm_may_straddle<BLOCK_N>() ? 2 : 1) * 4, 8);
}

// Shared-memory bytes of one instantiation; the host computes the same number (heuristics/sm90.py) and passes it
// as kSmemSize, and the kernel static-asserts that the two agree.
template <uint32_t SHAPE_K, uint32_t BLOCK_M, uint32_t BLOCK_N, uint32_t kNumStages, bool kGatherScales>
constexpr uint32_t fp8_gemm_smem_size() {
    constexpr uint32_t d = align_up<uint32_t>(BLOCK_M * BLOCK_N * 2, 1024);
    constexpr uint32_t stage = BLOCK_M * kBlockK + BLOCK_N * kBlockK + BLOCK_M * 4;
    return d + kNumStages * stage + fp8_gemm_smem_sb_size<SHAPE_K, BLOCK_M, BLOCK_N, kNumStages, kGatherScales>() +
           kNumStages * 2 * 8;
}

// Config (see kernel_shell.cuh): kGemmType, SHAPE_N, SHAPE_K, BLOCK_M, BLOCK_N, kNumStages, kNumMulticast,
// kMulticastOnA, kSwizzleDBytes, kSmemSize, kPsumAlignment (psum layout: the row alignment of the experts' starts;
// 0 for the other types), kGatherScales (the producer warpgroup's gather warp copies each stage's scales with
// cp.async: SA's BLOCK_M values through `sa` and its three strides, whatever its layout, instead of `tensor_map_sa`,
// so the caller's row-major per-token scales need no conversion; and SB's one or two values of the K block, so
// that no tile waits for its SB on a global load: with short K loops that load's latency was exposed per tile),
// kLoadRowsA (rows of A each stage loads: BLOCK_M, or fewer when no group has more rows (batched GEMMs with
// m < BLOCK_M); the rest of the stage's A tile keeps stale data, which only reaches rows the epilogue does not
// write), kOneMBlock (batched GEMMs with m <= BLOCK_M: one M block per batch, a tile walk without run-time
// divisions; TileScheduler).
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
                   const uint32_t sa_k_stride) {
#if defined(__CUDA_ARCH__)
    // ---- Compile-time shape ----
    constexpr GemmType kGemmType = Config::kGemmType;
    constexpr uint32_t SHAPE_N = Config::SHAPE_N;
    constexpr uint32_t SHAPE_K = Config::SHAPE_K;
    constexpr uint32_t BLOCK_M = Config::BLOCK_M;
    constexpr uint32_t BLOCK_N = Config::BLOCK_N;
    constexpr uint32_t kNumStages = Config::kNumStages;
    constexpr uint32_t kNumMulticast = Config::kNumMulticast;
    constexpr bool kMulticastOnA = Config::kMulticastOnA;
    constexpr bool kGatherScales = Config::kGatherScales;
    constexpr uint32_t kNumMathWGs = num_math_threads<BLOCK_M>() / 128;
    constexpr uint32_t kNumKBlocks = ceil_div(SHAPE_K, kBlockK);
    constexpr uint32_t kNumSBBlocks = ceil_div(SHAPE_N, 128u);
    constexpr bool kMayStraddle = fp8_gemm_may_straddle<BLOCK_N>();
    constexpr uint32_t kScaleGcd = const_gcd(BLOCK_N, 128u);
    // Where a tile crosses into the next 128-wide RHS scale block depends on n_start % 128, a multiple of
    // gcd(BLOCK_N, 128): that many straddle cases, each with its own split column.
    constexpr uint32_t kNumStraddleCases = kMayStraddle ? 128 / kScaleGcd : 1;
    constexpr uint32_t kMaxStaticStraddleCases = 4;
    using Epilogue = BF16Epilogue<BLOCK_M, BLOCK_N, Config::kSwizzleDBytes>;

    // ---- Shared memory: the shell's layout (kernel_shell.cuh), with SA per stage and SB per tile as scales ----
    constexpr uint32_t kSmemSABytes = BLOCK_M * 4;  // [BLOCK_M] fp32
    constexpr uint32_t kNumSBPerTile = kNumKBlocks * (kMayStraddle ? 2 : 1);
    constexpr uint32_t kSmemSBBytes = fp8_gemm_smem_sb_size<SHAPE_K, BLOCK_M, BLOCK_N, kNumStages, kGatherScales>();
    using Shell = KernelShell<Config, align_up<uint32_t>(Epilogue::kSmemBytes, 1024),
                              kNumStages * kSmemSABytes + kSmemSBBytes, kGatherScales ? 1 : 0>;
    using WGMMA = typename Shell::WGMMA;
    constexpr uint32_t kNumSubTiles = Shell::kNumSubTiles;
    constexpr uint32_t kNumAccum = Shell::kNumAccum;
    constexpr uint32_t kStageTxBytes =
        Config::kLoadRowsA * kBlockK + Shell::kSmemBBytes + (kGatherScales ? 0 : kSmemSABytes);

    DG_STATIC_ASSERT(BLOCK_N % 8 == 0 and BLOCK_N >= 8 and BLOCK_N <= 256,
                     "BLOCK_N must be a multiple of 8 in [8, 256]");
    DG_STATIC_ASSERT(BLOCK_N <= 128 + const_gcd(BLOCK_N, 128u),
                     "a BLOCK_N tile may touch at most two 128-wide RHS scale blocks");
    DG_STATIC_ASSERT(kNumSubTiles * kNumAccum <= 128, "final accumulators would not fit in the register budget");
    DG_STATIC_ASSERT(SHAPE_N > 0 and SHAPE_K > 0, "empty problems are handled on the host");
    DG_STATIC_ASSERT(kGemmType != GemmType::MGroupedContiguous or BLOCK_M <= 128,
                     "contiguous grouped tiles must not span two 128-row expert segments");
    DG_STATIC_ASSERT(not has_group_row_ends(kGemmType) or kNumMulticast == 1 or kMulticastOnA or
                     kGemmType == GemmType::MGroupedMasked,
                     "psum / batched GEMMs multicast only A (the pair shares the M block, hence the group)");
    DG_STATIC_ASSERT(kGemmType != GemmType::Batched or kGatherScales, "the batched GEMM reads SA as the caller has it");
    DG_STATIC_ASSERT(Config::kLoadRowsA % 8 == 0 and Config::kLoadRowsA <= BLOCK_M and
                     (Config::kLoadRowsA == BLOCK_M or kGemmType == GemmType::Batched),
                     "A rows per stage: a multiple of 8 up to BLOCK_M; fewer only for batched GEMMs with m < it");
    DG_STATIC_ASSERT((kGemmType == GemmType::MGroupedPsum) == (Config::kPsumAlignment > 0),
                     "kPsumAlignment is set exactly for the psum layout");
    DG_STATIC_ASSERT(Config::kSmemSize == (fp8_gemm_smem_size<SHAPE_K, BLOCK_M, BLOCK_N, kNumStages, kGatherScales>()),
                     "host and device disagree on the shared-memory size");
    constexpr bool kGrouped = kGemmType != GemmType::Normal;
    // Grouped with B multicast: the pair's two M blocks may belong to two experts, or (masked) two N blocks (each
    // CTA then loads its own B), or one may be padding (contiguous) or a phantom (masked, TileScheduler). Both CTAs
    // must walk the same stages (a multicast lands in the peer's stage and barrier of the same index), so padding
    // blocks run the pipeline too and are written as zeros, phantoms not at all (valid_rows 0).
    constexpr bool kPairMayDiffer = (kGemmType == GemmType::MGroupedContiguous or
                                     kGemmType == GemmType::MGroupedMasked) and Shell::kMulticastB;
    constexpr bool kSkipPadding = kGemmType == GemmType::MGroupedContiguous and not kPairMayDiffer;

    extern __shared__ __align__(1024) uint8_t smem[];
    const Shell shell(smem);
    float* smem_sa = reinterpret_cast<float*>(shell.smem_scales);  // [stages][BLOCK_M]
    // [math WGs][2 buffers][kNumSBPerTile], or with gathered scales [stages][2]
    float* smem_sb = smem_sa + kNumStages * BLOCK_M;
    shell.setup(&tensor_map_a, &tensor_map_b, &tensor_map_sa, &tensor_map_d);
    using Scheduler =
        typename Shell::template Scheduler<kGemmType, SHAPE_N, Config::kPsumAlignment, Config::kOneMBlock>;
    auto make_scheduler = [&] { return Scheduler(shape_m, grouped_layout, num_groups); };

    if (Shell::is_producer()) {
        auto operands = [&](const Tile& tile) {
            TileOperands ops;
            ops.map_a = &tensor_map_a;
            ops.map_b = &tensor_map_b;
            ops.m_idx = static_cast<int32_t>(tile.row_base);
            ops.n_idx = static_cast<int32_t>(tile.group * SHAPE_N + tile.n_block * BLOCK_N);
            ops.num_k_blocks = kNumKBlocks;
            // Masked SA stacks the experts' [ceil(k/128), m_max'] blocks along K.
            ops.scale_row = kGemmType == GemmType::MGroupedMasked ? tile.group * kNumKBlocks : 0;  // psum: as contiguous
            ops.skip = kSkipPadding and tile.skip;
            ops.peer_shares_b = not kPairMayDiffer or tile.pair_shares_b;
            return ops;
        };
        auto load_sa = [&](const Tile& tile, uint32_t scale_row, uint32_t stage, const Barrier* bar) {
            if constexpr (not kGatherScales) {
                const uint32_t sa_col = kGemmType == GemmType::MGroupedMasked ? tile.m_block * BLOCK_M : tile.row_base;
                tma_load_2d(&tensor_map_sa, bar, smem_sa + stage * BLOCK_M, static_cast<int32_t>(sa_col),
                            static_cast<int32_t>(scale_row), Shell::kCacheHint);
            }
        };
        // kGatherScales: each lane copies the scales of rows lane, lane + 32, ... of the tile that exist (the others
        // keep stale values, which only reach rows the epilogue does not write).
        auto gather_sa = [&](const Tile& tile, uint32_t k_block, uint32_t stage, uint32_t lane) {
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
                    const uint32_t block = min(tile.n_block * BLOCK_N / 128 + lane, kNumSBBlocks - 1);
                    cp_async_4b(smem_u32(smem_sb + stage * 2 + lane),
                                sb + (tile.group * kNumSBBlocks + block) * kNumKBlocks + k_block);
                }
            }
        };
        shell.template produce<kStageTxBytes>(make_scheduler, operands, load_sa, gather_sa);
    } else {
        const auto wg = shell.math_warpgroup();
        // The 32-bit shared address of this thread's first SA entry in stage 0.
        const uint32_t sa_addr = smem_u32(smem_sa) + wg.thread_row() * 4;

        uint32_t tile_sb_addr = 0;  // shared address of this tile's RHS scales (set per tile below)
        // RHS scales of K block k_block for the tile's first and (if it straddles) second 128-wide scale block.
        // NOTES: this warpgroup wrote them itself (store_sb), so they are read before the stage's full-barrier
        // wait, once per K block for all sub-tiles.
        struct RhsScales {
            float b0, b1;
        };
        auto load_sb = [&](uint32_t k_block) {
            if constexpr (kGatherScales)
                return RhsScales{0.0f, 0.0f};  // in the stage instead: `stage_sb` once it is full
            const float sb0 = ld_shared_f32(tile_sb_addr + k_block * 4);
            const float sb1 = kMayStraddle ? ld_shared_f32(tile_sb_addr + (kNumKBlocks + k_block) * 4) : sb0;
            return RhsScales{sb0, sb1};
        };
        // Gathered scales: the K block's RHS scales from its (full) stage.
        auto stage_sb = [&](uint32_t stage, const RhsScales& sb) {
            if constexpr (not kGatherScales)
                return sb;
            const uint32_t addr = smem_u32(smem_sb + stage * 2);
            return RhsScales{ld_shared_f32(addr), kMayStraddle ? ld_shared_f32(addr + 4) : ld_shared_f32(addr)};
        };
        // Promotion multipliers SA(row) * SB(scale block, k block) of this thread's rows (lane_row and
        // lane_row + 8 of its warp) in sub-tile s, for the tile's first and (if it straddles) second RHS scale
        // block. NOTES: loaded before the K block's WGMMAs are issued so that neither the shared-memory latency
        // nor the multiplies sit between the WGMMA wait and the promotion.
        struct Scales {
            float lo0, hi0, lo1, hi1;
        };
        auto load_scales = [&](uint32_t stage, uint32_t s, const RhsScales& sb) {
            const uint32_t sa_stage = sa_addr + (stage * BLOCK_M + s * kNumMathWGs * WGMMA::M) * 4;
            const float sa_lo = ld_shared_f32(sa_stage);
            const float sa_hi = ld_shared_f32(sa_stage + 8 * 4);
            return Scales{sa_lo * sb.b0, sa_hi * sb.b0, sa_lo * sb.b1, sa_hi * sb.b1};
        };
        // Promotion: final += partial * SA(row) * SB(n block of the column, k block).
        // `straddle` is the tile's straddle case (see kNumStraddleCases): an Int (columns' scales chosen at
        // compile time) or a uint32_t (chosen per column at run time).
        auto promote = [&](float* final_acc, const float* acc, const Scales& scales, auto straddle) {
            const uint32_t straddle_col = 128 - static_cast<uint32_t>(straddle) * kScaleGcd;
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
        };

        // NOTES: with one 64-row sub-tile per warpgroup there are registers for two partial accumulators, so
        // K block i + 1's WGMMAs run on the tensor cores while K block i is promoted on the CUDA cores.
        constexpr bool kOverlapPromotion = kNumSubTiles == 1 and kNumAccum <= 64;
        float partial[kOverlapPromotion ? 2 : 1][kNumAccum];
        float final_accum[kNumSubTiles][kNumAccum];

        // RHS scales of a tile's N range for every K block, [1 or 2][kNumKBlocks], per warpgroup and double
        // buffered: the next tile's values are fetched from global memory into registers while this tile's
        // K loop runs, and stored before this tile's epilogue barrier publishes them.
        // NOTES: every math warpgroup runs its own epilogue with its own barriers, so one warpgroup's epilogue
        // overlaps the other's WGMMAs; nothing below synchronises the two warpgroups.
        constexpr uint32_t kSBPerThread = ceil_div(kNumSBPerTile, 128u);
        float* wg_sb = smem_sb + wg.math_wg * 2 * kNumSBPerTile;
        auto fetch_sb = [&](const Tile& t, float (&regs)[kSBPerThread]) {
            if (kGatherScales or (kSkipPadding and t.skip))
                return;  // a padding block: its expert index may be anything, read nothing (else t.group is 0)
            const uint32_t block0 = t.n_block * BLOCK_N / 128;
            const uint32_t block1 = min(block0 + 1, kNumSBBlocks - 1);
            const float* group_sb = sb + (kGrouped ? t.group * kNumSBBlocks * kNumKBlocks : 0u);
            #pragma unroll
            for (uint32_t j = 0; j < kSBPerThread; ++j) {
                const uint32_t i = wg.wg_thread + j * 128;
                if (i < kNumSBPerTile)
                    regs[j] = __ldg(group_sb + (i < kNumKBlocks ? block0 : block1) * kNumKBlocks + i % kNumKBlocks);
            }
        };
        auto store_sb = [&](uint32_t buf, const float (&regs)[kSBPerThread]) {
            if constexpr (kGatherScales)
                return;
            #pragma unroll
            for (uint32_t j = 0; j < kSBPerThread; ++j) {
                const uint32_t i = wg.wg_thread + j * 128;
                if (i < kNumSBPerTile)
                    wg_sb[buf * kNumSBPerTile + i] = regs[j];
            }
        };

        auto scheduler = make_scheduler();
        Tile tile;
        typename Shell::Stages stages;
        uint32_t sb_buf = 0;
        bool has_tile = scheduler.next(tile);
        if (has_tile) {
            float regs[kSBPerThread];
            fetch_sb(tile, regs);
            store_sb(0, regs);
            wg.sync();
        }
        while (has_tile) {
            const uint32_t n_start = tile.n_block * BLOCK_N;
            tile_sb_addr = smem_u32(wg_sb + sb_buf * kNumSBPerTile);
            Tile next_tile;
            const bool has_next = scheduler.next(next_tile);
            float next_sb[kSBPerThread];
            if (has_next)
                fetch_sb(next_tile, next_sb);
            // Contiguous layout: the experts of this thread's rows (lane_row and lane_row + 8 of its warp, per
            // sub-tile); rows of another expert (padding -1, or an index that breaks the layout) are written as
            // zeros. NOTES: loaded here and compared only in the epilogue, so that the load latency hides behind
            // the K loop; comparing here (inside a branch) made every math warp wait out two global-memory round
            // trips per tile before its first WGMMA (SASS; NOTES issue 14, lever 17).
            int32_t row_expert[kNumSubTiles][2];
            #pragma unroll
            for (uint32_t s = 0; s < kNumSubTiles; ++s) {
                #pragma unroll
                for (uint32_t h = 0; h < 2; ++h) {
                    row_expert[s][h] = 0;
                    if constexpr (kGemmType == GemmType::MGroupedContiguous) {
                        const uint32_t row =
                            tile.row_base + wg.sub_tile_row(s) + wg.warp_row + wg.lane_row + h * 8;
                        // Rows past shape_m are clipped by the TMA store: any in-bounds index will do.
                        row_expert[s][h] = __ldg(grouped_layout + min(row, shape_m - 1));
                    }
                }
            }
            // Which of the kNumStraddleCases column splits this tile has.
            const uint32_t straddle_case = kMayStraddle ? (n_start % 128) / kScaleGcd : 0;

            #pragma unroll
            for (uint32_t s = 0; s < kNumSubTiles; ++s)
                #pragma unroll
                for (uint32_t i = 0; i < kNumAccum; ++i)
                    final_accum[s][i] = 0;

            auto k_loop = [&](auto straddle) {
                if constexpr (kOverlapPromotion) {
                    Scales scales[2];
                    uint32_t cur_stage = 0;
                    // Put K block k_block's WGMMAs in flight into partial buffer `buf` (with its scales).
                    auto issue_next = [&](auto buf, uint32_t k_block) {
                        const RhsScales tile_sb = load_sb(k_block);
                        shell.ring.wait_full(stages);
                        const RhsScales sb = stage_sb(stages.stage, tile_sb);
                        scales[decltype(buf)::value] = load_scales(stages.stage, 0, sb);
                        wg.issue_mma(stages.stage, 0, partial[decltype(buf)::value]);
                        cur_stage = stages.stage;
                        stages.advance();
                    };
                    // Partial buffer `buf`'s WGMMAs are complete: free their stage and promote them.
                    auto retire = [&](auto buf, uint32_t done_stage) {
                        #pragma unroll
                        for (uint32_t i = 0; i < kNumAccum; ++i)
                            wgmma_fence_operand(partial[decltype(buf)::value][i]);
                        wg.release(done_stage);
                        promote(final_accum[0], partial[decltype(buf)::value], scales[decltype(buf)::value],
                                straddle);
                    };
                    // Steady step for K block k_block (in buffer `parity`): put k_block + 1 in flight, then
                    // promote k_block.
                    auto step = [&](auto parity, uint32_t k_block) {
                        const uint32_t done_stage = cur_stage;
                        issue_next(Int<1 - decltype(parity)::value>{}, k_block + 1);
                        wgmma_wait_group<1>();
                        retire(parity, done_stage);
                    };
                    // A chunk of kLen K blocks, pipelined inside and drained at its end.
                    // NOTES: an accumulator still in flight across a loop edge makes ptxas serialise every WGMMA
                    // (C7514) or inject waits (C7517), and unrolling all of K costs minutes of compile time at
                    // k = 16384; chunks of kOverlapChunk blocks keep both the pipeline and compile time short, at
                    // the price of one exposed promotion per chunk.
                    auto run_chunk = [&](auto len, uint32_t k0) {
                        constexpr uint32_t kLen = decltype(len)::value;
                        issue_next(Int<0>{}, k0);
                        static_for<kLen - 1>([&](auto i) { step(Int<decltype(i)::value % 2>{}, k0 + i); });
                        wgmma_wait_group<0>();
                        retire(Int<(kLen - 1) % 2>{}, cur_stage);
                    };
                    constexpr uint32_t kOverlapChunk = 8;
                    #pragma unroll 1
                    for (uint32_t k0 = 0; k0 + kOverlapChunk <= kNumKBlocks; k0 += kOverlapChunk)
                        run_chunk(Int<kOverlapChunk>{}, k0);
                    if constexpr (kNumKBlocks % kOverlapChunk != 0)
                        run_chunk(Int<kNumKBlocks % kOverlapChunk>{},
                                  kNumKBlocks / kOverlapChunk * kOverlapChunk);
                } else {
                    // NOTES: unrolling by 4 gave +4-7% at 256x128 and 128x192 on the H200 (measured).
                    #pragma unroll 4
                    for (uint32_t k_block = 0; k_block < kNumKBlocks; ++k_block) {
                        const RhsScales tile_sb = load_sb(k_block);
                        shell.ring.wait_full(stages);
                        const RhsScales sb = stage_sb(stages.stage, tile_sb);
                        #pragma unroll
                        for (uint32_t s = 0; s < kNumSubTiles; ++s) {
                            const Scales scales = load_scales(stages.stage, s, sb);
                            wg.issue_mma(stages.stage, s, partial[0]);
                            wgmma_wait_group<0>();
                            if (s + 1 == kNumSubTiles)
                                wg.release(stages.stage);
                            promote(final_accum[s], partial[0], scales, straddle);
                        }
                        stages.advance();
                    }
                }
            };
            // NOTES: a per-column run-time choice of RHS scale cost 15-20% of the whole GEMM at BLOCK_N = 112..192
            // (measured on the H200); with few straddle cases the whole K loop is instantiated once per case
            // and picked per tile, with many it stays a run-time choice (the heuristic avoids those widths
            // where the GEMM is compute-bound).
            if (kSkipPadding and tile.skip) {
                // A padding block: no MMA work, the epilogue writes zeros.
            } else if constexpr (kNumStraddleCases == 1) {
                k_loop(Int<0>{});
            } else if constexpr (kNumStraddleCases <= kMaxStaticStraddleCases) {
                static_for<kNumStraddleCases>([&](auto c) {
                    if (straddle_case == decltype(c)::value)
                        k_loop(c);
                });
            } else {
                k_loop(straddle_case);
            }

            // ---- Epilogue (per warpgroup) ----
            if (has_next)
                store_sb(sb_buf ^ 1, next_sb);
            // NOTES: a batched tile of a few valid rows (decode) stores them from registers: its smem round trip and
            // barriers sat on every tile's critical path at m <= 16 (H200: 128x1x512x128 7.2 -> 6.0 us). Only with
            // gathered scales: otherwise the epilogue's warpgroup barrier is what publishes the next tile's SB
            // (store_sb) to the whole warpgroup, and skipping it gave masked GEMMs stale scales (GPU suite: NaN and
            // non-deterministic results).
            constexpr uint32_t kDirectStoreRows = 16;
            if (kGatherScales and tile.valid_rows <= kDirectStoreRows) {
                #pragma unroll
                for (uint32_t s = 0; s < kNumSubTiles; ++s)
                    Epilogue::store_rows_direct(final_accum[s], wg.sub_tile_row(s) + wg.warp_row, wg.lane_idx,
                                                tile.valid_rows, d, d_row_stride, tile.row_base, n_start, SHAPE_N);
            } else {
                wg.store_tile(
                    [&] {
                        #pragma unroll
                        for (uint32_t s = 0; s < kNumSubTiles; ++s) {
                            if constexpr (kGemmType == GemmType::MGroupedContiguous) {
                                const auto group = static_cast<int32_t>(tile.group);
                                const bool row_ok[2] = {not tile.skip and row_expert[s][0] == group,
                                                        not tile.skip and row_expert[s][1] == group};
                                #pragma unroll
                                for (uint32_t i = 0; i < kNumAccum; ++i)
                                    final_accum[s][i] = row_ok[(i / 2) % 2] ? final_accum[s][i] : 0.0f;
                            }
                            Epilogue::write_warp(shell.smem_d, final_accum[s], wg.sub_tile_row(s) + wg.warp_row,
                                                 wg.lane_idx);
                        }
                    },
                    [&](bool is_leader) {
                        if (has_group_row_ends(kGemmType) and tile.valid_rows < BLOCK_M) {
                            // A group's last block: rows past the group's end must stay untouched, which a TMA
                            // box cannot express, so the warpgroup copies its valid rows out of smem_d itself
                            // (16-byte chunks).
                            #pragma unroll
                            for (uint32_t s = 0; s < kNumSubTiles; ++s)
                                Epilogue::copy_rows(shell.smem_d, wg.sub_tile_row(s), tile.valid_rows, d, d_row_stride,
                                                    tile.row_base, n_start, SHAPE_N, wg.wg_thread);
                        } else if (is_leader) {
                            #pragma unroll
                            for (uint32_t s = 0; s < kNumSubTiles; ++s)
                                Epilogue::store_rows(&tensor_map_d, shell.smem_d, wg.sub_tile_row(s), tile.row_base,
                                                     n_start);
                            tma_store_commit();
                        }
                    });
            }
            tile = next_tile, has_tile = has_next, sb_buf ^= 1;
        }
        wg.finish();
    }
    Shell::teardown();
#endif
}

}  // namespace deep_gemm::sm90
