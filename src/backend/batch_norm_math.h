// Batch norm's per-channel arithmetic as host-and-device functions, shared by the CPU kernels
// (backend/cpu/batch_norm.cpp) and the CUDA kernels (backend/cuda/batch_norm.cu): the layout
// both walk, the statistics from a channel's sums, and the backward pass's per-channel factors.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "backend/math.h"
#include "backend/visit_dtype.h"
#include "kiln/tensor.h"

namespace kiln::bn {

// x viewed as [outer, C, inner] with element (o, c, s) at (o * C + c) * inner + s: row-major
// [N, C, S...] is outer = N, inner = S; channels-last [N, C, H, W] is outer = N * H * W, inner 1.
struct Geometry {
  int64_t outer = 0, c = 0, inner = 1;
  int64_t per_channel() const { return outer * inner; }
};
inline Geometry geometry(const Tensor& x) {
  Geometry g;
  g.c = x.size(1);
  const bool channels_last = x.dim() == 4 && !x.is_contiguous();
  int64_t rest = 1;
  for (int64_t d = 2; d < x.dim(); ++d) rest *= x.size(d);
  g.outer = channels_last ? x.size(0) * rest : x.size(0);
  g.inner = channels_last ? 1 : rest;
  return g;
}

// The channel of element i of a dense tensor with that geometry.
KILN_HOST_DEVICE inline int64_t channel_of(int64_t i, int64_t channels, int64_t inner) {
  return inner == 1 ? i % channels : (i / inner) % channels;
}

// The value channel c's sums are taken relative to, K: its first element, (0, c, 0) (0 for a
// channel with no values). Sums of x - K and (x - K)^2 do not cancel as sum(x^2) - n mean^2 does
// when the mean is far from 0 against the spread (values of 1e8 + N(0, 1) in float64: a variance
// of 0 or noise, where torch's is 1); the CPU and GPU kernels both take them.
template <class T>
KILN_HOST_DEVICE inline double channel_shift(const T* x, int64_t c, int64_t inner, int64_t per_channel) {
  return per_channel > 0 ? static_cast<double>(static_cast<backend::compute_t<T>>(x[c * inner])) : 0.0;
}

// A channel's mean, biased variance and 1 / sqrt(var + eps) from the sums of x - shift and
// (x - shift)^2 over its `count` values, in double.
struct Stats {
  double mean, var, invstd;
};
KILN_HOST_DEVICE inline Stats stats_from_sums(double sum, double sum_sq, double count, double eps, double shift) {
  const double m = sum / count, d = sum_sq / count - m * m, v = d > 0.0 ? d : 0.0;
  return {shift + m, v, 1.0 / std::sqrt(v + eps)};
}

// PyTorch's update of a channel's running statistics from the batch's, in double:
// (1 - momentum) * running + momentum * batch, the batch's variance unbiased (count / (count - 1)).
struct RunningUpdate {
  double momentum, count;
  KILN_HOST_DEVICE double mean(double running, const Stats& batch) const {
    return (1.0 - momentum) * running + momentum * batch.mean;
  }
  KILN_HOST_DEVICE double var(double running, const Stats& batch) const {
    return (1.0 - momentum) * running + momentum * (batch.var * count / (count - 1.0));
  }
  // Updates a channel's running mean and variance stored as R, read and written through C (R's
  // compute type: float for the 16-bit types).
  template <class C, class R>
  KILN_HOST_DEVICE void apply(R& running_mean, R& running_var, const Stats& batch) const {
    running_mean = static_cast<R>(static_cast<C>(mean(static_cast<double>(static_cast<C>(running_mean)), batch)));
    running_var = static_cast<R>(static_cast<C>(var(static_cast<double>(static_cast<C>(running_var)), batch)));
  }
};

// A channel's 1 / sqrt(var + eps). The kernels' per-channel statistics are the batch's mean and
// invstd in training, and the running mean and variance in evaluation, whose invstd the kernels
// compute themselves (one launch per layer instead of three at batch 1).
template <class S>
KILN_HOST_DEVICE inline S invstd_of(S stat, bool training, double eps) {
  return training ? stat : static_cast<S>(S(1) / std::sqrt(stat + static_cast<S>(eps)));
}

// The normalising pass y = x * scale + shift of one channel: scale = invstd * w and
// shift = b - mean * scale computed in the statistics' type S, then used in x's compute type A.
template <class A>
struct Affine {
  A scale, shift;
};
template <class A, class S>
KILN_HOST_DEVICE inline Affine<A> affine(S mean, S invstd, S w, S b) {
  return {static_cast<A>(invstd * w), static_cast<A>(b - mean * invstd * w)};
}

// One output element, rounded to T, with the ReLU that batch_norm_relu fuses into the pass. The
// ReLU before the rounding gives the bits of the ReLU after it (rounding keeps signs, a value
// that rounds to +0 gives +0 either way, NaN stays NaN), for one conversion per element.
template <class T, class A>
KILN_HOST_DEVICE inline T apply(T x, Affine<A> f, bool relu) {
  const A v = static_cast<A>(x) * f.scale + f.shift;
  return static_cast<T>(relu ? math::Relu{}(v) : v);
}

// The largest value of the compute type that T rounds to +0: T(v) > 0 exactly when v is above it
// (rounding to nearest keeps signs, and NaN compares false either way). bfloat16's smallest
// subnormal is 2^-133 and float16's 2^-24; half of it ties to the even +0.
template <class T> inline constexpr float kRoundsToZero = 0.0f;
template <> inline constexpr float kRoundsToZero<BFloat16> = 0x1p-134f;
template <> inline constexpr float kRoundsToZero<Half> = 0x1p-25f;

// The gradient reaching batch norm's output under the fused ReLU: g where the output was
// positive, else 0 (ReluBackward's rule), the output recomputed from x as apply() did.
template <class T, class A>
KILN_HOST_DEVICE inline A relu_masked(A g, T x, Affine<A> f, bool relu) {
  if (!relu) return g;
#if defined(__CUDA_ARCH__)
  return math::ReluBackward{}(g, static_cast<A>(apply(x, f, false)));
#else
  // The output's sign without rounding it to T, which g++ does not vectorise here: in bfloat16
  // the fused backward took 34 ms, 7 times its 4.7 ms without the ReLU ([16, 256, 56, 56]).
  // The choice as a bit mask rather than the branch the compiler makes of it: half of a ReLU's
  // outputs are cut, at random, so a branch mispredicts half the time.
  const A v = static_cast<A>(x) * f.scale + f.shift;
  using Bits = std::conditional_t<sizeof(A) == 4, uint32_t, uint64_t>;
  return std::bit_cast<A>(std::bit_cast<Bits>(g) & (Bits{0} - static_cast<Bits>(v > A(kRoundsToZero<T>))));
#endif
}

// f.template operator()<relu>() with relu a compile-time constant: the kernels' passes, compiled
// once with the fused ReLU and once without (host code, CPU and CUDA alike).
template <class F>
void with_relu(bool relu, const F& f) {
  if (relu)
    f.template operator()<true>();
  else
    f.template operator()<false>();
}

// The backward pass of one channel from sum(g) and sum(g * (x - mean)):
// grad_weight = sum(g * xhat), grad_bias = sum(g), and grad_x = k * g + m * (x - mean) + d, which
// is w * invstd * (g - [training] (mean(g) + xhat * mean(g * xhat))), xhat = (x - mean) * invstd.
struct Backward {
  double k, m, d, grad_weight, grad_bias;
};
KILN_HOST_DEVICE inline Backward backward_factors(double sum_g, double sum_gx, double invstd, double w, double count,
                                                  bool training) {
  const double k = w * invstd;
  Backward b{k, 0.0, 0.0, sum_gx * invstd, sum_g};
  if (training && count > 0) {
    b.m = -k * invstd * invstd * sum_gx / count;
    b.d = -k * sum_g / count;
  }
  return b;
}

}  // namespace kiln::bn
