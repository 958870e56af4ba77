// Row kernels of the softmax family over one contiguous row of n elements, compiled for each
// instruction set (KILN_VECTORIZE): the max, the sum of exponentials, the scaled softmax, and the
// backward passes' dot products and gradients. float32 rows take vec_math.h's vectorised exp; the
// other types its scalar exp (float16/bfloat16 widened to float32, float64 in double).
// Used by softmax.cpp (softmax, log_softmax) and loss.cpp (cross_entropy).
#pragma once

#include <cmath>
#include <limits>
#include <type_traits>

#include "backend/cpu/loops.h"
#include "backend/vec_math.h"

namespace kiln::backend::cpu {

// m = the largest of m and the whole W-byte vectors of [0, n); returns where the vectors end.
template <int W>
KILN_VEC_INLINE int64_t max_vectors(const float* x, int64_t n, float& m) {
  using V = math::Vec<float, W>;
  constexpr int L = math::kLanes<float, W>;
  V acc = V{} + m;
  int64_t i = 0;
  for (; i + L <= n; i += L) {
    const V v = math::loadu<float, W>(x + i);
    acc = v > acc ? v : acc;
  }
  for (int l = 0; l < L; ++l) m = acc[l] > m ? acc[l] : m;
  return i;
}

// The largest element, NaN skipped (-inf for a row of NaN): the callers subtract it before exp,
// and a NaN reaches every output through the sum of the exponentials anyway.
template <class T, class A>
KILN_VECTORIZE A row_max(const T* __restrict x, int64_t n) {
  A m = -std::numeric_limits<A>::infinity();
  int64_t i = 0;
  if constexpr (std::is_same_v<T, float>)
    i = math::wide_vectors() ? max_vectors<64>(x, n, m) : max_vectors<32>(x, n, m);
  for (; i < n; ++i) {
    const A v = static_cast<A>(x[i]);
    m = v > m ? v : m;
  }
  return m;
}

// sum of exp(x - mx).
template <class T, class A>
KILN_VECTORIZE A row_sum_exp(const T* __restrict x, int64_t n, A mx) {
  int64_t i = 0;
  A s = 0;
  if constexpr (std::is_same_v<T, float>)
    i = math::wide_vectors() ? math::exp_sum_vectors<64, false>(x, nullptr, n, mx, s)
                             : math::exp_sum_vectors<32, false>(x, nullptr, n, mx, s);
  for (; i < n; ++i) s += math::exp(static_cast<A>(x[i]) - mx);
  return s;
}

// scale * exp(v - sub) on a vector, force-inlined (a lambda's call could stay out of line, compiled
// for the baseline instruction set: see vec_math.h).
struct ScaledExp {
  float sub, scale;
  template <class V>
  KILN_VEC_INLINE V operator()(V v) const {
    return math::exp(v - sub) * scale;
  }
};

// y = scale * exp(x - sub): softmax with sub = max and scale = 1 / row_sum_exp, or scale *
// softmax(x) with sub = the log-sum-exp.
template <class T, class A>
KILN_VECTORIZE void row_scaled_softmax(const T* __restrict x, T* __restrict y, int64_t n, A sub, A scale) {
  int64_t i = 0;
  if constexpr (std::is_same_v<T, float>) {
    const ScaledExp f{sub, scale};
    i = math::wide_vectors() ? math::map_vectors<64>(y, x, n, f) : math::map_vectors<32>(y, x, n, f);
  }
  for (; i < n; ++i) y[i] = static_cast<T>(math::exp(static_cast<A>(x[i]) - sub) * scale);
}

// y = x - lse: log_softmax.
// log_softmax's output (x - max) - log(sum), as torch's: max + log(sum) rounded first at the
// size of the largest logit, which can be larger than log(sum) itself.
template <class T, class A>
KILN_VECTORIZE void row_shift(const T* __restrict x, T* __restrict y, int64_t n, A mx, A log_sum) {
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<T>((static_cast<A>(x[i]) - mx) - log_sum);
}

// One row's softmax (log_softmax with kLog) from x into y, given the row's max: -inf (every
// element -inf) gives 0/0 = NaN and +inf inf/inf = NaN, as torch.
template <bool kLog, class A>
inline void softmax_row(const A* x, A* y, int64_t n, A mx) {
  if (std::isinf(mx) && mx < 0) mx = A(0);
  const A sum = row_sum_exp<A, A>(x, n, mx);
  if constexpr (kLog)
    row_shift<A, A>(x, y, n, mx, std::log(sum));
  else
    row_scaled_softmax<A, A>(x, y, n, mx, A(1) / sum);
}

// The backward passes' dot: sum(gy * y) for softmax, sum(gy) for log_softmax (kLog).
template <bool kLog, class T, class A>
KILN_VECTORIZE A row_grad_dot(const T* __restrict gy, const T* __restrict y, int64_t n) {
  return lane_sum<A>(n, [&](int64_t i) {
    return kLog ? static_cast<A>(gy[i]) : static_cast<A>(gy[i]) * static_cast<A>(y[i]);
  });
}

// gy - exp(y) * dot on vectors: log_softmax's gradient.
struct LogSoftmaxGrad {
  float dot;
  template <class V>
  KILN_VEC_INLINE V operator()(V gy, V y) const {
    return gy - math::exp(y) * dot;
  }
};

// gx = y * (gy - dot) (softmax) or gy - exp(y) * dot (log_softmax, y its output).
template <bool kLog, class T, class A>
KILN_VECTORIZE void row_grad(const T* __restrict gy, const T* __restrict y, T* __restrict gx, int64_t n, A dot) {
  int64_t i = 0;
  if constexpr (kLog && std::is_same_v<T, float>) {
    const LogSoftmaxGrad f{dot};
    i = math::wide_vectors() ? math::map_vectors<64>(gx, gy, y, n, f) : math::map_vectors<32>(gx, gy, y, n, f);
  }
  for (; i < n; ++i) {
    const A yv = static_cast<A>(y[i]), gv = static_cast<A>(gy[i]);
    gx[i] = static_cast<T>(kLog ? gv - math::exp(yv) * dot : yv * (gv - dot));
  }
}

// exp(x - m) on vectors, m per lane.
struct ExpSub {
  template <class V>
  KILN_VEC_INLINE V operator()(V x, V m) const {
    return math::exp(x - m);
  }
};
// e[j] = exp(x[j] - m[j]) for j < w.
template <class T, class A>
KILN_VEC_INLINE void exp_sub(const T* __restrict x, const A* __restrict m, A* __restrict e, int64_t w) {
  int64_t j = 0;
  if constexpr (std::is_same_v<T, float>)
    j = math::wide_vectors() ? math::map_vectors<64>(e, x, m, w, ExpSub{})
                             : math::map_vectors<32>(e, x, m, w, ExpSub{});
  for (; j < w; ++j) e[j] = math::exp(static_cast<A>(x[j]) - m[j]);
}

// Softmax over the middle dim of [., n, inner] for columns [0, w) (w <= inner) of x and y, which
// point at the block's first column: each pass runs over the n rows with the columns innermost
// (contiguous, vectorised). mx, sum, e: w accumulators each. NaN needs no max of its own here: it
// reaches the sum through exp, and every output of its column through the sum.
template <bool kLog, class T, class A>
KILN_VECTORIZE void softmax_columns(const T* __restrict x, T* __restrict y, int64_t n, int64_t inner, int64_t w,
                                    A* __restrict mx, A* __restrict sum, A* __restrict e) {
  for (int64_t j = 0; j < w; ++j) mx[j] = -std::numeric_limits<A>::infinity(), sum[j] = 0;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < w; ++j) {
      const A v = static_cast<A>(x[i * inner + j]);
      mx[j] = v > mx[j] ? v : mx[j];
    }
  // An infinite max: -inf (every element -inf) gives 0/0 = NaN as torch; +inf gives inf/inf.
  for (int64_t j = 0; j < w; ++j) mx[j] = std::isinf(mx[j]) && mx[j] < 0 ? A(0) : mx[j];
  for (int64_t i = 0; i < n; ++i) {
    exp_sub(x + i * inner, mx, e, w);
    for (int64_t j = 0; j < w; ++j) sum[j] += e[j];
  }
  if constexpr (kLog) {
    for (int64_t j = 0; j < w; ++j) sum[j] = std::log(sum[j]);  // (x - max) - log(sum), as row_shift
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < w; ++j)
        y[i * inner + j] = static_cast<T>((static_cast<A>(x[i * inner + j]) - mx[j]) - sum[j]);
  } else {
    for (int64_t j = 0; j < w; ++j) sum[j] = A(1) / sum[j];
    for (int64_t i = 0; i < n; ++i) {
      exp_sub(x + i * inner, mx, e, w);
      for (int64_t j = 0; j < w; ++j) y[i * inner + j] = static_cast<T>(e[j] * sum[j]);
    }
  }
}

