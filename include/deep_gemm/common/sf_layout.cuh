#pragma once

// Scale-factor layout kernel (any sm_90+ target): float32 scales -> UE8M0 exponents packed four per int32, MN-major,
// the form SM100 block-scaled MMAs read (DeepGEMM's `get_*_packed_ue8m0_tensor`). Each output row j of a group packs
// the group's scale rows 4j..4j+3 (exponent byte of scale row 4j + t in byte t; missing rows give 0).
//
// Groups of scale rows (the K direction) are stacked in the output, group after group:
//  - uniform (ks == nullptr): num_groups groups of `sf_k` scale rows each; group g's rows start at
//    sf + g * in_group_stride (a batch of [mn, k'] scale matrices);
//  - k-grouped (ks != nullptr): group g has ceil(ks[g] / gran_k) scale rows, stacked back to back in the input
//    (in_group_stride = 0), as the K-grouped weight-gradient GEMMs lay out their scales.
// Scale row q, column c of a group is at (row base + q) * in_stride_k + c * in_stride_mn (elements). Rows at or past
// `sf_rows` (the scale rows the host saw: per group when uniform, in all when k-grouped) are never read, whatever
// ks holds on the device.

#include <deep_gemm/common/utils.cuh>

namespace deep_gemm {

template <typename Config>
__global__ void __launch_bounds__(Config::kNumThreads, 1)
pack_fp32_into_ue8m0_impl(const float* __restrict__ sf, int32_t* __restrict__ out,
                          const int32_t* __restrict__ ks, const uint32_t num_groups, const uint32_t mn,
                          const uint32_t sf_k, const uint32_t gran_k, const uint32_t sf_rows,
                          const uint64_t in_group_stride,
                          const uint64_t in_stride_k, const uint64_t in_stride_mn, const uint32_t out_row_stride) {
    // One CTA per output row: find its group (a walk over the groups, once per CTA), then stride over the columns.
    __shared__ uint64_t row_offset;  // element offset of the group's first scale row used by this output row
    __shared__ uint32_t rows_left;   // scale rows of the group from there (0..4 of them are packed)
    if (threadIdx.x == 0) {
        const uint32_t j = blockIdx.x;
        uint64_t sf_row = 0;
        uint32_t packed = 0, g = 0, rows = 0;
        for (; g < num_groups; ++g) {
            rows = ks == nullptr ? sf_k : (static_cast<uint32_t>(max(ks[g], 0)) + gran_k - 1) / gran_k;
            const uint32_t packed_rows = (rows + 3) / 4;
            if (j < packed + packed_rows)
                break;
            packed += packed_rows;
            sf_row += ks == nullptr ? 0 : rows;
        }
        const uint32_t q = (j - packed) * 4;  // the group's first scale row of this output row
        row_offset = (ks == nullptr ? g * in_group_stride : 0) + (sf_row + q) * in_stride_k;
        const uint64_t first = sf_row + q;  // k-grouped: row index in the whole input; uniform: in the group
        rows_left = g < num_groups and first < sf_rows ? min(rows - q, static_cast<uint32_t>(sf_rows - first)) : 0;
    }
    __syncthreads();
    for (uint32_t c = threadIdx.x; c < mn; c += blockDim.x) {
        uint32_t word = 0;
        #pragma unroll
        for (uint32_t t = 0; t < 4; ++t) {
            if (t < rows_left) {
                const float v = sf[row_offset + t * in_stride_k + c * in_stride_mn];
                word |= ((__float_as_uint(v) >> 23) & 0xFFu) << (8 * t);
            }
        }
        out[static_cast<uint64_t>(blockIdx.x) * out_row_stride + c] = static_cast<int32_t>(word);
    }
}

}  // namespace deep_gemm
