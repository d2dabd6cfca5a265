#pragma once

// FP8 (e4m3) casts with float32 scales in one pass over memory (deep_gemm.utils.per_token_cast_to_fp8,
// per_block_cast_to_fp8, per_channel_cast_to_fp8), bitwise equal to their torch definitions run on the GPU
// (deep_gemm/utils/math.py):
//   amax  = max |x| over the group (NaN wins; missing elements of a ragged group count as 0),
//   scale = max(amax, 1e-4) * RN(1/448), rounded up to a power of two with kUE8M0 (ceil_to_ue8m0),
//   data  = e4m3(x / scale) with IEEE division, rounded to nearest even; finite overflow and +-inf saturate to +-448
//           (the definition clamps before torch's conversion, which saturates only from torch 2.13 on), NaN becomes
//           0x7f with the NaN's sign.
// NOTES: torch divides a CUDA tensor by a Python scalar as a multiplication by the scalar's float reciprocal
// (BinaryDivTrueKernel.cu), so `amax / 448.0` on the GPU is amax * RN(1/448): more than half of all scales differ by
// an ulp from a true division, hence the multiplication here; the data's division is by a tensor, a true division.
//
// Groups (kGran = 128 elements): per token, 1 x 128 along a row; per block, 128 x 128; per channel, 128 x 1 along a
// column. x is [rows, cols] with unit column stride and any row stride (elements); out [rows, cols] e4m3 likewise;
// scale (gr, gc) is at sf[gr * sf_stride_0 + gc * sf_stride_1] (per token gr is the row, per channel gc the column),
// which covers both the row-major scales and the GEMMs' MN-major TMA-aligned ones.
// Each thread moves vectors of kVec elements (16 bytes of input at most); the host picks the widest kVec that the
// pointers, row strides and cols allow, so rows and groups never straddle a vector. A group whose amax is finite
// takes the fast path (the division in six instructions, `div_rn_by`, or a product by the exact inverse of a UE8M0
// scale); a group holding inf or NaN, the rare path (IEEE division and torch's NaN rule, one element at a time).
//  - per token: a warp takes kRounds x (32 / lanes per group) consecutive groups of one row, all loads issued before
//    any math; a group's amax is a shuffle reduction over its lanes. No shared memory.
//  - per block: a CTA holds one 128 x 128 block in registers (128 x 128 / kNumThreads elements per thread) and
//    reduces its amax through one word of shared memory per warp.
//  - per channel: a CTA holds 128 rows x (kLanesPerRow kVec) columns: kLanesPerRow threads across a row, the
//    CTA's kNumThreads / kLanesPerRow row slots down the columns. Each slot's per-column amax goes to shared memory,
//    then one thread per column reduces it over the slots and stores the scale (conflict-free; every thread reducing
//    its own kVec columns over all slots read kVec-strided words). Narrower CTAs (fewer lanes per row) spread a small
//    problem over more SMs: a CTA's arithmetic runs on one SM.

#include <deep_gemm/common/utils.cuh>

#if defined(__CUDA_ARCH__) and __CUDA_ARCH__ < 890
#error "deep_gemm: the FP8 casts convert with cvt.e4m3x2 (sm_89 and later)"
#endif

namespace deep_gemm::sm90 {

enum class CastKind : uint32_t { PerToken = 0, PerBlock = 1, PerChannel = 2 };

namespace cast {

constexpr uint32_t kAmaxFloorBits = 0x38d1b717u;  // float(1e-4), torch's clamp bound as a float32
constexpr float kInvFp8Max = 0x1.24924ap-9f;      // RN(1 / 448): torch's reciprocal of the Python scalar 448.0
constexpr uint32_t kInfBits = 0x7f800000u;

// kVec elements of input as 32-bit words (a BF16 pair per word, low element first; one FP32 per word).
template <bool kBF16, uint32_t kVec>
struct Vec {
    static constexpr uint32_t kBytes = kVec * (kBF16 ? 2 : 4);
    static constexpr uint32_t kWords = kBytes < 4 ? 1 : kBytes / 4;
    uint32_t w[kWords];

