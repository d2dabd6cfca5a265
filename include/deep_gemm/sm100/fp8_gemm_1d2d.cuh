#pragma once

// Blackwell (sm_100a) FP8 GEMM, D[m, n] (BF16) = dequant(A[m, k]) * dequant(B[n, k])^T, with 1x128 LHS scales and
// 128x128 RHS scales. One kernel family for the dense GEMM and the MoE grouped contiguous / masked layouts (GemmType,
// common/scheduler.cuh), in two scale paths chosen at compile time (kScaleUE8M0):
//  (a) FP32 scales, exact: the MMA warp computes each 128-wide K block into one of two TMEM partial accumulators
//      (kind::f8f6f4); the epilogue warps read it (tcgen05.ld), multiply by SA(row, k block) * SB(n block, k block)
//      and add it into FP32 registers (the Hopper kernel's promotion; the same numerics), while the MMA warp already
//      fills the other partial buffer. After the tile's last K block they write the BF16 rows.
//  (b) UE8M0 scales, hardware-applied: power-of-two scale factors (packed 4 K blocks per int32, MN-major) are loaded
//      by TMA, copied into TMEM (tcgen05.cp) and applied by kind::mxf8f6f4.block_scale MMAs that accumulate the
//      whole K of a tile in TMEM; two tile accumulators, so the epilogue of tile i overlaps the MMAs of tile i + 1.
//
// Composed in the sm100 kernel shell (kernel_shell.cuh: warp roles, shared and tensor memory, the producer) with the
// scale policy of its path (promotion.cuh), the MMA warp's loop (mainloop.cuh) and the epilogue's row stores
// (epilogue.cuh).

#include <deep_gemm/common/scheduler.cuh>
#include <deep_gemm/common/utils.cuh>
#include <deep_gemm/sm100/epilogue.cuh>
#include <deep_gemm/sm100/kernel_shell.cuh>
#include <deep_gemm/sm100/mainloop.cuh>
#include <deep_gemm/sm100/promotion.cuh>

#if defined(__CUDA_ARCH__) and not (defined(__CUDA_ARCH_FEAT_SM100_ALL) or defined(__CUDA_ARCH_FAMILY_SPECIFIC__))
#error "deep_gemm: the sm100 kernels need the arch-specific target sm_100a (or sm_100f): plain sm_100 has no tcgen05"
#endif

