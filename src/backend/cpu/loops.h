// Elementwise loops for the CPU: one strided N-d engine, with contiguous fast paths that are
// compiled for several instruction sets and chosen at run time (GCC target_clones).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <type_traits>

#include "backend/cpu/parallel.h"
#include "backend/loop_plan.h"
#include "backend/math.h"
#include "kiln/tensor.h"

#if defined(__x86_64__) && !defined(__clang__) && !defined(KILN_NO_TARGET_CLONES)
#define KILN_VECTORIZE __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define KILN_VECTORIZE
#endif

namespace kiln::backend::cpu {

// Below this many elements an elementwise op runs on one thread.
inline constexpr int64_t kElementwiseGrain = 32768;

// The partial sums of a vectorised loop (element j of each step into s[j]) added pairwise,
// s[j] += s[j + w] for w = N/2, ..., 1: one fixed order, itself vectorised. Returns the total.
template <class A, int N>
__attribute__((always_inline)) inline A fold_pairwise(A (&s)[N]) {
  static_assert(N > 0 && (N & (N - 1)) == 0, "fold_pairwise: N must be a power of two");
  for (int w = N / 2; w >= 1; w /= 2)
    for (int j = 0; j < w; ++j) s[j] += s[j + w];
  return s[0];
}

// Sums f(i) for i in [0, n) with 16 partial sums, which the compiler keeps in vector registers
// (a single accumulator would serialise on the add's latency and not vectorize), then the tail's
// and the folded partial sums.
template <class A, class F>
__attribute__((always_inline)) inline A lane_sum(int64_t n, const F& f) {
  A acc[16] = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int j = 0; j < 16; ++j) acc[j] += f(i + j);
  A s = 0;
  for (; i < n; ++i) s += f(i);
  return s + fold_pairwise(acc);
}

// Runs inner(ptrs, inner_strides, n) over every innermost run of the plan, in parallel chunks
// of the flat index space when the op is large enough.
template <int N, class Inner>
void run_plan(const LoopPlan<N>& p, const Inner& inner, int64_t grain = kElementwiseGrain) {
  if (p.numel == 0) return;
  if (p.ndim == 0) {
    char* ptrs[N];
    int64_t zero[N] = {};
    for (int k = 0; k < N; ++k) ptrs[k] = p.base[k];
    inner(ptrs, zero, int64_t{1});
    return;
  }
  const int last = p.ndim - 1;
  const int64_t inner_size = p.sizes[last];
  parallel_for(p.numel, grain, [&](int64_t begin, int64_t end) {
    int64_t idx[kMaxLoopDims];
    int64_t rest = begin;
    for (int d = last; d >= 0; --d) {
      idx[d] = rest % p.sizes[d];
      rest /= p.sizes[d];
    }
    int64_t pos = begin;
    while (pos < end) {
      char* ptrs[N];
      for (int k = 0; k < N; ++k) {
        char* q = p.base[k];
        for (int d = 0; d <= last; ++d) q += idx[d] * p.strides[d][k];
        ptrs[k] = q;
      }
      int64_t n = std::min(inner_size - idx[last], end - pos);
      inner(ptrs, p.strides[last], n);
      pos += n;
      idx[last] += n;
      for (int d = last; d > 0 && idx[d] == p.sizes[d]; --d) {
        idx[d] = 0;
        ++idx[d - 1];
      }
    }
  });
}

// Functors whose math calls exp/tanh/erf mark themselves kVector and run on W bytes of floats at a
// time (the compiler cannot vectorize those calls itself); the rest rely on auto-vectorization.
template <class F, class... T>
inline constexpr bool kExplicitVector = requires { F::kVector; } && (std::is_same_v<T, float> && ...);

// The same functors on float16/bfloat16 data (every operand computes in float32, not all are
// float32): blocks widened to float32 for the vector body, rounded back once. Scalar, a bfloat16
// GELU ran at 0.3 GB/s.
template <class F, class... T>
inline constexpr bool kWidenedVector = requires { F::kVector; } &&
                                       (std::is_same_v<compute_t<T>, float> && ...) && !kExplicitVector<F, T...>;
inline constexpr int64_t kWidenBlock = 256;