    __device__ __forceinline__ void load(const void* ptr) {
        // NOTES: streamed once, so not kept in L1; the non-coherent path is fine as x is never written here.
        if constexpr (kBytes == 16) {
            asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                         : "=r"(w[0]), "=r"(w[1]), "=r"(w[2]), "=r"(w[3]) : "l"(ptr));
        } else if constexpr (kBytes == 8) {
            asm volatile("ld.global.nc.L1::no_allocate.v2.u32 {%0, %1}, [%2];" : "=r"(w[0]), "=r"(w[1]) : "l"(ptr));
        } else if constexpr (kBytes == 4) {
            asm volatile("ld.global.nc.L1::no_allocate.u32 %0, [%1];" : "=r"(w[0]) : "l"(ptr));
        } else {
            uint16_t h;
            asm volatile("ld.global.nc.L1::no_allocate.u16 %0, [%1];" : "=h"(h) : "l"(ptr));
            w[0] = h;
        }
    }

    __device__ __forceinline__ void zero() {
        #pragma unroll
        for (uint32_t i = 0; i < kWords; ++i)
            w[i] = 0;
    }

    // Element i as the FP32 value it denotes (BF16 widens exactly).
    __device__ __forceinline__ float get(uint32_t i) const {
        if constexpr (kBF16)
            return __uint_as_float(i % 2 == 0 ? w[i / 2] << 16 : w[i / 2] & 0xffff0000u);
        else
            return __uint_as_float(w[i]);
    }
};

// max(a, |x|) where a NaN wins (torch's amax propagates NaN; fmaxf would drop it).
__device__ __forceinline__ float abs_max_nan(float a, float x) {
    float r;
    asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(fabsf(x)));
    return r;
}

// x / b rounded to nearest (IEEE), for 0 < b in [2^-23, 2^120], y = RN(1 / b) and finite x with |x / b| < 2^9.
// NOTES: q0 = RN(x y) is within 1.5 ulp of x / b, one correction through the fma remainder makes it faithful,
// and a second one is exactly RN(x / b) by Markstein's theorem (y within half an ulp of 1 / b, q faithful) wherever
// nothing underflows, i.e. for every |x / b| >= 2^-11 (b >= 2^-23 keeps x and the remainders normal there). Smaller
// quotients all become +-0 in e4m3, so there only the sign matters: it is x's (b > 0; +-0 loses it otherwise). Six
// instructions instead of the IEEE division's ten and a branch; tests/families/test_sm90_fp8_cast.py replays it.
__device__ __forceinline__ float div_rn_by(float x, float b, float y) {
    const float q0 = __fmul_rn(x, y);
    const float q1 = __fmaf_rn(__fmaf_rn(-b, q0, x), y, q0);
    const float q2 = __fmaf_rn(__fmaf_rn(-b, q1, x), y, q1);
    uint32_t with_sign;  // q2's magnitude, x's sign: one LOP3 (bit-select, LUT 0xd8 = (a & ~c) | (b & c))
    asm("lop3.b32 %0, %1, %2, 0x80000000, 0xd8;"
        : "=r"(with_sign) : "r"(__float_as_uint(q2)), "r"(__float_as_uint(x)));
    return __uint_as_float(with_sign);
}

// A group's scale from its amax (as bits: non-negative, NaN canonical, so the integer order is the float order with
// NaN above +inf), and its quotients x / scale.
template <bool kUE8M0>
struct GroupScale {
    float scale;
    float inverse;  // 1 / scale: exact with UE8M0 (a power of two in [2^-22, 2^120] when finite), else RN(1 / scale)
    bool finite;    // the amax is finite: every quotient is finite, none needs the NaN fix-up

    GroupScale() = default;
    __device__ __forceinline__ explicit GroupScale(uint32_t amax_bits) {
        finite = amax_bits < kInfBits;
        scale = __uint_as_float(max(amax_bits, kAmaxFloorBits)) * kInvFp8Max;
        if constexpr (kUE8M0) {
            // ceil_to_ue8m0: the smallest power of two >= scale, exponent clamped to [1, 254] (NaN -> 2^127).
            const uint32_t bits = __float_as_uint(scale) & 0x7fffffffu;
            const uint32_t exponent = min(max((bits >> 23) + ((bits & 0x7fffffu) != 0 ? 1 : 0), 1u), 254u);
            scale = __uint_as_float(exponent << 23);
            inverse = __uint_as_float((254u - exponent) << 23);
        } else {
            inverse = __frcp_rn(scale);
        }
    }

