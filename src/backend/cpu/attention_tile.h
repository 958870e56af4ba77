// Register-blocked tile products and row operations for the fused attention kernels (float, double).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

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

template <class T, int W>
KILN_VEC_INLINE T row_max_w(const T* x, int64_t n) {
  Vec<T, W> m = Vec<T, W>{} - std::numeric_limits<T>::infinity();
  for (int64_t j = 0; j < n; j += kLanes<T, W>) {
    Vec<T, W> v = loadu<T, W>(x + j);
    m = v > m ? v : m;
  }
  T r = -std::numeric_limits<T>::infinity();
  for (int l = 0; l < kLanes<T, W>; ++l) r = std::max(r, m[l]);
  return r;
}
// The largest of n elements (n a multiple of the 64-byte lane count).
template <class T>
KILN_VEC_INLINE T row_max(const T* x, int64_t n) {
  return wide_vectors() ? row_max_w<T, 64>(x, n) : row_max_w<T, 32>(x, n);
}


// W/4 lanes of a * b as 64-bit products, split into low and high words: the even and odd lanes
// are multiplied as W/8 zero-extended 64-bit lanes each (one vpmuludq apiece).
template <int W>
KILN_VEC_INLINE Vec<uint32_t, W> mulhilo(uint32_t a, Vec<uint32_t, W> b, Vec<uint32_t, W>* hi) {
  using U32 = Vec<uint32_t, W>;
  using U64 = Vec<uint64_t, W>;
  const U64 wide = reinterpret_cast<U64>(b), lo32 = U64{} + 0xffffffffull;
  const U64 even = (wide & lo32) * static_cast<uint64_t>(a), odd = (wide >> 32) * static_cast<uint64_t>(a);
  *hi = reinterpret_cast<U32>((even >> 32) | (odd & ~lo32));
  return reinterpret_cast<U32>((even & lo32) | (odd << 32));
}

// philox::philox for the W/4 counters ctr, ctr + 1, ... at once: w[k][lane] is word k of counter
// ctr + lane (the same numbers, computed in vector registers).
template <int W>
KILN_VEC_INLINE void philox_lanes(uint64_t seed, uint64_t ctr, Vec<uint32_t, W> w[4]) {
  using U32 = Vec<uint32_t, W>;
  U32 iota{};
  for (int l = 0; l < W / 4; ++l) iota[l] = static_cast<uint32_t>(l);
  // The counters' low words, and their high words with the carry where a low word wrapped.
  U32 c0 = iota + static_cast<uint32_t>(ctr);
  U32 c1 = (U32{} + static_cast<uint32_t>(ctr >> 32)) - reinterpret_cast<U32>(c0 < iota), c2{}, c3{};
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  for (int r = 0; r < 10; ++r) {
    U32 hi0, hi1;
    const U32 lo0 = mulhilo<W>(0xD2511F53u, c0, &hi0);
    const U32 lo1 = mulhilo<W>(0xCD9E8D57u, c2, &hi1);
    const U32 n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
    c0 = n0, c1 = lo1, c2 = n2, c3 = lo0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  w[0] = c0, w[1] = c1, w[2] = c2, w[3] = c3;
}

// The 64 words of the 16 counters ctr .. ctr + 15, counter by counter (words[4 c + k] is word k
// of counter ctr + c), W bytes of counters at a time.
template <int W>
KILN_VEC_INLINE void philox16_w(uint64_t seed, uint64_t ctr, uint32_t* words) {
  constexpr int N = W / 4;
  for (int h = 0; h < 16; h += N) {
    Vec<uint32_t, W> v[4];
    philox_lanes<W>(seed, ctr + static_cast<uint64_t>(h), v);
    for (int c = 0; c < N; ++c)
      for (int k = 0; k < 4; ++k) words[4 * (h + c) + k] = v[k][c];
  }
}
KILN_VEC_INLINE void philox16(uint64_t seed, uint64_t ctr, uint32_t* words) {
  if (wide_vectors()) philox16_w<64>(seed, ctr, words);
  else philox16_w<32>(seed, ctr, words);
}

}  // namespace kiln::backend::cpu::attn
