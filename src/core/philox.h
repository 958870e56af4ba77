// Philox4x32-10 and the number transforms built on it; shared by the CPU and CUDA kernels.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "kiln/dtype.h"

// Inlined everywhere, so that a CPU loop compiled per instruction set (KILN_VECTORIZE) runs them
// in its own instructions (fma as an instruction, not a libm call) and vectorises them.
#if defined(__CUDACC__)
#define KILN_PHILOX_INLINE __forceinline__
#else
#define KILN_PHILOX_INLINE __attribute__((always_inline)) inline
#endif

namespace kiln::philox {

struct U32x4 {
  uint32_t v[4];
};

KILN_HOST_DEVICE inline uint32_t mulhilo(uint32_t a, uint32_t b, uint32_t* hi) {
  uint64_t p = static_cast<uint64_t>(a) * b;
  *hi = static_cast<uint32_t>(p >> 32);
  return static_cast<uint32_t>(p);
}

// Words 2 * half and 2 * half + 1 of a block as one 64-bit number, the first in the high half.
KILN_HOST_DEVICE inline uint64_t word64(const U32x4& r, int half) {
  return (static_cast<uint64_t>(r.v[2 * half]) << 32) | r.v[2 * half + 1];
}

// Ten rounds of Philox4x32 on counter (ctr, 0) with key seed; deterministic everywhere.
KILN_HOST_DEVICE inline U32x4 philox(uint64_t seed, uint64_t ctr) {
  uint32_t c0 = static_cast<uint32_t>(ctr), c1 = static_cast<uint32_t>(ctr >> 32), c2 = 0, c3 = 0;
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  for (int r = 0; r < 10; ++r) {
    uint32_t hi0, hi1;
    uint32_t lo0 = mulhilo(0xD2511F53u, c0, &hi0);
    uint32_t lo1 = mulhilo(0xCD9E8D57u, c2, &hi1);
    uint32_t n0 = hi1 ^ c1 ^ k0, n1 = lo1, n2 = hi0 ^ c3 ^ k1, n3 = lo0;
    c0 = n0; c1 = n1; c2 = n2; c3 = n3;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return {{c0, c1, c2, c3}};
}

// Element i of a draw that started at counter `offset` uses word i % 4 of counter offset + i / 4
// (the kernels compute each counter once and use its four words).

// Uniform in [0, 1) with `bits` (1 to 24) random bits: with no more bits than a float type's
// significand holds, rounding to that type cannot reach 1. (Through int32, which the bits fit:
// CPUs convert vectors of int32 to double, not of uint32.)
KILN_HOST_DEVICE KILN_PHILOX_INLINE double uniform01(uint32_t w, int bits) {
  return static_cast<int32_t>(w >> (32 - bits)) * (1.0 / static_cast<double>(1u << bits));  // exact: a power of 2
}

// Uniform in [0, 1) with 24 random bits (exact in float32).
KILN_HOST_DEVICE KILN_PHILOX_INLINE double uniform01(uint32_t w) { return uniform01(w, 24); }

// Box-Muller's logarithm, sine and cosine, written out so that every device rounds them alike:
// libm's and CUDA's double functions agree only to an ulp or two, which a float64 draw shows and a
// float32 draw now and then. Each step is an IEEE operation (+, -, *, /, sqrt, or fma
// spelled out); where nvcc would contract a product and a sum into one fused multiply-add, the
// product is exact, so that contraction cannot change a bit. Branch-free, so that the CPU's loops
// of them vectorise. Accuracy: within 2 ulp of the exact function (tests/test_random.cpp).
namespace detail {

KILN_HOST_DEVICE KILN_PHILOX_INLINE double fused(double a, double b, double c) { return std::fma(a, b, c); }

KILN_HOST_DEVICE KILN_PHILOX_INLINE double bits_to_double(uint64_t u) {
  double d;
  std::memcpy(&d, &u, 8);
  return d;
}
KILN_HOST_DEVICE KILN_PHILOX_INLINE uint64_t double_to_bits(double d) {
  uint64_t u;
  std::memcpy(&u, &d, 8);
  return u;
}

// log(x) for a normal x > 0: x = 2^k f with f in [sqrt(1/2), sqrt(2)); log f = 2 atanh(s) with
// s = (f - 1) / (f + 1), |s| <= 0.172, by its series to s^21 (the next term is below 2^-60 of it).
// k and f come from x's bits by integer steps only (no select: g++ vectorises none on an ordered
// float comparison, which could trap, for AVX2): k = floor((bits - bits(sqrt(1/2))) / 2^52), as
// k + 2048 in the top 12 bits; f's bits are x's less k in the exponent.
KILN_HOST_DEVICE KILN_PHILOX_INLINE double log_positive(double x) {
  const uint64_t bits = double_to_bits(x);
  const uint64_t k_biased = ((bits - 0x3FE6A09E667F3BCDull) >> 52) ^ 0x800;  // k + 2048, in [0, 4096)
  const double f = bits_to_double(bits - ((k_biased - 0x800) << 52));
  // k as a double without an integer conversion: (2^52 + k + 2048) - (2^52 + 2048).
  const double e = bits_to_double(0x4330000000000000ull | k_biased) - 4503599627372544.0;
  const double s = (f - 1.0) / (f + 1.0), z = s * s;
  double p = 0.09523809523809523;  // 2/21
  p = fused(z, p, 0.10526315789473684);
  p = fused(z, p, 0.11764705882352941);
  p = fused(z, p, 0.13333333333333333);
  p = fused(z, p, 0.15384615384615385);
  p = fused(z, p, 0.18181818181818182);
  p = fused(z, p, 0.2222222222222222);
  p = fused(z, p, 0.2857142857142857);
  p = fused(z, p, 0.4);
  p = fused(z, p, 0.6666666666666666);  // 2/3
  const double log_f = fused(s * z, p, 2.0 * s);
  // e log 2 in two parts: the first's product with e (|e| < 2^11) is exact.
  return fused(e, 6.93147180369123816490e-01, fused(e, 1.90821492927058770002e-10, log_f));
}

// sin and cos of x in [-pi/4, pi/4], by their Taylor series to x^17 and x^18 (the next terms are
// below 2^-62 of the result).
KILN_HOST_DEVICE KILN_PHILOX_INLINE void sincos_small(double x, double* s, double* c) {
  const double z = x * x;
  double ps = 2.8114572543455206e-15;  // 1/17!
  ps = fused(z, ps, -7.647163731819816e-13);
  ps = fused(z, ps, 1.6059043836821613e-10);
  ps = fused(z, ps, -2.505210838544172e-08);
  ps = fused(z, ps, 2.7557319223985893e-06);
  ps = fused(z, ps, -0.0001984126984126984);
  ps = fused(z, ps, 0.008333333333333333);
  ps = fused(z, ps, -0.16666666666666666);
  *s = fused(x * z, ps, x);
  double pc = 1.5619206968586225e-16;  // 1/18!
  pc = fused(z, pc, -4.779477332387385e-14);
  pc = fused(z, pc, 1.1470745597729725e-11);
  pc = fused(z, pc, -2.08767569878681e-09);
  pc = fused(z, pc, 2.755731922398589e-07);
  pc = fused(z, pc, -2.48015873015873e-05);
  pc = fused(z, pc, 0.001388888888888889);
  pc = fused(z, pc, -0.041666666666666664);  // cos = 1 - z/2 + z^2 pc
  *c = fused(z * z, -pc, 1.0 - 0.5 * z);
}

}  // namespace detail

// Two standard normals by Box-Muller from a pair of words: z0 = r cos(theta), z1 = r sin(theta),
// r = sqrt(-2 log u1), theta = 2 pi u2. u2 has 24 bits, so theta's reduction to a quarter turn is
// exact: u2 = q/4 + t with |t| <= 1/8, theta = q pi/2 + 2 pi t.
KILN_HOST_DEVICE KILN_PHILOX_INLINE void box_muller(uint32_t w1, uint32_t w2, double* z0, double* z1) {
  const double u1 = (static_cast<int32_t>(w1 >> 8) + 1.0) * (1.0 / 16777217.0);  // (0, 1)
  const double u2 = uniform01(w2);
  const double radius = std::sqrt(-2.0 * detail::log_positive(u1));
  // q = 4 u2 rounded to an integer (0..4) by adding and subtracting 1.5 * 2^52, t = u2 - q/4, both exact.
  const double q = (4.0 * u2 + 6755399441055744.0) - 6755399441055744.0, t = u2 - 0.25 * q;
  // 2 pi t, with 2 pi in two parts (the second's product is a correction far below an ulp).
  const double x = detail::fused(t, 6.283185307179586, t * 2.4492935982947064e-16);
  double s, c;
  detail::sincos_small(x, &s, &c);
  // The quarter turns: q = 1 swaps sine and cosine; q = 1, 2 negate the cosine, q = 2, 3 the sine.
  const bool swap = (q == 1.0) | (q == 3.0), neg_sin = (q == 2.0) | (q == 3.0), neg_cos = (q == 1.0) | (q == 2.0);
  const double sin_t = swap ? c : s, cos_t = swap ? s : c;
  *z0 = radius * cos_t * (neg_cos ? -1.0 : 1.0);
  *z1 = radius * sin_t * (neg_sin ? -1.0 : 1.0);
}

}  // namespace kiln::philox
