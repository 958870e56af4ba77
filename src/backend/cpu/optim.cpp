// CPU kernels for the fused optimizer steps (Adam/AdamW, SGD): one parallel pass over every
// element of every tensor of a param group, each element read and written once. float16 and
// bfloat16 compute in float and round once per stored value.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <vector>

#include "backend/cpu/loops.h"
#include "backend/cuda/optim_plan.h"    // Chunks: the same chunks as the CUDA kernels
#include "backend/cuda/reduce_folds.h"  // NormFold: Op::Norm's per-element rule, host and device
#include "backend/dispatch.h"

namespace kiln::backend::cpu {
namespace {

// Calls f(t, begin, end) for element ranges of tensors t = 0..n-1 laid end to end, the total
// split evenly over the threads, so one large tensor and many small ones balance alike.
template <class F>
void for_each_range(std::span<const int64_t> numel, const F& f) {
  std::vector<int64_t> offsets(numel.size() + 1, 0);
  for (size_t t = 0; t < numel.size(); ++t) offsets[t + 1] = offsets[t] + numel[t];
  parallel_for(offsets.back(), kElementwiseGrain, [&](int64_t b, int64_t e) {
    // The last tensor starting at or before b (empty tensors share offsets: skip them).
    size_t t = static_cast<size_t>(std::upper_bound(offsets.begin(), offsets.end(), b) - offsets.begin()) - 1;
    while (b < e) {
      while (offsets[t + 1] <= b) ++t;
      const int64_t end = std::min(e, offsets[t + 1]);
      f(t, b - offsets[t], end - offsets[t]);
      b = end;
    }
  });
}

template <class T>
T* data_of(const Tensor& t) {
  return static_cast<T*>(t.data_ptr());
}

// ---- Adam / AdamW

enum class Decay { None, L2, Decoupled };

// The update of torch.optim.Adam's single-tensor path, operation for operation in the compute
// type C (T, or float for 16-bit T) with the coefficients rounded to C as PyTorch's scalar
// arguments are:
//   g = -g (maximize, by g_sign: exact);  g += wd * p (Adam) | p *= 1 - lr * wd (AdamW)
//   m = lerp(m, g, 1 - beta1);  v = v * beta2 + (1 - beta2) * g * g;  vmax = max(vmax, v)
//   p += -step_size * m / (sqrt(v or vmax) / sqrt(1 - beta2^step) + eps)
template <class T>
struct AdamCoef {
  T g_sign;             // -1 to maximize, else 1
  T wd, decay;          // decay = 1 - lr * wd
  T lerp_base_is_m;     // lerp(m, g, w): w < 0.5 ? m + w (g - m) : g - (g - m) (1 - w)
  T lerp_coef;          // w or w - 1
  T beta2, one_minus_beta2, eps;
  T bc2_sqrt, neg_step_size;
};

template <class T, Decay kDecay, bool kAmsgrad, class C = compute_t<T>>
KILN_VECTORIZE void adam_range(T* __restrict p, const T* __restrict g, T* __restrict m, T* __restrict v,
                               T* __restrict vmax, int64_t n, AdamCoef<C> c) {
  const bool small = c.lerp_base_is_m != C(0);
  for (int64_t i = 0; i < n; ++i) {
    C pi = static_cast<C>(p[i]), gi = static_cast<C>(g[i]) * c.g_sign;
    if constexpr (kDecay == Decay::L2) gi = gi + c.wd * pi;
    if constexpr (kDecay == Decay::Decoupled) pi = pi * c.decay;
    const C mi = static_cast<C>(m[i]);
    const C mn = (small ? mi : gi) + c.lerp_coef * (gi - mi);
    C vn = static_cast<C>(v[i]) * c.beta2;
    vn = vn + c.one_minus_beta2 * gi * gi;
    m[i] = static_cast<T>(mn);
    v[i] = static_cast<T>(vn);
    C vh = vn;
    if constexpr (kAmsgrad) {
      const C old = static_cast<C>(vmax[i]);
      vh = vn != vn || old < vn ? vn : old;  // torch.maximum(old, vn): a NaN either side stays
      vmax[i] = static_cast<T>(vh);
    }
    const C denom = std::sqrt(vh) / c.bc2_sqrt + c.eps;
    p[i] = static_cast<T>(pi + c.neg_step_size * mn / denom);
  }
}

template <class T, Decay kDecay, bool kAmsgrad>
void adam_all(KernelArgs& a, const AdamStepAttrs& at) {
  const size_t n = a.inputs.size();
  std::vector<int64_t> numel(n);
  for (size_t t = 0; t < n; ++t) numel[t] = a.inputs[t].numel();
  using C = compute_t<T>;
  AdamCoef<C> base{};
  base.g_sign = at.maximize ? C(-1) : C(1);
  base.wd = static_cast<C>(at.weight_decay);
  base.decay = static_cast<C>(1 - at.lr * at.weight_decay);
  const C w = static_cast<C>(1 - at.beta1);
  const bool small = std::abs(w) < C(0.5);
  base.lerp_base_is_m = small ? C(1) : C(0);
  base.lerp_coef = small ? w : w - C(1);
  base.beta2 = static_cast<C>(at.beta2);
  base.one_minus_beta2 = static_cast<C>(1 - at.beta2);
  base.eps = static_cast<C>(at.eps);
  for_each_range(numel, [&](size_t t, int64_t b, int64_t e) {
    AdamCoef<C> c = base;
    c.bc2_sqrt = static_cast<C>(at.bias_correction2_sqrt[t]);
    c.neg_step_size = static_cast<C>(-at.step_size[t]);
    T* vmax = kAmsgrad ? data_of<T>(a.outputs[3 * n + t]) + b : nullptr;
    adam_range<T, kDecay, kAmsgrad>(data_of<T>(a.outputs[t]) + b, data_of<T>(a.inputs[t]) + b,
                                    data_of<T>(a.outputs[n + t]) + b, data_of<T>(a.outputs[2 * n + t]) + b, vmax,
                                    e - b, c);
  });
}

void adam_step(KernelArgs& a) {
  const auto& at = *static_cast<const AdamStepAttrs*>(a.attrs);
  if (a.inputs.empty()) return;
  const Decay decay = at.weight_decay == 0 ? Decay::None : at.decoupled ? Decay::Decoupled : Decay::L2;
  auto go = [&]<class T>() {
    auto with = [&]<Decay D>() {
      if (at.amsgrad) adam_all<T, D, true>(a, at);
      else adam_all<T, D, false>(a, at);
    };
    switch (decay) {
      case Decay::None: with.template operator()<Decay::None>(); break;
      case Decay::L2: with.template operator()<Decay::L2>(); break;
      case Decay::Decoupled: with.template operator()<Decay::Decoupled>(); break;
    }
  };
  visit_float_dtype(a.outputs[0].dtype(), "AdamStep", go);
}

// ---- SGD

// torch.optim.SGD's single-tensor path in the compute type:
//   d = g_sign * g + wd * p;  buf = d (fresh) or buf * momentum + (1 - dampening) * d
//   d = nesterov ? d + momentum * buf : buf;  p += -lr * d
template <class T>
struct SgdCoef {
  T wd, momentum, one_minus_dampening, neg_lr;
  T g_sign;  // -1 to maximize, else 1
};

template <class T, bool kWd, bool kMomentum, bool kNesterov, class C = compute_t<T>>
KILN_VECTORIZE void sgd_range(T* __restrict p, const T* __restrict g, T* __restrict buf, bool fresh, int64_t n,
                              SgdCoef<C> c) {
  for (int64_t i = 0; i < n; ++i) {
    const C pi = static_cast<C>(p[i]);
    C d = static_cast<C>(g[i]) * c.g_sign;
    if constexpr (kWd) d = d + c.wd * pi;
    if constexpr (kMomentum) {
      const C b = fresh ? d : static_cast<C>(buf[i]) * c.momentum + c.one_minus_dampening * d;
      buf[i] = static_cast<T>(b);
      d = kNesterov ? d + c.momentum * b : b;
    }
    p[i] = static_cast<T>(pi + c.neg_lr * d);
  }
}

template <class T, bool kWd, bool kMomentum, bool kNesterov>
void sgd_all(KernelArgs& a, const SgdStepAttrs& at) {
  const size_t n = a.inputs.size();
  std::vector<int64_t> numel(n);
  for (size_t t = 0; t < n; ++t) numel[t] = a.inputs[t].numel();
  using C = compute_t<T>;
  const SgdCoef<C> c{static_cast<C>(at.weight_decay), static_cast<C>(at.momentum),
                     static_cast<C>(1 - at.dampening), static_cast<C>(-at.lr), at.maximize ? C(-1) : C(1)};
  for_each_range(numel, [&](size_t t, int64_t b, int64_t e) {
    T* buf = kMomentum ? data_of<T>(a.outputs[n + t]) + b : nullptr;
    const bool fresh = kMomentum && at.fresh_buffer[t] != 0;
    sgd_range<T, kWd, kMomentum, kNesterov>(data_of<T>(a.outputs[t]) + b, data_of<T>(a.inputs[t]) + b, buf, fresh,
                                             e - b, c);
  });
}

void sgd_step(KernelArgs& a) {
  const auto& at = *static_cast<const SgdStepAttrs*>(a.attrs);
  if (a.inputs.empty()) return;
  auto go = [&]<class T>() {
    auto with = [&]<bool kWd>() {
      if (at.momentum == 0) sgd_all<T, kWd, false, false>(a, at);
      else if (at.nesterov) sgd_all<T, kWd, true, true>(a, at);
      else sgd_all<T, kWd, true, false>(a, at);
    };
    if (at.weight_decay != 0) with.template operator()<true>();
    else with.template operator()<false>();
  };
  visit_float_dtype(a.outputs[0].dtype(), "SgdStep", go);
}

// ---- GradScaler's unscale: g *= inv_scale, noting whether some g was inf or NaN before.
template <class T, class C = compute_t<T>>
KILN_VECTORIZE bool unscale_range(T* __restrict g, int64_t n, C inv) {
  int bad = 0;  // an int, so that the loop vectorises
  for (int64_t i = 0; i < n; ++i) {
    const C v = static_cast<C>(g[i]);
    bad |= !(std::abs(v) <= std::numeric_limits<C>::max());  // inf or NaN
    g[i] = static_cast<T>(v * inv);
  }
  return bad != 0;
}

void amp_unscale(KernelArgs& a) {
  const auto& at = *static_cast<const AmpUnscaleAttrs*>(a.attrs);
  const size_t n = a.outputs.size() - 1;
  if (n == 0) return;
  std::vector<int64_t> numel(n);
  for (size_t t = 0; t < n; ++t) numel[t] = a.outputs[t].numel();
  std::atomic<bool> found{false};
  visit_float_dtype(a.outputs[0].dtype(), "AmpUnscale", [&]<class T>() {
    const compute_t<T> inv = static_cast<compute_t<T>>(at.inv_scale);
    for_each_range(numel, [&](size_t t, int64_t b, int64_t e) {
      if (unscale_range<T>(data_of<T>(a.outputs[t]) + b, e - b, inv)) found.store(true, std::memory_order_relaxed);
    });
  });
  if (found.load()) *data_of<float>(a.outputs[n]) = 1.0f;
}

// ---- gradient clipping's multi-tensor norm and scale. The tensors are cut into the CUDA
// kernels' chunks; each chunk's partial is folded in order, so the result does not depend on
// the number of threads.

// A chunk's partial by NormFold's rule, element by element.
template <class T>
double fold_chunk(const cuda::NormFold<T>& fold, const T* x, int64_t begin, int64_t end) {
  double s = fold.init();
  for (int64_t i = begin; i < end; ++i) s = fold.step(s, static_cast<compute_t<T>>(x[i]), i);
  return s;
}

// The p = 2 partial (the common case) in eight independent lanes, which the compiler turns into
// vector code (a single running sum in double would not be reordered); the same in every run.
template <class T>
KILN_VECTORIZE double sum_squares(const T* __restrict x, int64_t n) {
  constexpr int kLanes = 8;
  double lane[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int k = 0; k < kLanes; ++k) {
      const double v = static_cast<double>(static_cast<compute_t<T>>(x[i + k]));
      lane[k] += v * v;
    }
  double s = 0;
  for (; i < n; ++i) {
    const double v = static_cast<double>(static_cast<compute_t<T>>(x[i]));
    s += v * v;
  }
  return s + fold_pairwise(lane);
}

void foreach_norm(KernelArgs& a) {
  const auto& at = *static_cast<const ReduceAttrs*>(a.attrs);
  const size_t n = a.inputs.size();
  std::vector<int64_t> first(n + 1, 0);  // tensor t's chunks: [first[t], first[t + 1])
  for (size_t t = 0; t < n; ++t) first[t + 1] = first[t] + (a.inputs[t].numel() + cuda::kChunk - 1) / cuda::kChunk;
  if (n == 0) return;
  visit_float_dtype(a.inputs[0].dtype(), "ForeachNorm", [&]<class T>() {
    const auto fold = cuda::NormFold<T>::make(at);
    std::vector<double> partial(static_cast<size_t>(first[n]));
    parallel_for(first[n], 1, [&](int64_t b, int64_t e) {
      size_t t = static_cast<size_t>(std::upper_bound(first.begin(), first.end(), b) - first.begin()) - 1;
      for (int64_t c = b; c < e; ++c) {
        while (first[t + 1] <= c) ++t;
        const T* x = data_of<T>(a.inputs[t]);
        const int64_t begin = (c - first[t]) * cuda::kChunk, end = std::min(a.inputs[t].numel(), begin + cuda::kChunk);
        partial[static_cast<size_t>(c)] = fold.kind == cuda::NormFold<T>::kTwo ? sum_squares(x + begin, end - begin)
                                                                                 : fold_chunk(fold, x, begin, end);
      }
    });
    visit_float_dtype(a.outputs[0].dtype(), "ForeachNorm", [&]<class R>() {
      R* out = data_of<R>(a.outputs[0]);
      for (size_t t = 0; t < n; ++t) {
        double s = fold.init();
        for (int64_t c = first[t]; c < first[t + 1]; ++c) s = fold.merge(s, partial[static_cast<size_t>(c)]);
        out[t] = static_cast<R>(fold.finish(s));
      }
    });
  });
}

template <class T, class C = compute_t<T>>
KILN_VECTORIZE void scale_range(T* __restrict x, int64_t n, C s) {
  for (int64_t i = 0; i < n; ++i) x[i] = static_cast<T>(static_cast<C>(x[i]) * s);
}

void foreach_mul(KernelArgs& a) {
  const size_t n = a.outputs.size();
  if (n == 0) return;
  const double s = visit_float_dtype(a.inputs[0].dtype(), "ForeachMul",
                                     [&]<class S>() { return static_cast<double>(*data_of<S>(a.inputs[0])); });
  std::vector<int64_t> numel(n);
  for (size_t t = 0; t < n; ++t) numel[t] = a.outputs[t].numel();
  visit_float_dtype(a.outputs[0].dtype(), "ForeachMul", [&]<class T>() {
    const compute_t<T> scale = static_cast<compute_t<T>>(s);
    for_each_range(numel,
                   [&](size_t t, int64_t b, int64_t e) { scale_range<T>(data_of<T>(a.outputs[t]) + b, e - b, scale); });
  });
}

constexpr DeviceType kCpu = DeviceType::CPU;
KILN_REGISTER_KERNEL(Op::AdamStep, kCpu, adam_step);
KILN_REGISTER_KERNEL(Op::SgdStep, kCpu, sgd_step);
KILN_REGISTER_KERNEL(Op::AmpUnscale, kCpu, amp_unscale);
KILN_REGISTER_KERNEL(Op::ForeachNorm, kCpu, foreach_norm);
KILN_REGISTER_KERNEL(Op::ForeachMul, kCpu, foreach_mul);

}  // namespace
}  // namespace kiln::backend::cpu
