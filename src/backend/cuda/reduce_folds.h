// The reductions of the CUDA reduce kernels as folds over a partial state: init() (the identity),
// step(state, x, index) for one element, merge(a, b) for two partial states (commutative, so
// any tree of lanes, warps and blocks gives the result), store() for the output. NaN rules and
// finishing formulas are the CPU kernels' (backend/cpu/reduce.cpp); so are the accumulator types
// but for sum, mean and prod of floats, which fold in double here (red_acc_t, below): a float32
// prod whose running product passes float32's range on the way is finite here and inf on the
// CPU, and a 16-bit mean is rounded twice (double to float to the 16-bit type).
// Plain C++ as well as device code: the CPU tests fold with them in the kernels' merge orders
// and compare with the CPU ops (tests/test_cuda_host_math.cpp).
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "backend/cuda/host_device.h"
#include "backend/dispatch.h"
#include "backend/visit_dtype.h"

namespace kiln::backend::cuda {

// Where a reduction writes: the values, and the int64 indices of max/min (same layout).
struct ReduceOut {
  void* values;
  int64_t* indices;
};

inline constexpr double kInfinity = std::numeric_limits<double>::infinity();

// sum and prod accumulate floats in double, integers in int64. One thread folds up to
// thousands of elements (a sum over the batch of [2^20, 1024]: 4096 each), and a float32 running
// sum of 4096 values of 0.1 is 3.9e-5 off (the CPU's sum of 2^16 of them: 6e-7). The adds cost
// nothing in a kernel bound by its loads.
template <class T>
using red_acc_t = std::conditional_t<std::is_floating_point_v<compute_t<T>>, double, int64_t>;

// sum (mean: times scale) and prod.
template <class T, bool kProd>
struct SumFold {
  using In = T;
  using C = compute_t<T>;
  using State = red_acc_t<T>;
  double scale;  // mean: 1 / count
  static SumFold make(const ReduceAttrs& r) { return {kProd ? 1.0 : r.scale}; }
  KILN_HOST_DEVICE State init() const { return State(kProd ? 1 : 0); }
  KILN_HOST_DEVICE State step(State s, C x, int64_t) const { return merge(s, static_cast<State>(x)); }
  KILN_HOST_DEVICE State merge(State a, State b) const { return kProd ? a * b : a + b; }
  KILN_HOST_DEVICE void store(State s, int64_t, const ReduceOut& out, int64_t off) const {
    if (scale != 1.0) {
      if constexpr (std::is_floating_point_v<State>) s *= scale;
      else s = static_cast<State>(static_cast<double>(s) * scale);
    }
    static_cast<T*>(out.values)[off] = static_cast<T>(static_cast<C>(s));
  }
};

// amax/amin: a NaN wins (the first one reached stays).
template <class T, bool kMax>
struct ExtremeFold {
  using In = T;
  using C = compute_t<T>;
  using State = C;
  static ExtremeFold make(const ReduceAttrs&) { return {}; }
  KILN_HOST_DEVICE State init() const {
    if constexpr (std::is_floating_point_v<C>)
      return kMax ? -std::numeric_limits<C>::infinity() : std::numeric_limits<C>::infinity();
    else
      return kMax ? std::numeric_limits<C>::lowest() : std::numeric_limits<C>::max();
  }
  KILN_HOST_DEVICE State step(State s, C x, int64_t) const { return merge(s, x); }
  KILN_HOST_DEVICE State merge(State a, State b) const {
    if constexpr (std::is_floating_point_v<C>) {
      if (a != a) return a;
      if (b != b) return b;
    }
    return kMax ? (b > a ? b : a) : (b < a ? b : a);
  }
  KILN_HOST_DEVICE void store(State s, int64_t, const ReduceOut& out, int64_t off) const {
    static_cast<T*>(out.values)[off] = static_cast<T>(s);
  }
};

// all/any: bool output, x != 0 (NaN counts as true).
template <class T, bool kAll>
struct LogicalFold {
  using In = T;
  using C = compute_t<T>;
  using State = bool;
  static LogicalFold make(const ReduceAttrs&) { return {}; }
  KILN_HOST_DEVICE State init() const { return kAll; }
  KILN_HOST_DEVICE State step(State s, C x, int64_t) const { return merge(s, x != C(0)); }
  KILN_HOST_DEVICE State merge(State a, State b) const { return kAll ? (a && b) : (a || b); }
  KILN_HOST_DEVICE void store(State s, int64_t, const ReduceOut& out, int64_t off) const {
    static_cast<bool*>(out.values)[off] = s;
  }
};

// p-norms in double, as the CPU (norms feed gradient clipping): max of |x| for p = inf (NaN
// wins), the count of non-zeros for p = 0, else (sum |x|^p)^(1/p).
template <class T>
struct NormFold {
  using In = T;
  using C = compute_t<T>;
  using State = double;
  enum Kind : int { kMaxAbs, kCount, kOne, kTwo, kPow };
  Kind kind;
  double p;
  static NormFold make(const ReduceAttrs& r) {
    const Kind k = std::isinf(r.p) ? kMaxAbs : r.p == 0 ? kCount : r.p == 1 ? kOne : r.p == 2 ? kTwo : kPow;
    return {k, r.p};
  }
  KILN_HOST_DEVICE State init() const { return 0.0; }
  KILN_HOST_DEVICE State step(State s, C x, int64_t) const {
    const double v = ::fabs(static_cast<double>(x));
    switch (kind) {
      case kMaxAbs: return (v > s || v != v) ? v : s;
      case kCount: return s + (v != 0.0 ? 1.0 : 0.0);
      case kOne: return s + v;
      case kTwo: return s + v * v;
      default: return s + ::pow(v, p);
    }
  }
  KILN_HOST_DEVICE State merge(State a, State b) const {
    if (kind == kMaxAbs) return (a > b || a != a) ? a : b;
    return a + b;
  }
  KILN_HOST_DEVICE double finish(State s) const {
    return kind == kTwo ? ::sqrt(s) : kind == kPow ? ::pow(s, 1.0 / p) : s;
  }
  KILN_HOST_DEVICE void store(State s, int64_t, const ReduceOut& out, int64_t off) const {
    static_cast<T*>(out.values)[off] = static_cast<T>(finish(s));
  }
};

// Variance by Welford's update and Chan's merge, in double (the CPU's two passes are in double
// too); divided by max(n - correction, 0), so n <= correction gives inf or NaN as on the CPU.
struct Welford {
  double n, mean, m2;
};
template <class T>
struct VarFold {
  using In = T;
  using C = compute_t<T>;
  using State = Welford;
  double correction;
  static VarFold make(const ReduceAttrs& r) { return {static_cast<double>(r.correction)}; }
  KILN_HOST_DEVICE State init() const { return {0.0, 0.0, 0.0}; }
  KILN_HOST_DEVICE State step(State s, C x, int64_t) const {
    const double v = static_cast<double>(x);
    s.n += 1.0;
    const double d = v - s.mean;
    s.mean += d / s.n;
    s.m2 += d * (v - s.mean);
    return s;
  }
  KILN_HOST_DEVICE State merge(State a, State b) const {
    if (a.n == 0.0) return b;
    if (b.n == 0.0) return a;
    const double n = a.n + b.n, d = b.mean - a.mean;
    return {n, a.mean + d * (b.n / n), a.m2 + b.m2 + d * d * (a.n * (b.n / n))};
  }
  KILN_HOST_DEVICE void store(State s, int64_t count, const ReduceOut& out, int64_t off) const {
    const double denom = ::fmax(static_cast<double>(count) - correction, 0.0);
    static_cast<T*>(out.values)[off] = static_cast<T>(static_cast<compute_t<T>>(s.m2 / denom));
  }
};

// logsumexp as a running (max m, sum of exp(x - m)) in double. A NaN makes m NaN for good;
// -inf elements add nothing; once m is +inf the result is +inf. So: NaN if any NaN, -inf for
// no elements or all -inf, +inf if any +inf, as the CPU's two passes give.
struct MaxSumExp {
  double m, s;
};
template <class T>
struct LogSumExpFold {
  using In = T;
  using C = compute_t<T>;
  using State = MaxSumExp;
  static LogSumExpFold make(const ReduceAttrs&) { return {}; }
  KILN_HOST_DEVICE State init() const { return {-kInfinity, 0.0}; }
  KILN_HOST_DEVICE State step(State st, C x, int64_t) const {
    const double v = static_cast<double>(x);
    if (st.m != st.m || v == -kInfinity) return st;
    if (v != v) return {v, 0.0};
    if (st.m == kInfinity) return st;
    if (v > st.m) return {v, st.s * ::exp(st.m - v) + 1.0};  // m = -inf: exp gives 0
    return {st.m, st.s + ::exp(v - st.m)};
  }
  KILN_HOST_DEVICE State merge(State a, State b) const {
    if (a.m != a.m) return a;
    if (b.m != b.m) return b;
    if (a.m == -kInfinity || b.m == kInfinity) return b;
    if (b.m == -kInfinity || a.m == kInfinity) return a;
    const double m = a.m > b.m ? a.m : b.m;
    return {m, a.s * ::exp(a.m - m) + b.s * ::exp(b.m - m)};
  }
  KILN_HOST_DEVICE void store(State st, int64_t, const ReduceOut& out, int64_t off) const {
    const double r = (st.m != st.m || st.m == kInfinity || st.m == -kInfinity) ? st.m : st.m + ::log(st.s);
    static_cast<T*>(out.values)[off] = static_cast<T>(static_cast<compute_t<T>>(r));
  }
};

// max/min with the index of the extreme: ties go to the smallest index, a NaN beats any number
// (the smallest-indexed NaN wins), as the CPU's first-reached rule gives.
template <class C>
struct ValueIndex {
  C value;
  int64_t index;  // -1: nothing seen yet
};
template <class T, bool kMax>
struct ExtremeIndexFold {
  using In = T;
  using C = compute_t<T>;
  using State = ValueIndex<C>;
  static ExtremeIndexFold make(const ReduceAttrs&) { return {}; }
  KILN_HOST_DEVICE State init() const { return {C(0), -1}; }
  KILN_HOST_DEVICE State step(State s, C x, int64_t i) const { return merge(s, State{x, i}); }
  KILN_HOST_DEVICE State merge(State a, State b) const {
    if (a.index < 0) return b;
    if (b.index < 0) return a;
    if constexpr (std::is_floating_point_v<C>) {
      const bool an = a.value != a.value, bn = b.value != b.value;
      if (an && bn) return a.index < b.index ? a : b;
      if (an || bn) return an ? a : b;
    }
    if (kMax ? b.value > a.value : b.value < a.value) return b;
    if (kMax ? a.value > b.value : a.value < b.value) return a;
    return a.index < b.index ? a : b;
  }
  KILN_HOST_DEVICE void store(State s, int64_t, const ReduceOut& out, int64_t off) const {
    static_cast<T*>(out.values)[off] = static_cast<T>(s.value);
    out.indices[off] = s.index;
  }
};

}  // namespace kiln::backend::cuda