    // x / scale rounded to nearest, for a finite group. NOTES: with a power-of-two scale the product by its exact
    // inverse is the same single rounding of the same real number (subnormal results included).
    __device__ __forceinline__ float quotient(float x) const {
        if constexpr (kUE8M0)
            return __fmul_rn(x, inverse);
        else
            return div_rn_by(x, scale, inverse);
    }
};

// e4m3 bytes of kVec finite quotients, packed little-endian into words: cvt.rn.satfinite rounds to nearest even as
// torch's conversion does (and would saturate to +-448 as the definition does; a finite group's quotients stay below
// 449).
template <uint32_t kVec>
struct Bytes {
    static constexpr uint32_t kWords = (kVec + 3) / 4;
    uint32_t w[kWords];

    __device__ __forceinline__ void convert(const float (&q)[kVec]) {
        #pragma unroll
        for (uint32_t i = 0; i < kWords; ++i)
            w[i] = 0;
        #pragma unroll
        for (uint32_t i = 0; i < kVec; i += 2) {
            uint16_t pair;
            asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(pair) : "f"(i + 1 < kVec ? q[i + 1] : 0.0f), "f"(q[i]));
            w[i / 4] |= static_cast<uint32_t>(pair) << (8 * (i % 4));
        }
    }

    __device__ __forceinline__ void store(uint8_t* ptr) const {
        if constexpr (kVec == 8) {
            asm volatile("st.global.v2.u32 [%0], {%1, %2};" :: "l"(ptr), "r"(w[0]), "r"(w[1]) : "memory");
        } else if constexpr (kVec == 4) {
            asm volatile("st.global.u32 [%0], %1;" :: "l"(ptr), "r"(w[0]) : "memory");
        } else if constexpr (kVec == 2) {
            asm volatile("st.global.u16 [%0], %1;" :: "l"(ptr), "h"(static_cast<uint16_t>(w[0])) : "memory");
        } else {
            asm volatile("st.global.u8 [%0], %1;" :: "l"(ptr), "h"(static_cast<uint16_t>(w[0])) : "memory");
        }
    }
};

// Quantise a finite group's vector: x(i) / s(i) for kVec values (one group's scale, or per-column ones) and store.
template <uint32_t kVec, typename GetX, typename GetScale>
__device__ __forceinline__ void quantise_store(const GetX& x, const GetScale& s, uint8_t* ptr) {
    float q[kVec];
    #pragma unroll
    for (uint32_t i = 0; i < kVec; ++i)
        q[i] = s(i).quotient(x(i));
    Bytes<kVec> bytes;
    bytes.convert(q);
    bytes.store(ptr);
}

// The rare path of a group holding inf or NaN (its scale is inf, NaN or 2^127): x / scale(i) by the IEEE division
// torch runs, and the definition's conversion, which gives a NaN 0x7f with the NaN's sign (cvt's satfinite turns
// +-inf into +-448 as the definition's clamp does). One element at a time, read again from memory (L2 still holds it), in a rolled loop: a few
// instructions and registers, so that the fast path keeps its registers for the loads in flight.
template <bool kBF16, typename GetScale>
__device__ __forceinline__ void quantise_store_slow(const uint8_t* x, uint8_t* out, uint32_t count,
                                                    const GetScale& scale) {
    #pragma unroll 1
    for (uint32_t i = 0; i < count; ++i) {
        float v;
        if constexpr (kBF16) {
            uint16_t h;
            asm volatile("ld.global.nc.u16 %0, [%1];" : "=h"(h) : "l"(x + 2 * i));
            v = __uint_as_float(static_cast<uint32_t>(h) << 16);
        } else {
            asm volatile("ld.global.nc.f32 %0, [%1];" : "=f"(v) : "l"(x + 4 * i));
        }
        const float q = __fdiv_rn(v, scale(i));
        uint16_t pair;
        asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(pair) : "f"(0.0f), "f"(q));
        const uint32_t byte = q != q ? 0x7fu | ((__float_as_uint(q) >> 24) & 0x80u) : (pair & 0xffu);
        asm volatile("st.global.u8 [%0], %1;" :: "l"(out + i), "h"(static_cast<uint16_t>(byte)) : "memory");
    }
}

