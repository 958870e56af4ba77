// Register-blocked tile products and row operations for the fused attention kernels (float, double).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "backend/cpu/philox_lanes.h"
#include "backend/vec_math.h"

namespace kiln::backend::cpu::attn {

// W-byte vectors (vec_math.h): 64 bytes where AVX-512 code runs, 32 elsewhere (wide_vectors()).
using math::kLanes;
using math::loadu;
using math::storeu;
using math::Vec;
using math::wide_vectors;

// c[r][0, NV lanes) (+)= sum_t a[r ar + t at] * b[t ldb + 0, NV lanes): R rows of c stay in
// registers while b's rows stream past, each a value broadcast once. a's two strides let one
// kernel read a tile (at = 1) or its transpose (ar = 1).
template <class T, int R, int NV, int W>
KILN_VEC_INLINE void micro(const T* a, int64_t ar, int64_t at, const T* b, int64_t ldb, int64_t K, T* c,
                           int64_t ldc, bool accumulate) {
  constexpr int L = kLanes<T, W>;
  Vec<T, W> x[R][NV];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v) x[r][v] = accumulate ? loadu<T, W>(c + r * ldc + v * L) : Vec<T, W>{};
  for (int64_t t = 0; t < K; ++t) {
    Vec<T, W> bv[NV];
    for (int v = 0; v < NV; ++v) bv[v] = loadu<T, W>(b + t * ldb + v * L);
    for (int r = 0; r < R; ++r) {
      const T s = a[r * ar + t * at];
      for (int v = 0; v < NV; ++v) x[r][v] += s * bv[v];
    }
  }
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v) storeu<T, W>(c + r * ldc + v * L, x[r][v]);
}

template <class T, int R, int W>
KILN_VEC_INLINE void micro_nv(int nv, const T* a, int64_t ar, int64_t at, const T* b, int64_t ldb, int64_t K, T* c,
                              int64_t ldc, bool accumulate) {
  switch (nv) {
    case 1: micro<T, R, 1, W>(a, ar, at, b, ldb, K, c, ldc, accumulate); break;
    case 2: micro<T, R, 2, W>(a, ar, at, b, ldb, K, c, ldc, accumulate); break;
    case 3: micro<T, R, 3, W>(a, ar, at, b, ldb, K, c, ldc, accumulate); break;
    default: micro<T, R, 4, W>(a, ar, at, b, ldb, K, c, ldc, accumulate); break;
  }
}

// Tiles of R rows by up to NV W-byte vectors of C.
template <class T, int R, int NV, int W>
KILN_VEC_INLINE void gemm_tiles(const T* a, int64_t ar, int64_t at, int64_t M, const T* b, int64_t ldb, int64_t K,
                                int64_t N, T* c, int64_t ldc, bool accumulate) {
  constexpr int L = kLanes<T, W>;
  for (int64_t c0 = 0; c0 < N; c0 += NV * L) {
    const int nv = static_cast<int>(std::min<int64_t>(NV, (N - c0) / L));
    int64_t r = 0;
    for (; r + R <= M; r += R)
      micro_nv<T, R, W>(nv, a + r * ar, ar, at, b + c0, ldb, K, c + r * ldc + c0, ldc, accumulate);
    for (; r < M; ++r) micro_nv<T, 1, W>(nv, a + r * ar, ar, at, b + c0, ldb, K, c + r * ldc + c0, ldc, accumulate);
  }
}

// C[M, N] (+)= A[M, K] B[K, N] with A(r, t) = a[r ar + t at], B row-major (ldb), N a multiple of
// the (64-byte) lane count (the callers pad their tiles with zeros).
template <class T>
KILN_VEC_INLINE void gemm(const T* a, int64_t ar, int64_t at, int64_t M, const T* b, int64_t ldb, int64_t K, int64_t N,
                          T* c, int64_t ldc, bool accumulate) {
  if (wide_vectors()) gemm_tiles<T, 4, 4, 64>(a, ar, at, M, b, ldb, K, N, c, ldc, accumulate);
  else gemm_tiles<T, 4, 2, 32>(a, ar, at, M, b, ldb, K, N, c, ldc, accumulate);
}

// exp over n elements (n a multiple of the 64-byte lane count) of x - sub, in place; returns their
// sum. float uses the vectorised exp of vec_math.h; double uses libm.
template <class T>
KILN_VEC_INLINE T exp_sub_sum(T* x, int64_t n, T sub) {
  T s = 0;
  if constexpr (sizeof(T) == 4) {
    if (wide_vectors()) math::exp_sum_vectors<64, true>(x, x, n, sub, s);
    else math::exp_sum_vectors<32, true>(x, x, n, sub, s);
  } else {
    for (int64_t j = 0; j < n; ++j) s += (x[j] = std::exp(x[j] - sub));
  }
  return s;
}

// max(a, b), NaN when b is (a NaN a stays: the running maximum keeps a NaN once it has one).
template <class T>
inline T max_or_nan(T a, T b) {
  return b > a || b != b ? b : a;
}

template <class T, int W>
KILN_VEC_INLINE T row_max_w(const T* x, int64_t n) {
  Vec<T, W> m = Vec<T, W>{} - std::numeric_limits<T>::infinity();
  for (int64_t j = 0; j < n; j += kLanes<T, W>) {
    Vec<T, W> v = loadu<T, W>(x + j);
    m = (v > m) | (v != v) ? v : m;
  }
  T r = -std::numeric_limits<T>::infinity();
  for (int l = 0; l < kLanes<T, W>; ++l) r = max_or_nan(r, m[l]);
  return r;
}
// The largest of n elements (n a multiple of the 64-byte lane count); NaN if any is NaN.
template <class T>
KILN_VEC_INLINE T row_max(const T* x, int64_t n) {
  return wide_vectors() ? row_max_w<T, 64>(x, n) : row_max_w<T, 32>(x, n);
}

}  // namespace kiln::backend::cpu::attn
