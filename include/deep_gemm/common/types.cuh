#pragma once

// Fixed-width integers and compile-time integer constants, without the standard library.
// NOTES: NVRTC has no <cstdint>, and CuTe/CCCL headers that supply these types cost seconds of front-end time per
// compile; nvcc does have <cstdint>, so the names live inside deep_gemm (same types, no clash with ::uint32_t).

namespace deep_gemm {

using uint8_t = unsigned char;
using uint16_t = unsigned short;
using int32_t = int;
using uint32_t = unsigned int;
using uint64_t = unsigned long long;
static_assert(sizeof(uint16_t) == 2 and sizeof(uint32_t) == 4 and sizeof(uint64_t) == 8,
              "deep_gemm: unexpected fundamental type sizes");

// An integer as a type: lets a generic lambda use its argument as a compile-time constant
// (`decltype(i)::value`) while it still converts to a plain run-time uint32_t.
template <uint32_t N>
struct Int {
    static constexpr uint32_t value = N;
    __host__ __device__ constexpr operator uint32_t() const { return N; }
};

}  // namespace deep_gemm
