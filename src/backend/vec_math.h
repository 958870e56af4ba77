// exp, tanh and erf for float32 that vectorize: one algorithm written on the scalar float and on
// a 16-lane GCC vector type (libm's are scalar calls the compiler cannot vectorize).
// exp and tanh are within a few ulp; erf within 1.5e-7 absolute (used by GELU).
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

// Everything here is force-inlined: a 64-byte vector passed to an out-of-line copy compiled for
// another instruction set (the loops are target_clones) would use a different calling convention.
#define KILN_VEC_INLINE __attribute__((always_inline)) inline

namespace kiln::math {

// 16 floats; on AVX-512 one register, on AVX2 two, on SSE four (the compiler splits it).
using vfloat = float __attribute__((vector_size(64)));
using vint = int32_t __attribute__((vector_size(64)));

template <class T> struct ElemOf { using type = T; };
template <> struct ElemOf<vfloat> { using type = float; };
// A constant of T's element type: scalar arithmetic broadcasts over vectors.
template <class T, class V> KILN_VEC_INLINE constexpr typename ElemOf<T>::type K(V v) { return static_cast<typename ElemOf<T>::type>(v); }

namespace detail {
KILN_VEC_INLINE float select(bool c, float a, float b) { return c ? a : b; }
KILN_VEC_INLINE vfloat select(vint c, vfloat a, vfloat b) { return c ? a : b; }
KILN_VEC_INLINE int32_t to_int(float x) { return static_cast<int32_t>(x); }
KILN_VEC_INLINE vint to_int(vfloat x) { return __builtin_convertvector(x, vint); }
KILN_VEC_INLINE float to_float(int32_t x) { return static_cast<float>(x); }
KILN_VEC_INLINE vfloat to_float(vint x) { return __builtin_convertvector(x, vfloat); }
KILN_VEC_INLINE float from_bits(int32_t x) { return __builtin_bit_cast(float, x); }
KILN_VEC_INLINE vfloat from_bits(vint x) { return reinterpret_cast<vfloat>(x); }
KILN_VEC_INLINE float splat(float v, float) { return v; }
KILN_VEC_INLINE vfloat splat(float v, vfloat) { return vfloat{} + v; }
KILN_VEC_INLINE float abs(float x) { return std::fabs(x); }
KILN_VEC_INLINE vfloat abs(vfloat x) { return select(x < 0.0f, -x, x); }

// exp by x = n ln2 + r, |r| <= ln2/2, and a degree-6 polynomial (Cephes' expf coefficients);
// 2^n is built in the exponent bits, in two steps at the ends of the range (n = 128 overflows
// the field just below float's largest value; n < -126 gives subnormal results).
template <class F> KILN_VEC_INLINE F exp_f(F x) {
  const float hi = 88.72283905206835f, lo = -103.972084f;
  F xc = select(x > hi, splat(hi, x), select(x < lo, splat(lo, x), x));
  F y0 = xc * 1.44269504088896341f + 0.5f;
  F t = to_float(to_int(y0));  // floor by truncation and a fix-up
  F n = select(t > y0, t - 1.0f, t);
  F r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  F p = splat(1.9875691500e-4f, x);
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  auto big = n > 127.5f, tiny = n < -126.5f;
  F m = select(big, n - 1.0f, select(tiny, n + 64.0f, n));
  F y = p * from_bits((to_int(m) + 127) << 23);
  y = select(big, y * 2.0f, select(tiny, y * 5.42101086242752217e-20f, y));  // 2^-64
  y = select(x > hi, splat(INFINITY, x), y);
  y = select(x < lo, splat(0.0f, x), y);
  return select(x != x, x, y);
}

// tanh: an odd polynomial below 0.625 (Cephes' tanhf), 1 - 2 / (exp(2|x|) + 1) above.
template <class F> KILN_VEC_INLINE F tanh_f(F x) {
  F ax = abs(x);
  F s = x * x;
  F small = ((((-5.70498872745e-3f * s + 2.06390887954e-2f) * s - 5.37397155531e-2f) * s + 1.33314422036e-1f) * s -
             3.33332819422e-1f) * s * x + x;
  F e = exp_f(2.0f * select(ax < 10.0f, ax, splat(10.0f, x)));  // from 9.01 on, tanh rounds to 1
  F large = 1.0f - 2.0f / (e + 1.0f);
  large = select(x < 0.0f, -large, large);
  return select(x != x, x, select(ax < 0.625f, small, large));
}

// erf by Abramowitz & Stegun 7.1.26, odd extension.
template <class F> KILN_VEC_INLINE F erf_f(F x) {
  F ax = abs(x);
  F t = 1.0f / (1.0f + 0.3275911f * ax);
  F poly = ((((1.061405429f * t - 1.453152027f) * t + 1.421413741f) * t - 0.284496736f) * t + 0.254829592f) * t;
  F y = 1.0f - poly * exp_f(-ax * ax);
  return select(x != x, x, select(x < 0.0f, -y, y));
}
}  // namespace detail

KILN_VEC_INLINE vfloat exp(vfloat x) { return detail::exp_f(x); }
KILN_VEC_INLINE vfloat tanh(vfloat x) { return detail::tanh_f(x); }
KILN_VEC_INLINE vfloat erf(vfloat x) { return detail::erf_f(x); }
// Scalar float uses the same algorithm, so an array's vector body and scalar tail agree.
KILN_VEC_INLINE float exp(float x) { return detail::exp_f(x); }
KILN_VEC_INLINE float tanh(float x) { return detail::tanh_f(x); }
KILN_VEC_INLINE float erf(float x) { return detail::erf_f(x); }
KILN_VEC_INLINE double exp(double x) { return std::exp(x); }
KILN_VEC_INLINE double tanh(double x) { return std::tanh(x); }
KILN_VEC_INLINE double erf(double x) { return std::erf(x); }

}  // namespace kiln::math
