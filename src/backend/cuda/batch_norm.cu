// CUDA kernels for batch norm over row-major [N, C, S...] or channels-last [N, C, H, W] (the
// contract of backend/cpu/batch_norm.cpp): per-channel statistics and the backward pass's
// per-channel sums in double, deterministic (device/channel_sums.cuh), with the CPU's per-channel
// arithmetic (batch_norm_math.h); the normalising pass and grad_x as one multiply-add per
// element, with batch_norm_relu's ReLU (and its gradient mask) fused in. Statistics are float32
// (float64 for float64 input), as the op layer makes them; in evaluation the kernels take the
// running variance and compute invstd themselves (bn::invstd_of).
#include "backend/batch_norm_math.h"
#include "backend/cuda/device/channel_sums.cuh"

namespace kiln::backend::cuda {
namespace {

using bn::Geometry;

// Element i's channel.
struct ChannelOf {
  int64_t c, inner;
  __device__ __forceinline__ int64_t operator()(int64_t i) const { return bn::channel_of(i, c, inner); }
};

// x - K and (x - K)^2, K the channel's shift (bn::channel_shift).
template <class T>
struct StatTerms {
  const T* x;
  int64_t inner, per_channel;
  __device__ void operator()(int64_t i, int64_t, int64_t c, double& s, double& q) const {
    const double v = static_cast<double>(static_cast<compute_t<T>>(x[i])) - bn::channel_shift(x, c, inner, per_channel);
    s += v;
    q += v * v;
  }
};
// The batch's mean and invstd, and the running statistics' update when running_mean is given.
template <class T, class S, class R>
struct WriteStats {
  const T* x;
  int64_t inner, per_channel;
  S *mean, *invstd;
  R *running_mean, *running_var;
  double eps;
  bn::RunningUpdate update;  // its count is the channel's
  __device__ void operator()(int64_t c, double sum, double sum_sq) const {
    const bn::Stats st =
        bn::stats_from_sums(sum, sum_sq, update.count, eps, bn::channel_shift(x, c, inner, per_channel));
    mean[c] = static_cast<S>(st.mean);
    invstd[c] = static_cast<S>(st.invstd);
    if (running_mean) update.template apply<compute_t<R>>(running_mean[c], running_var[c], st);
  }
};

// A channel's y = x * scale + shift (the CPU's bn::affine), read from the per-channel tensors.
// stat is invstd when training, the running variance when not (bn::invstd_of).
template <class S>
struct ChannelAffine {
  const S *mean, *stat, *w, *b;
  bool training;
  double eps;
  template <class A>
  __device__ __forceinline__ bn::Affine<A> at(int64_t c) const {
    return bn::affine<A>(mean[c], bn::invstd_of(stat[c], training, eps), w[c], b[c]);
  }
};

// y = x * scale + shift, then the fused ReLU when Relu.
template <class T, class S, bool Relu>
__global__ void batch_norm_apply_kernel(const T* __restrict__ x, T* __restrict__ y, ChannelAffine<S> affine,
                                        int64_t numel, ChannelOf channel_of) {
  using A = compute_t<T>;
  KILN_GRID_STRIDE(i, numel) { y[i] = bn::apply(x[i], affine.template at<A>(channel_of(i)), Relu); }
}

// The sums of g and g * (x - mean), g masked by the fused ReLU's output when Relu.
template <class T, class S, bool Relu>
struct BackwardTerms {
  const T* g;
  const T* x;
  const S* mean;
  ChannelAffine<S> affine;
  __device__ void operator()(int64_t i, int64_t, int64_t c, double& sg, double& sgx) const {
    using A = compute_t<T>;
    const double gv = static_cast<double>(bn::relu_masked(static_cast<A>(g[i]), x[i], affine.template at<A>(c), Relu));
    sg += gv;
    sgx += gv * (static_cast<double>(static_cast<A>(x[i])) - static_cast<double>(mean[c]));
  }
};
// Writes grad_weight, grad_bias and the factors of grad_x = k g + m (x - mean) + d per channel
// into factors[4][C] (k, m, d, mean).
template <class S, class A>
struct WriteBackward {
  const S *mean, *stat, *w;
  S *grad_weight, *grad_bias;
  A* factors;
  int64_t channels;
  double count;
  bool training;
  double eps;
  __device__ void operator()(int64_t c, double sum_g, double sum_gx) const {
    const S invstd = bn::invstd_of(stat[c], training, eps);
    const bn::Backward f =
        bn::backward_factors(sum_g, sum_gx, static_cast<double>(invstd), static_cast<double>(w[c]), count, training);
    grad_weight[c] = static_cast<S>(f.grad_weight);
    grad_bias[c] = static_cast<S>(f.grad_bias);
    factors[c] = static_cast<A>(f.k);
    factors[channels + c] = static_cast<A>(f.m);
    factors[2 * channels + c] = static_cast<A>(f.d);
    factors[3 * channels + c] = static_cast<A>(mean[c]);
  }
};

template <class T, class S, bool Relu>
__global__ void batch_norm_grad_input_kernel(const T* __restrict__ g, const T* __restrict__ x, T* __restrict__ gx,
                                             const compute_t<T>* __restrict__ factors, ChannelAffine<S> affine,
                                             int64_t numel, ChannelOf channel_of) {
  using A = compute_t<T>;
  const int64_t C = channel_of.c;
  KILN_GRID_STRIDE(i, numel) {
    const int64_t c = channel_of(i);
    const A gv = bn::relu_masked(static_cast<A>(g[i]), x[i], affine.template at<A>(c), Relu);
    gx[i] = static_cast<T>(factors[c] * gv + factors[C + c] * (static_cast<A>(x[i]) - factors[3 * C + c]) +
                           factors[2 * C + c]);
  }
}

// The per-channel tensors' dtype is x's compute type (the op layer's rule); others go to the CPU.
bool compute_typed(ScalarType x, std::initializer_list<const Tensor*> per_channel) {
  for (const Tensor* t : per_channel)
    if (t->dtype() != (x == kFloat64 ? kFloat64 : kFloat32)) return false;
  return true;
}
// Running statistics in x's type (a model converted to bfloat16 or float16) or in float32 (a
// module's buffers beside float64 or 16-bit input, as the CPU takes them); the statistics' own
// type is one of the two.
bool supports_stats(const KernelArgs& a) {
  if (a.outputs.size() > 2) {
    const ScalarType r = a.outputs[2].dtype();
    if ((r != a.inputs[0].dtype() && r != kFloat32) || (a.outputs.size() > 3 && a.outputs[3].dtype() != r))
      return false;
  }
  return compute_typed(a.inputs[0].dtype(), {&a.outputs[0], &a.outputs[1]});
}
bool supports_apply(const KernelArgs& a) {
  return compute_typed(a.inputs[0].dtype(), {&a.inputs[1], &a.inputs[2], &a.inputs[3], &a.inputs[4]});
}
bool supports_backward(const KernelArgs& a) {
  return compute_typed(a.inputs[1].dtype(),
                       {&a.inputs[2], &a.inputs[3], &a.inputs[4], &a.inputs[5], &a.outputs[1], &a.outputs[2]});
}

// {x} -> {mean, invstd[, running_mean, running_var]} (supports_stats: the running statistics in
// x's type or in float32).
void batch_norm_stats(KernelArgs& a) {
  const Tensor& x = a.inputs[0];
  const auto& attrs = *static_cast<const BatchNormAttrs*>(a.attrs);
  const Geometry geo = bn::geometry(x);
  const double count = static_cast<double>(geo.per_channel());
  const bool running = a.outputs.size() > 3;
  visit_float_dtype(x.dtype(), "batch_norm", [&]<class T>() {
    using S = std::conditional_t<std::is_same_v<T, double>, double, float>;
    auto launch = [&]<class R>() {
      const T* xp = x.data_ptr<T>();
      channel_sums(geo.outer, geo.c, geo.inner, StatTerms<T>{xp, geo.inner, geo.per_channel()},
                   WriteStats<T, S, R>{xp, geo.inner, geo.per_channel(), a.outputs[0].data_ptr<S>(),
                                    a.outputs[1].data_ptr<S>(),
                                    running ? a.outputs[2].data_ptr<R>() : nullptr,
                                    running ? a.outputs[3].data_ptr<R>() : nullptr, attrs.eps,
                                    bn::RunningUpdate{attrs.momentum, count}},
                   x.device(), stream_of(a), "batch_norm (statistics)");
    };
    if (!running || a.outputs[2].dtype() == x.dtype())
      launch.template operator()<T>();
    else
      launch.template operator()<float>();
  });
}

void batch_norm_apply(KernelArgs& a) {
  const Tensor& x = a.inputs[0];
  const Geometry geo = bn::geometry(x);
  if (x.numel() == 0) return;
  visit_float_dtype(x.dtype(), "batch_norm", [&]<class T>() {
    using S = std::conditional_t<std::is_same_v<T, double>, double, float>;
    const auto& attrs = *static_cast<const BatchNormAttrs*>(a.attrs);
    const ChannelAffine<S> affine{a.inputs[1].data_ptr<S>(), a.inputs[2].data_ptr<S>(), a.inputs[3].data_ptr<S>(),
                                  a.inputs[4].data_ptr<S>(), attrs.training, attrs.eps};
    bn::with_relu(attrs.relu, [&]<bool relu>() {
      batch_norm_apply_kernel<T, S, relu><<<blocks_for(x.numel()), kThreads, 0, stream_of(a)>>>(
          x.data_ptr<T>(), a.outputs[0].data_ptr<T>(), affine, x.numel(), ChannelOf{geo.c, geo.inner});
    });
  });
  KILN_CUDA_LAUNCHED("batch_norm");
}

void batch_norm_backward(KernelArgs& a) {
  const Tensor &gy = a.inputs[0], &x = a.inputs[1];
  const auto& attrs = *static_cast<const BatchNormAttrs*>(a.attrs);
  const Geometry geo = bn::geometry(x);
  if (geo.c == 0) return;
  visit_float_dtype(x.dtype(), "batch_norm_backward", [&]<class T>() {
    using A = compute_t<T>;
    using S = std::conditional_t<std::is_same_v<T, double>, double, float>;
    const S *mean = a.inputs[2].data_ptr<S>(), *invstd = a.inputs[3].data_ptr<S>(), *w = a.inputs[4].data_ptr<S>();
    const ChannelAffine<S> affine{mean, invstd, w, a.inputs[5].data_ptr<S>(), attrs.training, attrs.eps};
    Tensor factors = make_empty({4, geo.c}, std::is_same_v<A, double> ? kFloat64 : kFloat32, x.device());
    cudaStream_t stream = stream_of(a);
    bn::with_relu(attrs.relu, [&]<bool relu>() {
      channel_sums(
          geo.outer, geo.c, geo.inner, BackwardTerms<T, S, relu>{gy.data_ptr<T>(), x.data_ptr<T>(), mean, affine},
          WriteBackward<S, A>{mean, invstd, w, a.outputs[1].data_ptr<S>(), a.outputs[2].data_ptr<S>(),
                              factors.data_ptr<A>(), geo.c, static_cast<double>(geo.per_channel()), attrs.training,
                              attrs.eps},
          x.device(), stream, "batch_norm_backward (channel sums)");
      if (x.numel() == 0) return;
      batch_norm_grad_input_kernel<T, S, relu><<<blocks_for(x.numel()), kThreads, 0, stream>>>(
          gy.data_ptr<T>(), x.data_ptr<T>(), a.outputs[0].data_ptr<T>(), factors.data_ptr<A>(), affine, x.numel(),
          ChannelOf{geo.c, geo.inner});
      KILN_CUDA_LAUNCHED("batch_norm_backward");
    });
  });
}

constexpr DeviceType kCuda = DeviceType::CUDA;
KILN_REGISTER_KERNEL_IF(Op::BatchNormStats, kCuda, batch_norm_stats, supports_stats);
KILN_REGISTER_KERNEL_IF(Op::BatchNormApply, kCuda, batch_norm_apply, supports_apply);
KILN_REGISTER_KERNEL_IF(Op::BatchNormBackward, kCuda, batch_norm_backward, supports_backward);

}  // namespace
}  // namespace kiln::backend::cuda
