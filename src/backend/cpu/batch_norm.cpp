// CPU kernels for batch norm: per-channel statistics, the normalising pass and the backward pass,
// over row-major [N, C, S] or channels-last [N, C, H, W] (rows of C contiguous channels).
#include <cmath>
#include <vector>

#include "backend/batch_norm_math.h"
#include "backend/cpu/loops.h"
#include "backend/dispatch.h"

namespace kiln::backend::cpu {
namespace {

using bn::Geometry;
using bn::geometry;

// The element loops of the two below, compiled for each instruction set (target_clones; f is
// inlined into each clone). Rows [b, e) of channels-last data: f adds element i of channel c into
// la[c], lb[c] (vectorised across the channels).
template <class F>
KILN_VECTORIZE void sum_rows(int64_t b, int64_t e, int64_t C, double* __restrict la, double* __restrict lb,
                             const F& f) {
  for (int64_t o = b; o < e; ++o)
    for (int64_t c = 0; c < C; ++c) f(o * C + c, c, la[c], lb[c]);
}
// Channel c of [outer, C, inner] data, its sums into a and b: sixteen partial sums, element s
// of a run into sum s % 16, then added pairwise (one fixed order, vectorised).
template <class F>
KILN_VECTORIZE void sum_channel(const Geometry& g, int64_t c, double& a, double& b, const F& f) {
  constexpr int64_t kParts = 16;
  double x[kParts] = {}, y[kParts] = {};
  for (int64_t o = 0; o < g.outer; ++o) {
    const int64_t base = (o * g.c + c) * g.inner;
    int64_t s = 0;
    for (; s + kParts <= g.inner; s += kParts)
      for (int64_t k = 0; k < kParts; ++k) f(base + s + k, c, x[k], y[k]);
    for (int64_t k = 0; s + k < g.inner; ++k) f(base + s + k, c, x[k], y[k]);
  }
  a = fold_pairwise(x), b = fold_pairwise(y);
}
// f(i, c) over rows [b, e) of channels-last data.
template <class F>
KILN_VECTORIZE void map_rows(int64_t b, int64_t e, int64_t C, const F& f) {
  for (int64_t o = b; o < e; ++o)
    for (int64_t c = 0; c < C; ++c) f(o * C + c, c);
}
// f(i, c) over runs [b, e) of [outer, C, inner] data (run p: channel p % C).
template <class F>
KILN_VECTORIZE void map_runs(int64_t b, int64_t e, int64_t C, int64_t inner, const F& f) {
  for (int64_t p = b; p < e; ++p) {
    const int64_t c = p % C;
    for (int64_t s = 0; s < inner; ++s) f(p * inner + s, c);
  }
}

// Per-channel sums of f(o, c, s) -> (a, b) pairs into double accumulators: split over rows
// when channels are innermost, over channels otherwise.
template <class F>
void channel_sums(const Geometry& g, std::vector<double>& sa, std::vector<double>& sb, const F& f) {
  const size_t C = static_cast<size_t>(g.c);
  if (g.inner == 1) {
    const std::vector<double> s =
        parallel_sums(g.outer, std::max<int64_t>(1, 32768 / std::max<int64_t>(g.c, 1)), 2 * C,
                      [&](int64_t b, int64_t e, double* partial) { sum_rows(b, e, g.c, partial, partial + C, f); });
    sa.assign(s.begin(), s.begin() + static_cast<std::ptrdiff_t>(C));
    sb.assign(s.begin() + static_cast<std::ptrdiff_t>(C), s.end());
  } else {
    sa.assign(C, 0.0);
    sb.assign(C, 0.0);
    parallel_for(g.c, 1, [&](int64_t b, int64_t e) {
      for (int64_t c = b; c < e; ++c) sum_channel(g, c, sa[c], sb[c], f);
    });
  }
}

// y[i] = f(i, c) for every element, c its channel.
template <class F>
void channel_map(const Geometry& g, const F& f) {
  if (g.inner == 1) {
    parallel_for(g.outer, std::max<int64_t>(1, 32768 / std::max<int64_t>(g.c, 1)),
                 [&](int64_t b, int64_t e) { map_rows(b, e, g.c, f); });
  } else {
    parallel_for(g.outer * g.c, std::max<int64_t>(1, 32768 / g.inner),
                 [&](int64_t b, int64_t e) { map_runs(b, e, g.c, g.inner, f); });
  }
}

void batch_norm_stats(KernelArgs& a) {
  const Tensor& x = a.inputs[0];
  const auto& attrs = *static_cast<const BatchNormAttrs*>(a.attrs);
  Geometry g = geometry(x);
  const double count = static_cast<double>(g.outer * g.inner);
  std::vector<bn::Stats> stats(static_cast<size_t>(g.c));
  visit_float_dtype(x.dtype(), "batch_norm", [&]<class T>() {
    const T* xp = static_cast<const T*>(x.data_ptr());
    std::vector<double> shift(static_cast<size_t>(g.c)), sum, sq;
    for (int64_t c = 0; c < g.c; ++c) shift[c] = bn::channel_shift(xp, c, g.inner, g.per_channel());
    channel_sums(g, sum, sq, [&](int64_t i, int64_t c, double& s1, double& s2) {
      const double v = static_cast<double>(static_cast<compute_t<T>>(xp[i])) - shift[c];
      s1 += v;
      s2 += v * v;
    });
    for (int64_t c = 0; c < g.c; ++c) stats[c] = bn::stats_from_sums(sum[c], sq[c], count, attrs.eps, shift[c]);
  });
  visit_float_dtype(a.outputs[0].dtype(), "batch_norm", [&]<class A>() {
    A* mean = static_cast<A*>(a.outputs[0].data_ptr());
    A* invstd = static_cast<A*>(a.outputs[1].data_ptr());
    for (int64_t c = 0; c < g.c; ++c) {
      mean[c] = static_cast<A>(stats[c].mean);
      invstd[c] = static_cast<A>(stats[c].invstd);
    }
  });
  if (a.outputs.size() < 4) return;
  const bn::RunningUpdate update{attrs.momentum, count};
  visit_float_dtype(a.outputs[2].dtype(), "batch_norm", [&]<class R>() {
    R* rm = static_cast<R*>(a.outputs[2].data_ptr());
    R* rv = static_cast<R*>(a.outputs[3].data_ptr());
    for (int64_t c = 0; c < g.c; ++c) update.apply<compute_t<R>>(rm[c], rv[c], stats[c]);
  });
}

// y = (x - mean) * invstd * weight + bias, as one multiply-add per element (then the fused ReLU).
// Every channel's bn::affine, as two arrays (scale, shift) that the loops read vectorised.
template <class A>
struct Affines {
  std::vector<A> scale, shift;
};
template <class A, class S>
Affines<A> affines(const Tensor& mean, const Tensor& stat, const Tensor& w, const Tensor& b,
                   const BatchNormAttrs& attrs) {
  Affines<A> f{std::vector<A>(mean.numel()), std::vector<A>(mean.numel())};
  const S *mp = mean.data_ptr<S>(), *sp = stat.data_ptr<S>(), *wp = w.data_ptr<S>(), *bp = b.data_ptr<S>();
  for (int64_t c = 0; c < mean.numel(); ++c) {
    const S invstd = bn::invstd_of(sp[c], attrs.training, attrs.eps);
    const bn::Affine<A> a = bn::affine<A>(mp[c], invstd, wp[c], bp[c]);
    f.scale[c] = a.scale, f.shift[c] = a.shift;
  }
  return f;
}

// Inputs: x, mean, invstd (training) or variance (evaluation), w, b.
void batch_norm_apply(KernelArgs& a) {
  const Tensor& x = a.inputs[0];
  const auto& attrs = *static_cast<const BatchNormAttrs*>(a.attrs);
  Geometry g = geometry(x);
  visit_float_dtype(x.dtype(), "batch_norm", [&]<class T>() {
    using A = compute_t<T>;
    const T* xp = static_cast<const T*>(x.data_ptr());
    T* yp = static_cast<T*>(a.outputs[0].data_ptr());
    Affines<A> f;
    visit_float_dtype(a.inputs[1].dtype(), "batch_norm",
                      [&]<class S>() { f = affines<A, S>(a.inputs[1], a.inputs[2], a.inputs[3], a.inputs[4], attrs); });
    const A *sc = f.scale.data(), *sh = f.shift.data();
    bn::with_relu(attrs.relu, [&]<bool relu>() {
      channel_map(g, [&](int64_t i, int64_t c) { yp[i] = bn::apply(xp[i], bn::Affine<A>{sc[c], sh[c]}, relu); });
    });
  });
}

// grad_weight = sum(g * xhat), grad_bias = sum(g); grad_x = w * invstd * (g - [training]
// (mean(g) + xhat * mean(g * xhat))), xhat = (x - mean) * invstd; g masked first by the fused
// ReLU's output (recomputed from x) when there is one. Inputs: g, x, mean, invstd or variance
// (as for Apply), w, b.
void batch_norm_backward(KernelArgs& a) {
  const Tensor &gy = a.inputs[0], &x = a.inputs[1];
  const auto& attrs = *static_cast<const BatchNormAttrs*>(a.attrs);
  Geometry g = geometry(x);
  const double count = static_cast<double>(g.outer * g.inner);
  visit_float_dtype(x.dtype(), "batch_norm", [&]<class T>() {
    using A = compute_t<T>;
    const T* gp = static_cast<const T*>(gy.data_ptr());
    const T* xp = static_cast<const T*>(x.data_ptr());
    T* gxp = static_cast<T*>(a.outputs[0].data_ptr());
    visit_float_dtype(a.inputs[2].dtype(), "batch_norm", [&]<class S>() {
      const S *mean = a.inputs[2].data_ptr<S>(), *invstd = a.inputs[3].data_ptr<S>(), *w = a.inputs[4].data_ptr<S>();
      const Affines<A> f = affines<A, S>(a.inputs[2], a.inputs[3], a.inputs[4], a.inputs[5], attrs);
      const A *sc = f.scale.data(), *sh = f.shift.data();
      bn::with_relu(attrs.relu, [&]<bool relu>() {
        std::vector<double> sg, sgx;
        channel_sums(g, sg, sgx, [&](int64_t i, int64_t c, double& s1, double& s2) {
          const double gv =
              static_cast<double>(bn::relu_masked(static_cast<A>(gp[i]), xp[i], bn::Affine<A>{sc[c], sh[c]}, relu));
          s1 += gv;
          s2 += gv * (static_cast<double>(static_cast<A>(xp[i])) - static_cast<double>(mean[c]));
        });
        S* gw = a.outputs[1].data_ptr<S>();
        S* gb = a.outputs[2].data_ptr<S>();
        // Per channel: grad_x = k * g + m * (x - mean) + d.
        std::vector<A> k(g.c), m(g.c), d(g.c), mu(g.c);
        for (int64_t c = 0; c < g.c; ++c) {
          const S inv = bn::invstd_of(invstd[c], attrs.training, attrs.eps);
          const bn::Backward b = bn::backward_factors(sg[c], sgx[c], static_cast<double>(inv),
                                                      static_cast<double>(w[c]), count, attrs.training);
          gw[c] = static_cast<S>(b.grad_weight);
          gb[c] = static_cast<S>(b.grad_bias);
          k[c] = static_cast<A>(b.k);
          m[c] = static_cast<A>(b.m);
          d[c] = static_cast<A>(b.d);
          mu[c] = static_cast<A>(mean[c]);
        }
        const A *kp = k.data(), *mp = m.data(), *dp = d.data(), *mup = mu.data();
        channel_map(g, [&](int64_t i, int64_t c) {
          const A gv = bn::relu_masked(static_cast<A>(gp[i]), xp[i], bn::Affine<A>{sc[c], sh[c]}, relu);
          gxp[i] = static_cast<T>(kp[c] * gv + mp[c] * (static_cast<A>(xp[i]) - mup[c]) + dp[c]);
        });
      });
    });
  });
}

KILN_REGISTER_KERNEL(Op::BatchNormStats, DeviceType::CPU, batch_norm_stats);
KILN_REGISTER_KERNEL(Op::BatchNormApply, DeviceType::CPU, batch_norm_apply);
KILN_REGISTER_KERNEL(Op::BatchNormBackward, DeviceType::CPU, batch_norm_backward);

}  // namespace
}  // namespace kiln::backend::cpu
