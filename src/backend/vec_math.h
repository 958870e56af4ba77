// exp, tanh, erf, log, log1p and expm1 for float32 that vectorize: one algorithm written on the
// scalar float and on GCC vector types of 16 floats (64 bytes, one AVX-512 register) and 8 (32
// bytes, one AVX2 register); libm's are scalar calls the compiler cannot vectorize. exp and tanh
// are within a few ulp, log within 1, log1p and expm1 within 2; erf within 1.5e-7 absolute (used
// by GELU). Also the vector type itself, unaligned loads and stores, and the width a loop should
// use on this CPU.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

// Everything here is force-inlined: a 64-byte vector passed to an out-of-line copy compiled for
// another instruction set (the loops are target_clones) would use a different calling convention.
#define KILN_VEC_INLINE __attribute__((always_inline)) inline

namespace kiln::math {

// W bytes of T. A 64-byte vector is one AVX-512 register; GCC lowers it on AVX2 through the stack
// (several times slower than two 32-byte halves would be), so loops pick W by wide_vectors().
template <class T, int W>
struct VecOf {
  typedef T type __attribute__((vector_size(W)));
};
template <class T, int W = 64> using Vec = typename VecOf<T, W>::type;
template <class T, int W = 64> inline constexpr int kLanes = static_cast<int>(W / sizeof(T));
using vfloat = Vec<float, 64>;
using vfloat8 = Vec<float, 32>;

template <class T, int W = 64> KILN_VEC_INLINE Vec<T, W> loadu(const T* p) {
  Vec<T, W> v;
  __builtin_memcpy(&v, p, sizeof v);
  return v;
}
template <class T, int W = 64> KILN_VEC_INLINE void storeu(T* p, Vec<T, W> v) { __builtin_memcpy(p, &v, sizeof v); }

// o[i] = f(a[i]) (or f(a[i], b[i])) over the whole W-byte vectors of [0, n): the vector bodies of
// the CPU's elementwise loops. Returns where they end; the caller does the tail.
template <int W, class F>
KILN_VEC_INLINE int64_t map_vectors(float* __restrict o, const float* __restrict a, int64_t n, F f) {
  constexpr int L = kLanes<float, W>;
  int64_t i = 0;
  for (; i + L <= n; i += L) storeu<float, W>(o + i, f(loadu<float, W>(a + i)));
  return i;
}
template <int W, class F>
KILN_VEC_INLINE int64_t map_vectors(float* __restrict o, const float* __restrict a, const float* __restrict b,
                                    int64_t n, F f) {
  constexpr int L = kLanes<float, W>;
  int64_t i = 0;
  for (; i + L <= n; i += L) storeu<float, W>(o + i, f(loadu<float, W>(a + i), loadu<float, W>(b + i)));
  return i;
}

// Whether loops should use 64-byte vectors: the code that runs is AVX-512 code (32 registers of
// 64 bytes). A build for AVX-512 knows it; in a build with target_clones the AVX-512 clone runs
// exactly where the CPU has AVX-512; any other build (baseline x86-64, AVX2, another
// architecture) uses 32-byte vectors, which SSE's 16-byte registers also hold well.
inline bool wide_vectors() {
#if defined(__AVX512F__)
  return true;
#elif defined(__x86_64__) && !defined(__clang__) && !defined(KILN_NO_TARGET_CLONES)
  static const bool wide = __builtin_cpu_supports("avx512f");
  return wide;
#else
  return false;
#endif
}

// The float vector types the functions below take.
template <class F> inline constexpr bool kFloatVec = std::is_same_v<F, vfloat> || std::is_same_v<F, vfloat8>;

template <class T> struct ElemOf { using type = T; };
template <class T> requires kFloatVec<T> struct ElemOf<T> { using type = float; };
// A constant of T's element type: scalar arithmetic broadcasts over vectors.
template <class T, class V> KILN_VEC_INLINE constexpr typename ElemOf<T>::type K(V v) { return static_cast<typename ElemOf<T>::type>(v); }

namespace detail {
// The int32 vector of a float vector's lanes (comparison results, conversions, bit patterns).
template <class F> using IntVec = Vec<int32_t, sizeof(F)>;
template <class I> using FloatOfInt = Vec<float, sizeof(I)>;
template <class I> inline constexpr bool kIntVec = std::is_same_v<I, Vec<int32_t, 64>> || std::is_same_v<I, Vec<int32_t, 32>>;

KILN_VEC_INLINE float select(bool c, float a, float b) { return c ? a : b; }
template <class F> requires kFloatVec<F> KILN_VEC_INLINE F select(IntVec<F> c, F a, F b) { return c ? a : b; }
KILN_VEC_INLINE int32_t to_int(float x) { return static_cast<int32_t>(x); }
template <class F> requires kFloatVec<F> KILN_VEC_INLINE IntVec<F> to_int(F x) { return __builtin_convertvector(x, IntVec<F>); }
KILN_VEC_INLINE float to_float(int32_t x) { return static_cast<float>(x); }
template <class I> requires kIntVec<I> KILN_VEC_INLINE FloatOfInt<I> to_float(I x) { return __builtin_convertvector(x, FloatOfInt<I>); }
KILN_VEC_INLINE float from_bits(int32_t x) { return __builtin_bit_cast(float, x); }
KILN_VEC_INLINE int32_t to_bits(float x) { return __builtin_bit_cast(int32_t, x); }
template <class F> requires kFloatVec<F> KILN_VEC_INLINE IntVec<F> to_bits(F x) { return reinterpret_cast<IntVec<F>>(x); }
template <class I> requires kIntVec<I> KILN_VEC_INLINE FloatOfInt<I> from_bits(I x) { return reinterpret_cast<FloatOfInt<I>>(x); }
KILN_VEC_INLINE float splat(float v, float) { return v; }
template <class F> requires kFloatVec<F> KILN_VEC_INLINE F splat(float v, F) { return F{} + v; }
KILN_VEC_INLINE float abs(float x) { return std::fabs(x); }
template <class F> requires kFloatVec<F> KILN_VEC_INLINE F abs(F x) { return select(x < 0.0f, -x, x); }

// exp by x = n ln2 + r, |r| <= ln2/2, and a degree-6 polynomial (Cephes' expf coefficients);
// 2^n is built in the exponent bits, in two steps at the ends of the range (n = 128 overflows
// the field just below float's largest value; n < -126 gives subnormal results). Lanes below lo,
// whose results are set to 0 at the end, compute exp(0) meanwhile: computed at lo they made
// subnormal numbers, which cost a microcode assist per vector (a softmax over rows with 30% of
// -inf, masked padding, took 1.85 times as long as without). Lanes above hi keep their clamp
// (mapping them to 0 as well made GCC scalarise the loops that call this).
template <class F> KILN_VEC_INLINE F exp_f(F x) {
  const float hi = 88.72283905206835f, lo = -103.972084f;
  F xc = select(x > hi, splat(hi, x), select(x < lo, splat(0.0f, x), x));
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

// log by x = 2^e m, m in [sqrt(1/2), sqrt(2)), and a degree-9 polynomial in m - 1 (Cephes' logf
// coefficients), ln2 split in two as in exp_f; subnormal inputs are scaled by 2^23 first. Within
// 1 ulp of glibc's logf on a sample of every 64th float.
// The special values' selects here and below are written so that GCC 12 keeps 64-byte vectors
// whole: two selects with the same arm (r = c1 ? x : r; r = c2 ? x : r) it merges into one on
// c1 | c2, a mask it then builds one lane at a time (log took 3.8 ms for 4M floats so, not 1).
template <class F> KILN_VEC_INLINE F log_f(F x) {
  auto sub = x < 1.17549435e-38f;
  F xs = select(sub, x * 8388608.0f, x);
  auto bits = to_bits(xs);
  F e = to_float(((bits >> 23) & 0xff) - 126) - select(sub, splat(23.0f, x), splat(0.0f, x));
  F m = from_bits((bits & 0x007fffff) | 0x3f000000);  // [0.5, 1)
  auto low = m < 0.707106781186547524f;
  e = select(low, e - 1.0f, e);
  m = select(low, m + m - 1.0f, m - 1.0f);
  F z = m * m;
  F p = splat(7.0376836292e-2f, x);
  p = p * m - 1.1514610310e-1f;
  p = p * m + 1.1676998740e-1f;
  p = p * m - 1.2420140846e-1f;
  p = p * m + 1.4249322787e-1f;
  p = p * m - 1.6668057665e-1f;
  p = p * m + 2.0000714765e-1f;
  p = p * m - 2.4999993993e-1f;
  p = p * m + 3.3333331174e-1f;
  F y = p * m * z + e * -2.12194440e-4f - 0.5f * z;
  F r = m + y + e * 0.693359375f;
  r = select(x == 0.0f, splat(-INFINITY, x), r);
  r = select(x < 0.0f, splat(NAN, x), r);
  return select(x < INFINITY, r, x);  // +inf and NaN give themselves
}

// log1p as log(u) * x / (u - 1), u = 1 + x: the rounding error of u cancels (Goldberg). Within
// 2 ulp of glibc's log1pf on the same sample.
template <class F> KILN_VEC_INLINE F log1p_f(F x) {
  F u = x + 1.0f;
  F d = u - 1.0f;
  F r = log_f(u) * (x / d);
  r = select(d == 0.0f, x, r);        // |x| below 2^-25: log1p(x) rounds to x (and x / 0 was inf)
  return select(u < INFINITY, r, u);  // u, not x: see log_f (u is +inf or NaN exactly when x is)
}

// expm1 as (u - 1) x / log(u), u = exp(x) (Kahan): u's rounding cancels again. Within 2 ulp of
// glibc's expm1f on the same sample.
template <class F> KILN_VEC_INLINE F expm1_f(F x) {
  F u = exp_f(x);
  F um = u - 1.0f;
  F lu = log_f(u);
  F r = um * (x / lu);
  r = select(lu == 0.0f, x, r);    // u == 1: |x| below 2^-25, expm1(x) rounds to x
  r = select(um == -1.0f, um, r);  // u == 0 (x below -103.97; log(u) is -inf)
  return select(u < INFINITY, r, u);
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

template <class F> requires kFloatVec<F> KILN_VEC_INLINE F exp(F x) { return detail::exp_f(x); }
template <class F> requires kFloatVec<F> KILN_VEC_INLINE F tanh(F x) { return detail::tanh_f(x); }
template <class F> requires kFloatVec<F> KILN_VEC_INLINE F erf(F x) { return detail::erf_f(x); }
template <class F> requires kFloatVec<F> KILN_VEC_INLINE F log(F x) { return detail::log_f(x); }
template <class F> requires kFloatVec<F> KILN_VEC_INLINE F log1p(F x) { return detail::log1p_f(x); }
template <class F> requires kFloatVec<F> KILN_VEC_INLINE F expm1(F x) { return detail::expm1_f(x); }
// Scalar float uses the same algorithm, so an array's vector body and scalar tail agree.
KILN_VEC_INLINE float exp(float x) { return detail::exp_f(x); }
KILN_VEC_INLINE float tanh(float x) { return detail::tanh_f(x); }
KILN_VEC_INLINE float erf(float x) { return detail::erf_f(x); }
KILN_VEC_INLINE float log(float x) { return detail::log_f(x); }
KILN_VEC_INLINE float log1p(float x) { return detail::log1p_f(x); }
KILN_VEC_INLINE float expm1(float x) { return detail::expm1_f(x); }
KILN_VEC_INLINE double exp(double x) { return std::exp(x); }
KILN_VEC_INLINE double tanh(double x) { return std::tanh(x); }
KILN_VEC_INLINE double erf(double x) { return std::erf(x); }
KILN_VEC_INLINE double log(double x) { return std::log(x); }
KILN_VEC_INLINE double log1p(double x) { return std::log1p(x); }
KILN_VEC_INLINE double expm1(double x) { return std::expm1(x); }

// s += the sum of exp(x[i] - sub) over the whole W-byte vectors of [0, n), each exp also written
// to y[i] when kStore (y may be x): softmax's denominator. Returns where the vectors end.
template <int W, bool kStore>
KILN_VEC_INLINE int64_t exp_sum_vectors(const float* x, float* y, int64_t n, float sub, float& s) {
  constexpr int L = kLanes<float, W>;
  Vec<float, W> acc{};
  int64_t i = 0;
  for (; i + L <= n; i += L) {
    const Vec<float, W> e = exp(loadu<float, W>(x + i) - sub);
    if constexpr (kStore) storeu<float, W>(y + i, e);
    acc += e;
  }
  for (int l = 0; l < L; ++l) s += acc[l];
  return i;
}

}  // namespace kiln::math
