// Register-blocked tile products and row operations for the fused attention kernels (float, double).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "backend/vec_math.h"

namespace kiln::backend::cpu::attn {

// One W-byte vector (by default 64: 16 floats or 8 doubles, one AVX-512 register). GCC lowers a
// 64-byte vector on AVX2 through the stack, so there the tile products use 32-byte ones.
template <class T, int W>
struct VecOf {
  typedef T type __attribute__((vector_size(W)));
};
template <class T, int W = 64> using Vec = typename VecOf<T, W>::type;
template <class T, int W = 64> inline constexpr int kLanes = static_cast<int>(W / sizeof(T));

template <class T, int W = 64> KILN_VEC_INLINE Vec<T, W> loadu(const T* p) {
  Vec<T, W> v;
  __builtin_memcpy(&v, p, sizeof v);
  return v;
}
template <class T, int W = 64> KILN_VEC_INLINE void storeu(T* p, Vec<T, W> v) { __builtin_memcpy(p, &v, sizeof v); }

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

// Whether the CPU has AVX-512 (32 registers of 64 bytes, which hold the 4 x 4 tile of 64-byte
// vectors); elsewhere 4 x 2 tiles of 32-byte vectors (AVX2's 16 registers of 32 bytes).
inline bool wide_vectors() {
#if defined(__x86_64__)
  static const bool wide = __builtin_cpu_supports("avx512f");
  return wide;
#else
  return false;
#endif
}

// C[M, N] (+)= A[M, K] B[K, N] with A(r, t) = a[r ar + t at], B row-major (ldb), N a multiple of
// the (64-byte) lane count (the callers pad their tiles with zeros).
template <class T>
KILN_VEC_INLINE void gemm(const T* a, int64_t ar, int64_t at, int64_t M, const T* b, int64_t ldb, int64_t K, int64_t N,
                          T* c, int64_t ldc, bool accumulate) {
  if (wide_vectors()) gemm_tiles<T, 4, 4, 64>(a, ar, at, M, b, ldb, K, N, c, ldc, accumulate);
  else gemm_tiles<T, 4, 2, 32>(a, ar, at, M, b, ldb, K, N, c, ldc, accumulate);
}

// exp over n elements (n a multiple of the lane count) of x - sub, in place; returns their sum.
// float uses the vectorised exp of vec_math.h; double uses libm.
template <class T>
KILN_VEC_INLINE T exp_sub_sum(T* x, int64_t n, T sub) {
  if constexpr (sizeof(T) == 4) {
    Vec<T> acc{};
    for (int64_t j = 0; j < n; j += kLanes<T>) {
      Vec<T> e = math::exp(loadu(x + j) - sub);
      storeu(x + j, e);
      acc += e;
    }
    T s = 0;
    for (int l = 0; l < kLanes<T>; ++l) s += acc[l];
    return s;
  } else {
    T s = 0;
    for (int64_t j = 0; j < n; ++j) s += (x[j] = std::exp(x[j] - sub));
    return s;
  }
}

template <class T>
KILN_VEC_INLINE T row_max(const T* x, int64_t n) {
  Vec<T> m = Vec<T>{} - std::numeric_limits<T>::infinity();
  for (int64_t j = 0; j < n; j += kLanes<T>) {
    Vec<T> v = loadu(x + j);
    m = v > m ? v : m;
  }
  T r = -std::numeric_limits<T>::infinity();
  for (int l = 0; l < kLanes<T>; ++l) r = std::max(r, m[l]);
  return r;
}

}  // namespace kiln::backend::cpu::attn

namespace kiln::backend::cpu::attn {

using vu32 = uint32_t __attribute__((vector_size(64)));
using vu64 = uint64_t __attribute__((vector_size(64)));

// 16 lanes of a * b as 64-bit products, split into low and high words: the even and odd lanes
// are multiplied as 8 zero-extended 64-bit lanes each (one vpmuludq apiece on AVX-512).
KILN_VEC_INLINE vu32 mulhilo(uint32_t a, vu32 b, vu32* hi) {
  const vu64 wide = reinterpret_cast<vu64>(b), lo32 = vu64{} + 0xffffffffull;
  const vu64 even = (wide & lo32) * static_cast<uint64_t>(a), odd = (wide >> 32) * static_cast<uint64_t>(a);
  *hi = reinterpret_cast<vu32>((even >> 32) | (odd & ~lo32));
  return reinterpret_cast<vu32>((even & lo32) | (odd << 32));
}

// philox::philox for the 16 counters ctr, ctr + 1, ..., ctr + 15 at once: w[k][lane] is word k
// of counter ctr + lane (the same numbers, computed in vector registers).
KILN_VEC_INLINE void philox16(uint64_t seed, uint64_t ctr, vu32 w[4]) {
  using vu64x16 = uint64_t __attribute__((vector_size(128)));
  const vu64x16 c = vu64x16{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15} + ctr;
  vu32 c0 = __builtin_convertvector(c, vu32), c1 = __builtin_convertvector(c >> 32, vu32), c2{}, c3{};
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  for (int r = 0; r < 10; ++r) {
    vu32 hi0, hi1;
    const vu32 lo0 = mulhilo(0xD2511F53u, c0, &hi0);
    const vu32 lo1 = mulhilo(0xCD9E8D57u, c2, &hi1);
    const vu32 n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
    c0 = n0, c1 = lo1, c2 = n2, c3 = lo0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  w[0] = c0, w[1] = c1, w[2] = c2, w[3] = c3;
}

}  // namespace kiln::backend::cpu::attn
