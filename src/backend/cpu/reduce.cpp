// CPU kernels for reductions: sum/mean, prod, amax/amin, all/any, var, logsumexp, norm,
// and max/min with indices. The output keeps the input's rank, with size 1 on reduced dims.
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include "backend/cpu/loops.h"
#include "backend/dispatch.h"

namespace kiln::backend::cpu {
namespace {

// Kept dims (the output's) and reduced dims, each coalesced; reduced dims innermost-by-stride last.
struct ReducePlan {
  std::vector<int64_t> keep_sizes, keep_in, keep_out;  // strides in elements
  std::vector<int64_t> red_sizes, red_in;
  int64_t outer = 1, inner = 1;
};

ReducePlan make_reduce_plan(const Tensor& in, const Tensor& out, uint64_t mask) {
  ReducePlan p;
  std::vector<std::pair<int64_t, int64_t>> red;  // (stride, size)
  for (int64_t d = 0; d < in.dim(); ++d) {
    int64_t size = in.shape()[d];
    if (mask >> d & 1) {
      if (size != 1) red.push_back({in.strides()[d], size});
      p.inner *= size;
    } else {
      if (size == 1) continue;
      p.keep_sizes.push_back(size);
      p.keep_in.push_back(in.strides()[d]);
      p.keep_out.push_back(out.strides()[d]);
      p.outer *= size;
    }
  }
  // Largest stride first, so the innermost loop walks the smallest stride; merge where possible.
  std::stable_sort(red.begin(), red.end(), [](auto a, auto b) { return a.first > b.first; });
  for (auto [stride, size] : red) {
    if (!p.red_sizes.empty() && p.red_in.back() == stride * size) {
      p.red_sizes.back() *= size;
      p.red_in.back() = stride;
    } else {
      p.red_sizes.push_back(size);
      p.red_in.push_back(stride);
    }
  }
  // The walk over reduced elements keeps its position in a fixed array (no allocation per output).
  KILN_CHECK(p.red_sizes.size() <= static_cast<size_t>(kMaxLoopDims), "reduce", "reducing over ", p.red_sizes.size(),
             " dims that cannot be merged exceeds the limit of ", kMaxLoopDims, " (make the tensor contiguous first)");
  return p;
}

// Calls run(ptr, n, stride) for each innermost run of the reduced elements below base.
template <class T, class Run>
void for_each_run(const ReducePlan& p, const T* base, const Run& run) {
  const int nd = static_cast<int>(p.red_sizes.size());
  if (p.inner == 0) return;
  if (nd == 0) {
    run(base, int64_t{1}, int64_t{1});
    return;
  }
  const int last = nd - 1;
  int64_t idx[kMaxLoopDims] = {};
  while (true) {
    const T* q = base;
    for (int d = 0; d < last; ++d) q += idx[d] * p.red_in[d];
    run(q, p.red_sizes[last], p.red_in[last]);
    int d = last - 1;
    for (; d >= 0; --d) {
      if (++idx[d] < p.red_sizes[d]) break;
      idx[d] = 0;
    }
    if (d < 0) return;
  }
}

// Runs body(in_base, out_index_ptr) for each output element, in parallel over outputs.
template <class T, class To, class Body>
void for_each_output(const ReducePlan& p, const Tensor& in, const Tensor& out, const Body& body) {
  const T* in_base = static_cast<const T*>(in.data_ptr());
  To* out_base = static_cast<To*>(out.data_ptr());
  const int nk = static_cast<int>(p.keep_sizes.size());
  int64_t grain = std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(p.inner, 1));
  parallel_for(p.outer, grain, [&](int64_t b, int64_t e) {
    for (int64_t o = b; o < e; ++o) {
      int64_t rest = o, off_in = 0, off_out = 0;
      for (int d = nk - 1; d >= 0; --d) {
        int64_t i = rest % p.keep_sizes[d];
        rest /= p.keep_sizes[d];
        off_in += i * p.keep_in[d];
        off_out += i * p.keep_out[d];
      }
      body(in_base + off_in, out_base + off_out);
    }
  });
}

// A single output is split across threads above this many elements.
constexpr int64_t kSplitReduceMin = 1 << 16;

template <class T> using red_acc_t = std::conditional_t<std::is_floating_point_v<compute_t<T>>,
                                                          compute_t<T>, int64_t>;

// A contiguous run's sum: sixteen partial sums per block of 1024 elements, blocks added in double:
// float32 sums of millions of elements stay accurate to a few ulps of the total. Sixteen: one
// AVX-512 register of floats, two of AVX2 (with eight, GCC's AVX-512 clone folded each 16-float
// load into the eight through the stack, at half the speed of the AVX2 clone); the same sums, bit
// for bit, on both.
template <class T, class A>
KILN_VECTORIZE A sum_contig(const T* __restrict x, int64_t n) {
  constexpr int64_t kBlock = 1024;
  constexpr int kParts = 16;
  using Total = std::conditional_t<std::is_floating_point_v<A>, double, A>;  // integers stay exact
  Total total = 0;
  for (int64_t start = 0; start < n; start += kBlock) {
    const int64_t m = std::min(kBlock, n - start);
    const T* xb = x + start;
    A s[kParts] = {};
    int64_t i = 0;
    for (; i + kParts <= m; i += kParts)
      for (int j = 0; j < kParts; ++j) s[j] += static_cast<A>(static_cast<compute_t<T>>(xb[i + j]));
    A block = 0;
    for (; i < m; ++i) block += static_cast<A>(static_cast<compute_t<T>>(xb[i]));
    total += static_cast<Total>(block + fold_pairwise(s));
  }
  return static_cast<A>(total);
}

// A strided run's sum, in double for float data (strided loads are the cost here, not the adds):
// a sequential float32 sum of a million elements of 0.1 is 1% off.
template <class T, class A>
A sum_strided(const T* x, int64_t n, int64_t stride) {
  std::conditional_t<std::is_floating_point_v<A>, double, A> total = 0;
  for (int64_t i = 0; i < n; ++i) total += static_cast<compute_t<T>>(x[i * stride]);
  return static_cast<A>(total);
}

// Columns [0, lanes) of rows [0, n) (row stride s) added into total[j]: float32 (A) sums of 32
// rows at a time, added in double. One float32 sum per column over a whole batch was 1% off for
// 2^20 rows; double lanes all the way took 2.5 to 6 times as long (BM_KilnSumOuterDim).
template <class T, class A, int64_t kLanes>
KILN_VECTORIZE void sum_columns(const T* __restrict q, int64_t n, int64_t s, int64_t lanes, double* __restrict total) {
  constexpr int64_t kRows = 32;
  for (int64_t i0 = 0; i0 < n; i0 += kRows) {
    const int64_t i1 = std::min(n, i0 + kRows);
    A acc[kLanes] = {};
    for (int64_t i = i0; i < i1; ++i)
      for (int64_t j = 0; j < lanes; ++j) acc[j] += static_cast<A>(static_cast<compute_t<T>>(q[i * s + j]));
    for (int64_t j = 0; j < lanes; ++j) total[j] += static_cast<double>(acc[j]);
  }
}

// Reductions that fold elements with one accumulator: Fold has init(), step(acc, x), done(acc, n).
template <class Fold>
void fold_kernel(KernelArgs& a) {
  const Tensor& in = a.inputs[0];
  const Tensor& out = a.outputs[0];
  const auto& attrs = *static_cast<const ReduceAttrs*>(a.attrs);
  ReducePlan p = make_reduce_plan(in, out, attrs.dims_mask);
  visit_dtype(in.dtype(), "reduce", [&]<class T>() {
    {
      using To = std::conditional_t<Fold::kBoolOut, bool, T>;
      using A = typename Fold::template acc<T>;
      Fold fold{};
      fold.attrs = &attrs;
      auto fold_run = [&](A acc, const T* q, int64_t n, int64_t s) {
        if constexpr (Fold::kSum) {
          return static_cast<A>(acc + (s == 1 ? sum_contig<T, A>(q, n) : sum_strided<T, A>(q, n, s)));
        }
        for (int64_t i = 0; i < n; ++i) acc = fold.step(acc, static_cast<compute_t<T>>(q[i * s]));
        return acc;
      };
      const int threads = omp_get_max_threads();
      if (p.outer == 1 && p.red_sizes.size() == 1 && p.inner >= kSplitReduceMin && threads > 1 && !omp_in_parallel()) {
        // One output from one long run (a whole-tensor sum, a loss): each thread folds a
        // slice, then the partial results combine in thread order.
        const T* q = static_cast<const T*>(in.data_ptr());
        const int64_t n = p.red_sizes[0], s = p.red_in[0];
        std::unique_ptr<A[]> partial(new A[threads]);
        int used = 1;
#pragma omp parallel num_threads(threads)
        {
          const int t = omp_get_thread_num(), nt = omp_get_num_threads();
          const int64_t b = n * t / nt, e = n * (t + 1) / nt;
          partial[t] = fold_run(fold.template init<A>(), q + b * s, e - b, s);
          if (t == 0) used = nt;
        }
        A acc = partial[0];
        for (int t = 1; t < used; ++t) acc = fold.combine(acc, partial[t]);
        *static_cast<To*>(out.data_ptr()) = static_cast<To>(fold.done(acc, p.inner));
        return;
      }
      if (!p.keep_sizes.empty() && p.keep_in.back() == 1 && p.keep_out.back() == 1 && !p.red_sizes.empty()) {
        // The innermost kept dim is contiguous (a sum over the batch, say): fold whole rows of
        // it at once, lane by lane, instead of striding down one column per output.
        constexpr int64_t kLanes = 64;
        const int64_t row = p.keep_sizes.back(), groups = p.outer / row;
        const int64_t blocks = (row + kLanes - 1) / kLanes;
        const int nk = static_cast<int>(p.keep_sizes.size()) - 1;
        const T* in_base = static_cast<const T*>(in.data_ptr());
        To* out_base = static_cast<To*>(out.data_ptr());
        parallel_for(groups * blocks, std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(p.inner * kLanes, 1)),
                     [&](int64_t b, int64_t e) {
          for (int64_t w = b; w < e; ++w) {
            int64_t g = w / blocks, j0 = (w % blocks) * kLanes, lanes = std::min(kLanes, row - j0);
            int64_t off_in = j0, off_out = j0, rest = g;
            for (int d = nk - 1; d >= 0; --d) {
              int64_t i = rest % p.keep_sizes[d];
              rest /= p.keep_sizes[d];
              off_in += i * p.keep_in[d];
              off_out += i * p.keep_out[d];
            }
            A acc[kLanes];
            for (int64_t j = 0; j < lanes; ++j) acc[j] = fold.template init<A>();
            if constexpr (Fold::kSum && std::is_floating_point_v<A>) {
              double total[kLanes] = {};
              for_each_run(p, in_base + off_in,
                           [&](const T* q, int64_t n, int64_t s) { sum_columns<T, A, kLanes>(q, n, s, lanes, total); });
              for (int64_t j = 0; j < lanes; ++j) acc[j] = static_cast<A>(total[j]);
            } else {
              for_each_run(p, in_base + off_in, [&](const T* q, int64_t n, int64_t s) {
                for (int64_t i = 0; i < n; ++i)
                  for (int64_t j = 0; j < lanes; ++j)
                    acc[j] = fold.step(acc[j], static_cast<compute_t<T>>(q[i * s + j]));
              });
            }
            for (int64_t j = 0; j < lanes; ++j) out_base[off_out + j] = static_cast<To>(fold.done(acc[j], p.inner));
          }
        });
        return;
      }
      for_each_output<T, To>(p, in, out, [&](const T* base, To* dst) {
        if constexpr (Fold::kSum && std::is_floating_point_v<A>) {
          // Runs are summed on their own and added in double: a strided input (short runs) is
          // then as accurate as a contiguous one.
          double total = 0;
          for_each_run(p, base, [&](const T* q, int64_t n, int64_t s) { total += fold_run(A(0), q, n, s); });
          *dst = static_cast<To>(fold.done(static_cast<A>(total), p.inner));
        } else {
          A acc = fold.template init<A>();
          for_each_run(p, base, [&](const T* q, int64_t n, int64_t s) { acc = fold_run(acc, q, n, s); });
          *dst = static_cast<To>(fold.done(acc, p.inner));
        }
      });
    }
  });
}