// o[i] = f(a[i]) (or f(a[i], b[i]) with one b) over float32 blocks of 16-bit data.
template <class To, class F, class Ta, class... Tb>
KILN_VEC_INLINE void widened_map(To* __restrict o, int64_t n, F f, const Ta* __restrict a, const Tb*... b) {
  static_assert(sizeof...(Tb) <= 1);
  float wa[kWidenBlock], wo[kWidenBlock];
  for (int64_t i = 0; i < n; i += kWidenBlock) {
    const int64_t m = std::min(kWidenBlock, n - i);
    for (int64_t j = 0; j < m; ++j) wa[j] = static_cast<float>(a[i + j]);
    int64_t j = 0;
    if constexpr (sizeof...(Tb) == 1) {
      const auto* bp = (b, ...);
      float wb[kWidenBlock];
      for (int64_t k = 0; k < m; ++k) wb[k] = static_cast<float>(bp[i + k]);
      j = math::wide_vectors() ? math::map_vectors<64>(wo, wa, wb, m, f) : math::map_vectors<32>(wo, wa, wb, m, f);
      for (; j < m; ++j) wo[j] = f(wa[j], wb[j]);
    } else {
      j = math::wide_vectors() ? math::map_vectors<64>(wo, wa, m, f) : math::map_vectors<32>(wo, wa, m, f);
      for (; j < m; ++j) wo[j] = f(wa[j]);
    }
    for (int64_t k = 0; k < m; ++k) o[i + k] = static_cast<To>(wo[k]);
  }
}

template <class To, class Ta, class F>
KILN_VECTORIZE void unary_contig(To* __restrict o, const Ta* __restrict a, int64_t n, F f) {
  int64_t i = 0;
  if constexpr (kExplicitVector<F, To, Ta>)
    i = math::wide_vectors() ? math::map_vectors<64>(o, a, n, f) : math::map_vectors<32>(o, a, n, f);
  if constexpr (kWidenedVector<F, To, Ta>) {
    widened_map(o, n, f, a);
    return;
  }
  for (; i < n; ++i) o[i] = static_cast<To>(f(static_cast<compute_t<Ta>>(a[i])));
}

template <class To, class Ta, class Tb, class F>
KILN_VECTORIZE void binary_contig(To* __restrict o, const Ta* __restrict a, const Tb* __restrict b,
                                  int64_t n, F f) {
  int64_t i = 0;
  if constexpr (kExplicitVector<F, To, Ta, Tb>)
    i = math::wide_vectors() ? math::map_vectors<64>(o, a, b, n, f) : math::map_vectors<32>(o, a, b, n, f);
  if constexpr (kWidenedVector<F, To, Ta, Tb>) {
    widened_map(o, n, f, a, b);
    return;
  }
  for (; i < n; ++i)
    o[i] = static_cast<To>(f(static_cast<compute_t<Ta>>(a[i]), static_cast<compute_t<Tb>>(b[i])));
}

template <class To, class Ta, class Tb, class F>
KILN_VECTORIZE void binary_contig_scalar_b(To* __restrict o, const Ta* __restrict a, Tb b, int64_t n, F f) {
  const compute_t<Tb> bv = static_cast<compute_t<Tb>>(b);
  for (int64_t i = 0; i < n; ++i) o[i] = static_cast<To>(f(static_cast<compute_t<Ta>>(a[i]), bv));
}

template <class To, class Ta, class Tb, class F>
KILN_VECTORIZE void binary_contig_scalar_a(To* __restrict o, Ta a, const Tb* __restrict b, int64_t n, F f) {
  const compute_t<Ta> av = static_cast<compute_t<Ta>>(a);
  for (int64_t i = 0; i < n; ++i) o[i] = static_cast<To>(f(av, static_cast<compute_t<Tb>>(b[i])));
}

// out = f(a) elementwise; a is broadcast to out's shape.
template <class To, class Ta, class F>
void unary_loop(const Tensor& out, const Tensor& a, F f) {
  auto plan = make_plan<2>({&out, &a});
  run_plan(plan, [&](char** p, const int64_t* s, int64_t n) {
    if (s[0] == sizeof(To) && s[1] == sizeof(Ta)) {
      unary_contig(reinterpret_cast<To*>(p[0]), reinterpret_cast<const Ta*>(p[1]), n, f);
      return;
    }
    for (int64_t i = 0; i < n; ++i)
      *reinterpret_cast<To*>(p[0] + i * s[0]) =
          static_cast<To>(f(static_cast<compute_t<Ta>>(*reinterpret_cast<const Ta*>(p[1] + i * s[1]))));
  });
}