// kCount consecutive words of shared memory from / to registers, 16 bytes at a time where the count allows (the
// address is 16-byte aligned when kCount is a multiple of 4).
template <uint32_t kCount>
__device__ __forceinline__ void store_shared_words(uint32_t* dst, const uint32_t (&w)[kCount]) {
    #pragma unroll
    for (uint32_t i = 0; i < kCount; i += (kCount % 4 == 0 ? 4 : 1)) {
        if constexpr (kCount % 4 == 0)
            *reinterpret_cast<uint4*>(dst + i) = make_uint4(w[i], w[i + 1], w[i + 2], w[i + 3]);
        else
            dst[i] = w[i];
    }
}

template <uint32_t kCount>
__device__ __forceinline__ void load_shared_words(const uint32_t* src, uint32_t (&w)[kCount]) {
    #pragma unroll
    for (uint32_t i = 0; i < kCount; i += (kCount % 4 == 0 ? 4 : 1)) {
        if constexpr (kCount % 4 == 0) {
            const uint4 q = *reinterpret_cast<const uint4*>(src + i);
            w[i] = q.x, w[i + 1] = q.y, w[i + 2] = q.z, w[i + 3] = q.w;
        } else {
            w[i] = src[i];
        }
    }
}

template <bool kBF16, uint32_t kVec>
__device__ __forceinline__ float vec_abs_max(const Vec<kBF16, kVec>& v, float a) {
    #pragma unroll
    for (uint32_t i = 0; i < kVec; ++i)
        a = abs_max_nan(a, v.get(i));
    return a;
}

template <typename Config, bool kBF16>
__device__ __forceinline__ void per_token(const uint8_t* x, uint8_t* out, float* sf, uint32_t rows, uint32_t cols,
                                          uint64_t x_stride, uint64_t out_stride, uint32_t sf_stride_0,
                                          uint32_t sf_stride_1) {
    constexpr uint32_t kGran = Config::kGran, kVec = Config::kVec, kRounds = Config::kRounds;
    constexpr uint32_t kLanesPerGroup = kGran / kVec < 32 ? kGran / kVec : 32;
    constexpr uint32_t kChunks = kGran / (kLanesPerGroup * kVec);  // vectors per lane and group
    constexpr uint32_t kGroupsPerRound = 32 / kLanesPerGroup;
    constexpr uint32_t kGroupsPerUnit = kGroupsPerRound * kRounds;
    constexpr uint32_t kElementBytes = kBF16 ? 2 : 4;
    DG_STATIC_ASSERT(kGran % (kLanesPerGroup * kVec) == 0 and 32 % kLanesPerGroup == 0, "lanes tile a group");

    const uint32_t num_groups = ceil_div(cols, kGran);
    const uint32_t units_per_row = ceil_div(num_groups, kGroupsPerUnit);
    const uint32_t unit = blockIdx.x * (Config::kNumThreads / 32) + threadIdx.x / 32;
    if (unit >= rows * units_per_row)  // whole warps leave together: the shuffles below see full warps
        return;
    const uint32_t row = unit / units_per_row;
    const uint32_t lane = threadIdx.x % 32;
    const uint32_t first_group = (unit % units_per_row) * kGroupsPerUnit + lane / kLanesPerGroup;
    const uint32_t lane_col = (lane % kLanesPerGroup) * kVec;
    const uint8_t* x_row = x + row * x_stride * kElementBytes;

    // Every load of the unit first (memory-level parallelism), zeros past the row's end.
    Vec<kBF16, kVec> v[kRounds][kChunks];
    #pragma unroll
    for (uint32_t r = 0; r < kRounds; ++r) {
        #pragma unroll
        for (uint32_t c = 0; c < kChunks; ++c) {
            const uint32_t col = (first_group + r * kGroupsPerRound) * kGran + c * kLanesPerGroup * kVec + lane_col;
            if (col < cols)
                v[r][c].load(x_row + static_cast<uint64_t>(col) * kElementBytes);
            else
                v[r][c].zero();
        }
    }

    uint32_t amax[kRounds];
    #pragma unroll
    for (uint32_t r = 0; r < kRounds; ++r) {
        float a = 0.0f;
        #pragma unroll
        for (uint32_t c = 0; c < kChunks; ++c)
            a = vec_abs_max(v[r][c], a);
        amax[r] = __float_as_uint(a);
    }
    #pragma unroll
    for (uint32_t offset = kLanesPerGroup / 2; offset > 0; offset /= 2) {
        #pragma unroll
        for (uint32_t r = 0; r < kRounds; ++r)
            amax[r] = max(amax[r], __shfl_xor_sync(0xffffffffu, amax[r], offset));
    }

    #pragma unroll
    for (uint32_t r = 0; r < kRounds; ++r) {
        const uint32_t group = first_group + r * kGroupsPerRound;
        if (group >= num_groups)
            continue;
        const GroupScale<Config::kUE8M0> scale(amax[r]);
        #pragma unroll
        for (uint32_t c = 0; c < kChunks; ++c) {
            const uint32_t col = group * kGran + c * kLanesPerGroup * kVec + lane_col;
            if (col >= cols)
                continue;
            if (scale.finite) {
                quantise_store<kVec>([&](uint32_t i) { return v[r][c].get(i); },
                                     [&](uint32_t) -> const auto& { return scale; }, out + row * out_stride + col);
            } else {
                quantise_store_slow<kBF16>(x_row + static_cast<uint64_t>(col) * kElementBytes,
                                           out + row * out_stride + col, kVec, [&](uint32_t) { return scale.scale; });
            }
        }
        if (lane % kLanesPerGroup == 0)
            sf[static_cast<uint64_t>(row) * sf_stride_0 + static_cast<uint64_t>(group) * sf_stride_1] = scale.scale;
    }
}