struct SumFold {
  static constexpr bool kSum = true;
  static constexpr bool kBoolOut = false;
  template <class T> using acc = std::conditional_t<std::is_same_v<compute_t<T>, double>, double,
                                                    red_acc_t<T>>;
  const ReduceAttrs* attrs = nullptr;
  template <class A> A init() const { return A(0); }
  template <class A, class X> A step(A acc, X x) const { return acc + static_cast<A>(x); }
  template <class A> A combine(A a, A b) const { return a + b; }
  template <class A> auto done(A acc, int64_t) const {
    if constexpr (std::is_floating_point_v<A>) return attrs->scale == 1.0 ? acc : static_cast<A>(acc * attrs->scale);
    else return attrs->scale == 1.0 ? acc : static_cast<A>(static_cast<double>(acc) * attrs->scale);
  }
};

// The folds other than the sum (whose runs the loops above add in their own ways).
struct NotSum {
  static constexpr bool kSum = false;
  static constexpr bool kBoolOut = false;
};

struct ProdFold : NotSum {
  template <class T> using acc = std::conditional_t<std::is_same_v<compute_t<T>, double>, double, red_acc_t<T>>;
  const ReduceAttrs* attrs = nullptr;
  template <class A> A init() const { return A(1); }
  template <class A, class X> A step(A acc, X x) const { return acc * static_cast<A>(x); }
  template <class A> A combine(A a, A b) const { return a * b; }
  template <class A> A done(A acc, int64_t) const { return acc; }
};

