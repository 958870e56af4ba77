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
    uint32_t u;
    std::memcpy(&u, &f, 4);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t abs = u & 0x7fffffffu;
    if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);
    if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow to inf
    if (abs < 0x38800000u) {                                              // subnormal or zero
      if (abs < 0x33000000u) return static_cast<uint16_t>(sign);
      uint32_t e = abs >> 23;
      uint32_t m = (abs & 0x7fffffu) | 0x800000u;
      uint32_t shift = 126 - e;  // 14..24
      uint32_t half = m >> shift;
      uint32_t rem = m & ((1u << shift) - 1);
      uint32_t mid = 1u << (shift - 1);
      if (rem > mid || (rem == mid && (half & 1u))) ++half;
      return static_cast<uint16_t>(sign | half);
    }
    uint32_t r = abs - 0x38000000u;  // rebias exponent 127 -> 15
    uint32_t half = r >> 13;
    uint32_t rem = r & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (half & 1u))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  KILN_HOST_DEVICE static float to_float(uint16_t h) {
#if defined(__CUDA_ARCH__)
    if ((h & 0x7c00u) != 0x7c00u) {  // finite: exact either way (NaN payloads kept below)
      float f;
      asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
      return f;
    }
#endif
    uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu;
    uint32_t m = h & 0x3ffu;
    uint32_t u;
    if (e == 0) {
      if (m == 0) {
        u = sign;
      } else {  // subnormal: normalise
        e = 113;
        while ((m & 0x400u) == 0) { m <<= 1; --e; }
        u = sign | (e << 23) | ((m & 0x3ffu) << 13);
      }
    } else if (e == 31) {
      u = sign | 0x7f800000u | (m << 13);
    } else {
      u = sign | ((e + 112) << 23) | (m << 13);
    }
    float f;
    std::memcpy(&f, &u, 4);
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