namespace deep_gemm::sm100 {

// Tensor-memory columns one instantiation uses: two accumulator buffers of BLOCK_N columns, plus (path (b)) the
// scale factors: SFA 4 columns (128 rows / 32 lanes), SFB align(BLOCK_N, 128) / 32 columns.
template <uint32_t BLOCK_N, bool kScaleUE8M0>
constexpr uint32_t fp8_gemm_tmem_cols() {
    return 2 * BLOCK_N + (kScaleUE8M0 ? kCtaRows / 32 + align_up<uint32_t>(BLOCK_N, 128) / 32 : 0);
}

// Shared-memory bytes of one instantiation; the host computes the same number (heuristics/sm100.py) and passes it as
// kSmemSize, and the kernel static-asserts that the two agree.
// Layout: [stages x A 128 x 128][stages x B rows x 128][stages x (SFA, SFB) packed UE8M0][full, empty barriers per
// stage][accumulator full x 2, empty x 2][TMEM base address].
template <uint32_t BLOCK_M, uint32_t BLOCK_N, uint32_t kNumStages, bool kScaleUE8M0>
constexpr uint32_t fp8_gemm_smem_size() {
    constexpr uint32_t load_n = BLOCK_M == 2 * kCtaRows ? BLOCK_N / 2 : BLOCK_N;
    constexpr uint32_t sf = kScaleUE8M0 ? (kCtaRows + align_up<uint32_t>(BLOCK_N, 128)) * 4 : 0;
    return kNumStages * (kCtaRows * kBlockK + load_n * kBlockK + sf) + (2 * kNumStages + 4) * 8 + 8;
}

// Config: kGemmType, SHAPE_N, SHAPE_K, BLOCK_M (128 or 256), BLOCK_N, kNumStages, kNumMulticast (cluster size, 1 or 2),
// kMulticastOnA, kScaleUE8M0, kSmemSize, kNumTmemCols (the allocated column count).
// Grouped launches: A / D hold all experts' rows ([m_sum, *], or [G * m_max, *] for masked), B is [G * n, k].
// Path (a): SA [ceil(k/128), m'] fp32 MN-major with `sa_stride` elements between K blocks (masked: the experts'
//   [ceil(k/128), m_max'] blocks stacked), SB [G, ceil(n/128), ceil(k/128)] fp32; the scale maps are unused.
// Path (b): SFA [ceil(k/512), m'] int32 MN-major (masked: [G * ceil(k/512), m_max']), SFB [G * ceil(k/512), n'] int32,
//   each int32 the UE8M0 exponents of 4 consecutive K blocks (lowest byte first); `sa` / `sb` are unused.
// `d` / `d_row_stride` (elements): D, written row by row.
template <typename Config>
__global__ void __launch_bounds__(kernel_num_threads<Config>(), 1)
fp8_gemm_1d2d_impl(const __grid_constant__ TmaDescriptor tensor_map_a,    // A [m, k] e4m3, K-major, box 128 x 128
                   const __grid_constant__ TmaDescriptor tensor_map_b,    // B [n, k] e4m3, K-major, box 128 x B rows
                   const __grid_constant__ TmaDescriptor tensor_map_sfa,  // (b) SFA, box 128 x 1
                   const __grid_constant__ TmaDescriptor tensor_map_sfb,  // (b) SFB, box BLOCK_N x 1
                   const float* __restrict__ sa,                         // (a) SA
                   const uint32_t sa_stride,
                   const float* __restrict__ sb,                         // (a) SB
                   const uint32_t shape_m,                               // m (dense, contiguous) or m_max
                   const int32_t* __restrict__ grouped_layout,           // m_indices / masked_m (grouped only)
                   const uint32_t num_groups,
                   uint8_t* __restrict__ d,
                   const uint32_t d_row_stride) {
#if defined(__CUDA_ARCH__)
    // ---- Compile-time shape and the composition: the shell with the scale path's policy ----
    constexpr GemmType kGemmType = Config::kGemmType;
    constexpr uint32_t SHAPE_N = Config::SHAPE_N;
    constexpr uint32_t SHAPE_K = Config::SHAPE_K;
    constexpr uint32_t BLOCK_M = Config::BLOCK_M;
    constexpr uint32_t BLOCK_N = Config::BLOCK_N;
    constexpr uint32_t kNumStages = Config::kNumStages;
    constexpr bool kScaleUE8M0 = Config::kScaleUE8M0;
    using Promotion = typename ScalePath<kScaleUE8M0>::template Policy<Config>;
    using Shell = KernelShell<Config, Promotion>;
    using Output = RowOutput<kGemmType, SHAPE_N, BLOCK_N>;
    constexpr bool kPairMma = Shell::kPairMma;
    constexpr bool kContiguous = kGemmType == GemmType::MGroupedContiguous;
    constexpr bool kMasked = kGemmType == GemmType::MGroupedMasked;

    DG_STATIC_ASSERT(not kPairMma or not kContiguous,
                     "contiguous grouped tiles must not span two 128-row expert segments (no 256-row tiles)");
    DG_STATIC_ASSERT(not Shell::kMulticastB or kGemmType == GemmType::Normal,
                     "grouped GEMMs may multicast only A (the pair then shares the M block, hence the expert)");
    DG_STATIC_ASSERT(kGemmType == GemmType::Normal or kContiguous or kMasked,
                     "the sm100 kernel implements the dense, contiguous and masked layouts");
    DG_STATIC_ASSERT(SHAPE_N > 0 and SHAPE_K > 0, "empty problems are handled on the host");
    DG_STATIC_ASSERT(Shell::kTmemUsedCols == (fp8_gemm_tmem_cols<BLOCK_N, kScaleUE8M0>()),
                     "the shell's tensor-memory layout and the host's mirror (fp8_gemm_tmem_cols) disagree");
    DG_STATIC_ASSERT(Config::kSmemSize == (fp8_gemm_smem_size<BLOCK_M, BLOCK_N, kNumStages, kScaleUE8M0>()),
                     "host and device disagree on the shared-memory size");

    extern __shared__ __align__(1024) uint8_t smem[];
    const Shell shell(smem);
    const uint32_t tmem_base = shell.setup(&tensor_map_a, &tensor_map_b, &tensor_map_sfa, &tensor_map_sfb);
    using Scheduler = typename Shell::template Scheduler<kGemmType>;
    auto make_scheduler = [&] { return Scheduler(shape_m, grouped_layout, num_groups); };
    // Contiguous padding blocks (expert -1) take no stage and no accumulator: every role skips them alike.
    auto skips = [](const Tile& tile) { return kContiguous and tile.skip; };

    // NOTES: the epilogue warps hold BLOCK_N / 2 FP32 accumulators per thread (path (a)); the other warpgroup hands
    // them its registers (setmaxnreg: each role in one branch of this if/else, every warp of a warpgroup alike).
    if (not shell.is_epilogue_warp()) {
        warpgroup_reg_dealloc<kNumNonEpilogueRegs>();
        if (shell.is_producer_warp()) {
            const typename Promotion::Producer scales(&tensor_map_sfa, &tensor_map_sfb, shell.smem_sfa, shell.smem_sfb);
            shell.produce(make_scheduler, skips, &tensor_map_a, &tensor_map_b, scales);
        } else if (shell.is_mma_warp()) {
            const typename Promotion::Mma mma(shell.smem_sfa, shell.smem_sfb, tmem_base + Shell::kTmemSF,
                                              shell.lane_idx);
            const MmaIssuer<Shell, Promotion> issuer{shell, mma, tmem_base};
            issuer.run(make_scheduler, skips);
        }
    } else {
        // ================= Epilogue warps =================
        warpgroup_reg_alloc<kNumEpilogueRegs>();
        const RowEpilogue<BLOCK_N> epi(tmem_base, shell.warp_idx, shell.lane_idx);
        const typename Promotion::Math promotion(sa, sa_stride, sb, shape_m);
        auto scheduler = make_scheduler();
        Tile tile;
        auto accum = shell.accum_ring();
        while (scheduler.next(tile)) {
            // This thread's row: of the tile (pair: the odd CTA holds rows 128-255), and of D.
            const uint32_t tile_row = shell.cta_rank * (kPairMma ? kCtaRows : 0) + epi.row;
            const uint32_t d_row = tile.row_base + tile_row;
            const uint32_t n_first = tile.n_block * BLOCK_N;
            const Output out(tile, tile_row, d_row, n_first, epi.col, shape_m, grouped_layout, d, d_row_stride);
            if (skips(tile)) {
                const float zeros[8] = {};
                #pragma unroll
                for (uint32_t c = 0; c < RowEpilogue<BLOCK_N>::kNumChunks; ++c)
                    out.store(c, zeros);
                continue;
            }
            promotion.consume(tile, tile_row, d_row, n_first, epi, accum, shell.lane_idx, out);
        }
    }
    shell.teardown(tmem_base);
#endif
}

}  // namespace deep_gemm::sm100