// The amax of a CTA (every thread gets it); `partial` is the thread's own, as bits.
template <uint32_t kNumThreads>
__device__ __forceinline__ uint32_t cta_amax(uint32_t partial) {
    __shared__ uint32_t warp_amax[kNumThreads / 32];
    partial = __reduce_max_sync(0xffffffffu, partial);
    if (threadIdx.x % 32 == 0)
        warp_amax[threadIdx.x / 32] = partial;
    __syncthreads();
    uint32_t amax = 0;
    #pragma unroll
    for (uint32_t w = 0; w < kNumThreads / 32; ++w)
        amax = max(amax, warp_amax[w]);
    return amax;
}

template <typename Config, bool kBF16>
__device__ __forceinline__ void per_block(const uint8_t* x, uint8_t* out, float* sf, uint32_t rows, uint32_t cols,
                                          uint64_t x_stride, uint64_t out_stride, uint32_t sf_stride_0,
                                          uint32_t sf_stride_1) {
    constexpr uint32_t kGran = Config::kGran, kVec = Config::kVec, kNumThreads = Config::kNumThreads;
    constexpr uint32_t kThreadsPerRow = kGran / kVec;
    DG_STATIC_ASSERT(kNumThreads % kThreadsPerRow == 0, "whole rows of a block per pass");
    constexpr uint32_t kRowsPerPass = kNumThreads / kThreadsPerRow;
    DG_STATIC_ASSERT(kGran % kRowsPerPass == 0, "whole passes per block");
    constexpr uint32_t kPasses = kGran / kRowsPerPass;
    constexpr uint32_t kElementBytes = kBF16 ? 2 : 4;

    const uint32_t col_blocks = ceil_div(cols, kGran);
    const uint32_t row_block = blockIdx.x / col_blocks, col_block = blockIdx.x % col_blocks;
    const uint32_t col = col_block * kGran + (threadIdx.x % kThreadsPerRow) * kVec;
    const uint32_t first_row = row_block * kGran + threadIdx.x / kThreadsPerRow;

    Vec<kBF16, kVec> v[kPasses];
    #pragma unroll
    for (uint32_t p = 0; p < kPasses; ++p) {
        const uint32_t row = first_row + p * kRowsPerPass;
        if (row < rows and col < cols)
            v[p].load(x + (row * x_stride + col) * kElementBytes);
        else
            v[p].zero();
    }
    float a = 0.0f;
    #pragma unroll
    for (uint32_t p = 0; p < kPasses; ++p)
        a = vec_abs_max(v[p], a);
    const uint32_t amax = cta_amax<kNumThreads>(__float_as_uint(a));

    const GroupScale<Config::kUE8M0> scale(amax);
    #pragma unroll
    for (uint32_t p = 0; p < kPasses; ++p) {
        const uint32_t row = first_row + p * kRowsPerPass;
        if (row >= rows or col >= cols)
            continue;
        if (scale.finite) {
            quantise_store<kVec>([&](uint32_t i) { return v[p].get(i); },
                                 [&](uint32_t) -> const auto& { return scale; }, out + row * out_stride + col);
        } else {
            quantise_store_slow<kBF16>(x + (row * x_stride + col) * kElementBytes, out + row * out_stride + col, kVec,
                                       [&](uint32_t) { return scale.scale; });
        }
    }
    if (threadIdx.x == 0) {
        sf[static_cast<uint64_t>(row_block) * sf_stride_0 + static_cast<uint64_t>(col_block) * sf_stride_1] =
            scale.scale;
    }
}