// out = f(a, b) elementwise; a and b are broadcast to out's shape.
template <class To, class Ta, class Tb, class F>
void binary_loop(const Tensor& out, const Tensor& a, const Tensor& b, F f) {
  auto plan = make_plan<3>({&out, &a, &b});
  run_plan(plan, [&](char** p, const int64_t* s, int64_t n) {
    To* o = reinterpret_cast<To*>(p[0]);
    if (s[0] == sizeof(To)) {
      if (s[1] == sizeof(Ta) && s[2] == sizeof(Tb)) {
        binary_contig(o, reinterpret_cast<const Ta*>(p[1]), reinterpret_cast<const Tb*>(p[2]), n, f);
        return;
      }
      if (s[1] == sizeof(Ta) && s[2] == 0) {
        binary_contig_scalar_b(o, reinterpret_cast<const Ta*>(p[1]), *reinterpret_cast<const Tb*>(p[2]), n, f);
        return;
      }
      if (s[1] == 0 && s[2] == sizeof(Tb)) {
        binary_contig_scalar_a(o, *reinterpret_cast<const Ta*>(p[1]), reinterpret_cast<const Tb*>(p[2]), n, f);
        return;
      }
    }
    for (int64_t i = 0; i < n; ++i)
      *reinterpret_cast<To*>(p[0] + i * s[0]) =
          static_cast<To>(f(static_cast<compute_t<Ta>>(*reinterpret_cast<const Ta*>(p[1] + i * s[1])),
                            static_cast<compute_t<Tb>>(*reinterpret_cast<const Tb*>(p[2] + i * s[2]))));
  });
}

template <class T, class F>
KILN_VECTORIZE void ternary_contig(T* __restrict o, const T* a, const T* b, const T* c, int64_t n, F f) {
  using C = compute_t<T>;
  for (int64_t i = 0; i < n; ++i) o[i] = static_cast<T>(f(static_cast<C>(a[i]), static_cast<C>(b[i]), static_cast<C>(c[i])));
}

// out = f(a, b, c) elementwise, all of out's dtype T, a, b and c broadcast to out's shape (out may
// be a: the in-place forms).
template <class T, class F>
void ternary_loop(const Tensor& out, const Tensor& a, const Tensor& b, const Tensor& c, F f) {
  using C = compute_t<T>;
  auto plan = make_plan<4>({&out, &a, &b, &c});
  run_plan(plan, [&](char** p, const int64_t* s, int64_t n) {
    constexpr int64_t e = sizeof(T);
    if (s[0] == e && s[1] == e && s[2] == e && s[3] == e) {
      ternary_contig(reinterpret_cast<T*>(p[0]), reinterpret_cast<const T*>(p[1]), reinterpret_cast<const T*>(p[2]),
                     reinterpret_cast<const T*>(p[3]), n, f);
      return;
    }
    if (s[0] == e && (s[1] == 0 || s[1] == e) && (s[2] == 0 || s[2] == e) && (s[3] == 0 || s[3] == e)) {
      // Broadcast operands (a per-channel weight over a row): blocks of the contiguous loop, each
      // operand of stride 0 read from a block filled with its one value.
      T fill[3][kWidenBlock];
      const T* q[3];
      for (int k = 0; k < 3; ++k) {
        q[k] = reinterpret_cast<const T*>(p[k + 1]);
        if (s[k + 1] == 0) std::fill(fill[k], fill[k] + kWidenBlock, *q[k]);
      }
      for (int64_t i = 0; i < n; i += kWidenBlock) {
        auto at = [&](int k) { return s[k + 1] == 0 ? fill[k] : q[k] + i; };
        ternary_contig(reinterpret_cast<T*>(p[0]) + i, at(0), at(1), at(2), std::min(kWidenBlock, n - i), f);
      }
      return;
    }
    auto at = [&](int k, int64_t i) { return static_cast<C>(*reinterpret_cast<const T*>(p[k] + i * s[k])); };
    for (int64_t i = 0; i < n; ++i) *reinterpret_cast<T*>(p[0] + i * s[0]) = static_cast<T>(f(at(1, i), at(2, i), at(3, i)));
  });
}

}  // namespace kiln::backend::cpu