template <bool kMax>
struct ExtremeFold : NotSum {
  template <class T> using acc = compute_t<T>;
  const ReduceAttrs* attrs = nullptr;
  template <class A> A init() const {
    if constexpr (std::is_floating_point_v<A>) return kMax ? -std::numeric_limits<A>::infinity() : std::numeric_limits<A>::infinity();
    else return kMax ? std::numeric_limits<A>::lowest() : std::numeric_limits<A>::max();
  }
  template <class A, class X> A step(A acc, X x) const {
    if constexpr (std::is_floating_point_v<A>) {
      if (acc != acc) return acc;
      if (x != x) return x;
    }
    return kMax ? (x > acc ? x : acc) : (x < acc ? x : acc);
  }
  template <class A> A combine(A a, A b) const { return step(a, b); }
  template <class A> A done(A acc, int64_t) const { return acc; }
};

template <bool kAll>
struct LogicalFold : NotSum {
  static constexpr bool kBoolOut = true;
  template <class T> using acc = bool;
  const ReduceAttrs* attrs = nullptr;
  template <class A> A init() const { return kAll; }
  template <class A, class X> A step(A acc, X x) const { return kAll ? (acc && x != X(0)) : (acc || x != X(0)); }
  template <class A> A combine(A a, A b) const { return kAll ? (a && b) : (a || b); }
  template <class A> A done(A acc, int64_t) const { return acc; }
};