template <typename Config, bool kBF16>
__device__ __forceinline__ void per_channel(const uint8_t* x, uint8_t* out, float* sf, uint32_t rows, uint32_t cols,
                                            uint64_t x_stride, uint64_t out_stride, uint32_t sf_stride_0,
                                            uint32_t sf_stride_1) {
    constexpr uint32_t kGran = Config::kGran, kVec = Config::kVec, kNumThreads = Config::kNumThreads;
    constexpr uint32_t kLanesPerRow = Config::kLanesPerRow;
    constexpr uint32_t kColsPerCta = kLanesPerRow * kVec;
    constexpr uint32_t kRowSlots = kNumThreads / kLanesPerRow;  // threads down a column
    DG_STATIC_ASSERT(32 % kLanesPerRow == 0 and kGran % kRowSlots == 0, "whole rows per warp and per thread");
    constexpr uint32_t kRowsPerThread = kGran / kRowSlots;
    constexpr uint32_t kElementBytes = kBF16 ? 2 : 4;
    // Each row slot's per-column amax, then, in slot 0, the CTA's.
    __shared__ __align__(16) uint32_t col_amax[kRowSlots][kColsPerCta];

    const uint32_t col_tiles = ceil_div(cols, kColsPerCta);
    const uint32_t row_block = blockIdx.x / col_tiles, col_tile = blockIdx.x % col_tiles;
    const uint32_t slot = threadIdx.x / kLanesPerRow, lane = threadIdx.x % kLanesPerRow;
    const uint32_t col = col_tile * kColsPerCta + lane * kVec;
    const uint32_t first_row = row_block * kGran + slot * kRowsPerThread;  // rows % kGran == 0: all rows exist
    const bool col_ok = col < cols;

    // A thread's rows are consecutive: first_row + i.
    Vec<kBF16, kVec> v[kRowsPerThread];
    #pragma unroll
    for (uint32_t i = 0; i < kRowsPerThread; ++i) {
        if (col_ok)
            v[i].load(x + ((first_row + i) * x_stride + col) * kElementBytes);
        else
            v[i].zero();
    }
    uint32_t partial[kVec];
    #pragma unroll
    for (uint32_t j = 0; j < kVec; ++j) {
        float a = 0.0f;
        #pragma unroll
        for (uint32_t i = 0; i < kRowsPerThread; ++i)
            a = abs_max_nan(a, v[i].get(j));
        partial[j] = __float_as_uint(a);
    }
    store_shared_words<kVec>(&col_amax[slot][lane * kVec], partial);
    __syncthreads();

    // Each column's amax over the slots and its scale, by one thread (the scales' store is coalesced here).
    for (uint32_t c = threadIdx.x; c < kColsPerCta; c += kNumThreads) {
        uint32_t amax = col_amax[0][c];
        #pragma unroll
        for (uint32_t r = 1; r < kRowSlots; ++r)
            amax = max(amax, col_amax[r][c]);
        col_amax[0][c] = amax;  // only this thread reads or writes column c in this phase
        const uint32_t sf_col = col_tile * kColsPerCta + c;
        if (sf_col < cols) {
            sf[static_cast<uint64_t>(row_block) * sf_stride_0 + static_cast<uint64_t>(sf_col) * sf_stride_1] =
                GroupScale<Config::kUE8M0>(amax).scale;
        }
    }
    __syncthreads();
    if (not col_ok)
        return;

    uint32_t amax[kVec];
    load_shared_words<kVec>(&col_amax[0][lane * kVec], amax);
    GroupScale<Config::kUE8M0> scale[kVec];
    bool finite = true;
    #pragma unroll
    for (uint32_t j = 0; j < kVec; ++j) {
        scale[j] = GroupScale<Config::kUE8M0>(amax[j]);
        finite = finite and scale[j].finite;
    }
    // The rare path reads its columns' amaxes again from shared memory (by a run-time column index).
    const auto slow_scale = [&](uint32_t j) { return GroupScale<Config::kUE8M0>(col_amax[0][lane * kVec + j]).scale; };
    #pragma unroll
    for (uint32_t i = 0; i < kRowsPerThread; ++i) {
        uint8_t* dst = out + (first_row + i) * out_stride + col;
        if (finite) {
            quantise_store<kVec>([&](uint32_t j) { return v[i].get(j); },
                                 [&](uint32_t j) -> const auto& { return scale[j]; }, dst);
        } else {
            quantise_store_slow<kBF16>(x + ((first_row + i) * x_stride + col) * kElementBytes, dst, kVec, slow_scale);
        }
    }
}

}  // namespace cast