// gx[j] = gy[j] - exp(y[j]) * dot[j] over the whole W-byte vectors of [0, w); returns where they end.
template <int W>
KILN_VEC_INLINE int64_t log_softmax_grad_vectors(const float* gy, const float* y, float* gx, const float* dot,
                                                 int64_t w) {
  constexpr int L = math::kLanes<float, W>;
  int64_t j = 0;
  for (; j + L <= w; j += L)
    math::storeu<float, W>(gx + j, math::loadu<float, W>(gy + j) -
                                       math::exp(math::loadu<float, W>(y + j)) * math::loadu<float, W>(dot + j));
  return j;
}

// The backward of softmax_columns: gx = y * (gy - dot) or gy - exp(y) * dot, dot per column.
template <bool kLog, class T, class A>
KILN_VECTORIZE void softmax_grad_columns(const T* __restrict gy, const T* __restrict y, T* __restrict gx, int64_t n,
                                         int64_t inner, int64_t w, A* __restrict dot) {
  for (int64_t j = 0; j < w; ++j) dot[j] = 0;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < w; ++j) {
      const int64_t k = i * inner + j;
      dot[j] += kLog ? static_cast<A>(gy[k]) : static_cast<A>(gy[k]) * static_cast<A>(y[k]);
    }
  for (int64_t i = 0; i < n; ++i) {
    if constexpr (kLog) {
      const int64_t o = i * inner;
      int64_t j = 0;
      if constexpr (std::is_same_v<T, float>)
        j = math::wide_vectors() ? log_softmax_grad_vectors<64>(gy + o, y + o, gx + o, dot, w)
                                 : log_softmax_grad_vectors<32>(gy + o, y + o, gx + o, dot, w);
      for (; j < w; ++j)
        gx[o + j] = static_cast<T>(static_cast<A>(gy[o + j]) - math::exp(static_cast<A>(y[o + j])) * dot[j]);
    } else {
      for (int64_t j = 0; j < w; ++j) {
        const int64_t k = i * inner + j;
        gx[k] = static_cast<T>(static_cast<A>(y[k]) * (static_cast<A>(gy[k]) - dot[j]));
      }
    }
  }
}

}  // namespace kiln::backend::cpu