struct NormFold : NotSum {
  template <class T> using acc = double;  // accuracy over speed: norms feed gradient clipping
  const ReduceAttrs* attrs = nullptr;
  template <class A> A init() const { return A(0); }
  template <class A, class X> A step(A acc, X x) const {
    A v = std::abs(static_cast<A>(x));
    double p = attrs->p;
    if (std::isinf(p)) return p > 0 ? (v > acc || v != v ? v : acc) : acc;
    if (p == 0) return acc + (v != A(0) ? A(1) : A(0));
    if (p == 1) return acc + v;
    if (p == 2) return acc + v * v;
    return acc + static_cast<A>(std::pow(v, static_cast<A>(p)));
  }
  template <class A> A combine(A a, A b) const {
    if (std::isinf(attrs->p)) return (a > b || a != a) ? a : b;
    return a + b;
  }
  template <class A> A done(A acc, int64_t) const {
    double p = attrs->p;
    if (std::isinf(p) || p == 0 || p == 1) return acc;
    if (p == 2) return std::sqrt(acc);
    return static_cast<A>(std::pow(acc, static_cast<A>(1.0 / p)));
  }
};

// Two passes over each output's elements: var (mean, then squared deviations) and logsumexp
// (max, then sum of exp).
template <bool kVar>
void two_pass_kernel(KernelArgs& a) {
  const Tensor& in = a.inputs[0];
  const Tensor& out = a.outputs[0];
  const auto& attrs = *static_cast<const ReduceAttrs*>(a.attrs);
  ReducePlan p = make_reduce_plan(in, out, attrs.dims_mask);
  visit_float_dtype(in.dtype(), kVar ? "var" : "logsumexp", [&]<class T>() {
    using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
    using D = double;  // the second pass accumulates in double for accuracy
    for_each_output<T, T>(p, in, out, [&](const T* base, T* dst) {
      D first = kVar ? 0.0 : -std::numeric_limits<D>::infinity();
      bool nan = false;
      for_each_run(p, base, [&](const T* q, int64_t n, int64_t s) {
        for (int64_t i = 0; i < n; ++i) {
          D x = static_cast<A>(q[i * s]);
          if (kVar) first += x;
          else if (x != x) nan = true;
          else if (x > first) first = x;
        }
      });
      if (kVar) first /= static_cast<D>(p.inner);
      else if (std::isinf(first)) first = 0;  // all -inf (or +inf): keep exp well defined
      D second = 0;
      for_each_run(p, base, [&](const T* q, int64_t n, int64_t s) {
        for (int64_t i = 0; i < n; ++i) {
          D x = static_cast<A>(q[i * s]);
          second += kVar ? (x - first) * (x - first) : std::exp(x - first);
        }
      });
      D r;
      if (kVar) r = second / std::max<D>(static_cast<D>(p.inner - attrs.correction), 0.0);
      else r = nan ? std::numeric_limits<D>::quiet_NaN() : first + std::log(second);
      *dst = static_cast<T>(static_cast<A>(r));
    });
  });
}

