// Element types (dtypes), the 16-bit float types, and PyTorch's type promotion rules.
#pragma once

#include <cstdint>
#include <cstring>
#include <ostream>

#if defined(__CUDACC__)
#define KILN_HOST_DEVICE __host__ __device__
#else
#define KILN_HOST_DEVICE
#endif

namespace kiln {

enum class ScalarType : int8_t { Bool, UInt8, Int32, Int64, Float16, BFloat16, Float32, Float64 };
using Dtype = ScalarType;
inline constexpr int kNumScalarTypes = 8;

inline constexpr ScalarType kBool = ScalarType::Bool;
inline constexpr ScalarType kUInt8 = ScalarType::UInt8;
inline constexpr ScalarType kByte = ScalarType::UInt8;
inline constexpr ScalarType kInt32 = ScalarType::Int32;
inline constexpr ScalarType kInt = ScalarType::Int32;
inline constexpr ScalarType kInt64 = ScalarType::Int64;
inline constexpr ScalarType kLong = ScalarType::Int64;
inline constexpr ScalarType kFloat16 = ScalarType::Float16;
inline constexpr ScalarType kHalf = ScalarType::Float16;
inline constexpr ScalarType kBFloat16 = ScalarType::BFloat16;
inline constexpr ScalarType kFloat32 = ScalarType::Float32;
inline constexpr ScalarType kFloat = ScalarType::Float32;
inline constexpr ScalarType kFloat64 = ScalarType::Float64;
inline constexpr ScalarType kDouble = ScalarType::Float64;

// bfloat16: the upper half of a float32; conversion rounds to nearest even.
struct BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  KILN_HOST_DEVICE BFloat16(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) {
      bits = 0x7fc0;  // NaN stays NaN
    } else {
      u += 0x7fffu + ((u >> 16) & 1u);
      bits = static_cast<uint16_t>(u >> 16);
    }
  }
  KILN_HOST_DEVICE operator float() const {
    uint32_t u = static_cast<uint32_t>(bits) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
};

// IEEE binary16; conversion rounds to nearest even, handles subnormals, inf and NaN.
struct Half {
  uint16_t bits = 0;
  Half() = default;
  KILN_HOST_DEVICE Half(float f) { bits = from_float(f); }
  KILN_HOST_DEVICE operator float() const { return to_float(bits); }

  KILN_HOST_DEVICE static uint16_t from_float(float f) {
#if defined(__CUDA_ARCH__)
    // The GPU's conversion instruction rounds the same way; only NaN keeps the CPU's bits below.
    if (f == f) {
      uint16_t h;
      asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
      return h;
    }
#endif
    // Every case computed and one chosen, without branches, so that loops of conversions
    // vectorise (with branches, a float32 to float16 cast ran at 2.7 GB/s, bfloat16's at 53).
    uint32_t u;
    std::memcpy(&u, &f, 4);
    const uint32_t sign = (u >> 16) & 0x8000u;
    const uint32_t abs = u & 0x7fffffffu;
    // Normal results: exponent rebiased 127 -> 15, rounded to nearest even at bit 13.
    const uint32_t r = abs - 0x38000000u;
    const uint32_t normal = (r + 0xfffu + ((r >> 13) & 1u)) >> 13;
    // Subnormal results (and zero): |f| + 0.5 puts the half's subnormal significand in the low
    // bits of 0.5's, the addition rounding it to nearest even.
    float a, sum;
    std::memcpy(&a, &abs, 4);
    sum = a + 0.5f;
    uint32_t s;
    std::memcpy(&s, &sum, 4);
    const uint32_t subnormal = s - 0x3f000000u;
    uint32_t h = abs < 0x38800000u ? subnormal : normal;
    h = abs >= 0x477ff000u ? 0x7c00u : h;  // overflow to inf
    h = abs > 0x7f800000u ? 0x7e00u : h;   // NaN
    return static_cast<uint16_t>(sign | h);
  }
  KILN_HOST_DEVICE static float to_float(uint16_t h) {
#if defined(__CUDA_ARCH__)
    if ((h & 0x7c00u) != 0x7c00u) {  // finite: exact either way (NaN payloads kept below)
      float f;
      asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
      return f;
    }
#endif
    // Without branches, as from_float: the bits shifted into place and rebiased, then inf/NaN
    // rebiased again, and zero/subnormal renormalised by an exact float subtraction.
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    const uint32_t bits = (static_cast<uint32_t>(h) & 0x7fffu) << 13;
    const uint32_t exp = bits & 0x0f800000u;
    const uint32_t u = bits + 0x38000000u;  // exponent 15 -> 127
    float low;
    const uint32_t lu = u + 0x00800000u;
    std::memcpy(&low, &lu, 4);
    low -= 6.103515625e-05f;  // 2^-14
    uint32_t lb;
    std::memcpy(&lb, &low, 4);
    uint32_t out = exp == 0x0f800000u ? u + 0x38000000u : u;  // inf and NaN: exponent 255
    out = exp == 0 ? lb : out;
    out |= sign;
    float f;
    std::memcpy(&f, &out, 4);
    return f;
  }
};

size_t element_size(ScalarType t);
const char* dtype_name(ScalarType t);  // "float32", "int64", ...
std::ostream& operator<<(std::ostream& os, ScalarType t);

constexpr bool is_floating_point(ScalarType t) {
  return t == kFloat16 || t == kBFloat16 || t == kFloat32 || t == kFloat64;
}
constexpr bool is_integral(ScalarType t, bool include_bool) {
  return t == kUInt8 || t == kInt32 || t == kInt64 || (include_bool && t == kBool);
}
// The smallest type both a and b convert to without losing their category (PyTorch's table).
ScalarType promote_types(ScalarType a, ScalarType b);
// The default float type for ops that turn integers into floats (exp, mean, ...).
inline constexpr ScalarType kDefaultFloat = kFloat32;

template <class T> struct DtypeOf;
template <> struct DtypeOf<bool> { static constexpr ScalarType value = kBool; };
template <> struct DtypeOf<uint8_t> { static constexpr ScalarType value = kUInt8; };
template <> struct DtypeOf<int32_t> { static constexpr ScalarType value = kInt32; };
template <> struct DtypeOf<int64_t> { static constexpr ScalarType value = kInt64; };
template <> struct DtypeOf<Half> { static constexpr ScalarType value = kFloat16; };
template <> struct DtypeOf<BFloat16> { static constexpr ScalarType value = kBFloat16; };
template <> struct DtypeOf<float> { static constexpr ScalarType value = kFloat32; };
template <> struct DtypeOf<double> { static constexpr ScalarType value = kFloat64; };
template <class T> inline constexpr ScalarType dtype_of = DtypeOf<T>::value;

}  // namespace kiln