// Config: kKind (CastKind), kInputBF16 (else FP32), kVec (elements per vector: 1..8 for BF16, 1..4 for FP32),
// kUE8M0, kGran (128), kNumThreads, kMinBlocks (CTAs per SM the registers must allow), kRounds (per token: rounds
// of groups per warp; 1 otherwise), kLanesPerRow (per channel: threads across a row; 32 otherwise).
// Grid: per token ceil(rows * ceil(ceil(cols / kGran) / groups per warp) / warps per CTA); per block
// ceil(rows / kGran) * ceil(cols / kGran); per channel (rows / kGran) * ceil(cols / (kLanesPerRow kVec)).
template <typename Config>
__global__ void __launch_bounds__(Config::kNumThreads, Config::kMinBlocks)
fp8_cast_impl(const void* __restrict__ x, uint8_t* __restrict__ out, float* __restrict__ sf,
              const uint32_t rows, const uint32_t cols, const uint64_t x_stride, const uint64_t out_stride,
              const uint32_t sf_stride_0, const uint32_t sf_stride_1) {
    DG_STATIC_ASSERT(Config::kGran == 128, "the casts' kernels take 128-element groups");
    DG_STATIC_ASSERT(Config::kVec >= 1 and Config::kVec * (Config::kInputBF16 ? 2 : 4) <= 16 and
                     (Config::kVec & (Config::kVec - 1)) == 0, "vectors of a power of two elements, <= 16 bytes");
    DG_STATIC_ASSERT(Config::kNumThreads % 32 == 0, "whole warps");
    const auto* x_bytes = static_cast<const uint8_t*>(x);
    constexpr bool kBF16 = Config::kInputBF16;
    if constexpr (Config::kKind == CastKind::PerToken)
        cast::per_token<Config, kBF16>(x_bytes, out, sf, rows, cols, x_stride, out_stride, sf_stride_0, sf_stride_1);
    else if constexpr (Config::kKind == CastKind::PerBlock)
        cast::per_block<Config, kBF16>(x_bytes, out, sf, rows, cols, x_stride, out_stride, sf_stride_0, sf_stride_1);
    else
        cast::per_channel<Config, kBF16>(x_bytes, out, sf, rows, cols, x_stride, out_stride, sf_stride_0,
                                         sf_stride_1);
}

}  // namespace deep_gemm::sm90