// Max or min over one dim with the index of the first extreme; NaN counts as the extreme.
template <bool kMax>
void extreme_with_index(KernelArgs& a) {
  const Tensor& in = a.inputs[0];
  const Tensor& values = a.outputs[0];
  const Tensor& indices = a.outputs[1];
  const auto& attrs = *static_cast<const ReduceAttrs*>(a.attrs);
  ReducePlan p = make_reduce_plan(in, values, attrs.dims_mask);
  int64_t* idx_base = static_cast<int64_t*>(indices.data_ptr());
  visit_dtype(in.dtype(), "max", [&]<class T>() {
    T* vbase = static_cast<T*>(values.data_ptr());
    for_each_output<T, T>(p, in, values, [&](const T* base, T* dst) {
      using C = compute_t<T>;
      C best{};
      int64_t best_i = -1, i = 0;
      for_each_run(p, base, [&](const T* q, int64_t n, int64_t s) {
        for (int64_t j = 0; j < n; ++j, ++i) {
          C x = static_cast<C>(q[j * s]);
          bool better;
          if constexpr (std::is_floating_point_v<C>) {
            if (best_i >= 0 && best != best) better = false;
            else better = best_i < 0 || x != x || (kMax ? x > best : x < best);
          } else {
            better = best_i < 0 || (kMax ? x > best : x < best);
          }
          if (better) { best = x; best_i = i; }
        }
      });
      *dst = static_cast<T>(best);
      idx_base[dst - vbase] = best_i;  // indices share the values' contiguous layout
    });
  });
}

void sum_kernel(KernelArgs& a) { fold_kernel<SumFold>(a); }
void prod_kernel(KernelArgs& a) { fold_kernel<ProdFold>(a); }
void amax_kernel(KernelArgs& a) { fold_kernel<ExtremeFold<true>>(a); }
void amin_kernel(KernelArgs& a) { fold_kernel<ExtremeFold<false>>(a); }
void all_kernel(KernelArgs& a) { fold_kernel<LogicalFold<true>>(a); }
void any_kernel(KernelArgs& a) { fold_kernel<LogicalFold<false>>(a); }
void norm_kernel(KernelArgs& a) { fold_kernel<NormFold>(a); }

constexpr DeviceType kCpu = DeviceType::CPU;
KILN_REGISTER_KERNEL(Op::Sum, kCpu, sum_kernel);
KILN_REGISTER_KERNEL(Op::Prod, kCpu, prod_kernel);
KILN_REGISTER_KERNEL(Op::Amax, kCpu, amax_kernel);
KILN_REGISTER_KERNEL(Op::Amin, kCpu, amin_kernel);
KILN_REGISTER_KERNEL(Op::All, kCpu, all_kernel);
KILN_REGISTER_KERNEL(Op::Any, kCpu, any_kernel);
KILN_REGISTER_KERNEL(Op::Norm, kCpu, norm_kernel);
KILN_REGISTER_KERNEL(Op::Var, kCpu, two_pass_kernel<true>);
KILN_REGISTER_KERNEL(Op::LogSumExp, kCpu, two_pass_kernel<false>);
KILN_REGISTER_KERNEL(Op::MaxWithIndex, kCpu, extreme_with_index<true>);
KILN_REGISTER_KERNEL(Op::MinWithIndex, kCpu, extreme_with_index<false>);

}  // namespace
}  // namespace kiln::backend::cpu
