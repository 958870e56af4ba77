// CUDA kernels for layer norm over the rows of a [rows, n] tensor (the contract of
// backend/cpu/layer_norm.cpp): the forward pass (per-row mean and 1/std, then y), the backward's
// input gradient per row, and the weight/bias gradients as column sums over rows
// (device/channel_sums.cuh: deterministic, no float atomics).
#include "backend/cuda/device/channel_sums.cuh"
#include "backend/cuda/device/row_group.cuh"
#include "backend/cuda/float_math.h"

namespace kiln::backend::cuda {
namespace {

// One row per group: mean, then the variance about it (two passes, as the CPU: no cancellation),
// then y. Statistics in A = compute_t<T> (float, double for double).
template <class T, bool kWarpRows>
__global__ void layer_norm_forward_kernel(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ b,
                                          T* __restrict__ y, compute_t<T>* __restrict__ mean_out,
                                          compute_t<T>* __restrict__ rstd_out, int64_t rows, int64_t n,
                                          compute_t<T> eps) {
  using A = compute_t<T>;
  __shared__ A shared[32];
  const RowGroup<kWarpRows> grp;
  for (int64_t r = grp.first_row(); r < rows; r += grp.row_stride()) {
    const T* xr = x + r * n;
    A s = 0;
    for (int64_t i = grp.lane(); i < n; i += grp.size()) s += static_cast<A>(xr[i]);
    const A mean = grp.reduce(s, SumOp{}, A(0), shared) / static_cast<A>(n);
    A q = 0;
    for (int64_t i = grp.lane(); i < n; i += grp.size()) {
      const A d = static_cast<A>(xr[i]) - mean;
      q += d * d;
    }
    const A var = grp.reduce(q, SumOp{}, A(0), shared) / static_cast<A>(n);
    const A rstd = A(1) / dev_sqrt(var + eps);  // a correctly rounded division and sqrt, not rsqrt
    if (grp.lane() == 0) {
      mean_out[r] = mean;
      rstd_out[r] = rstd;
    }
    T* yr = y + r * n;
    for (int64_t i = grp.lane(); i < n; i += grp.size()) {
      A v = (static_cast<A>(xr[i]) - mean) * rstd;
      if (w) v = v * static_cast<A>(w[i]);
      if (b) v = v + static_cast<A>(b[i]);
      yr[i] = static_cast<T>(v);
    }
  }
}

// The input gradient of one row per group. With xhat = (x - mean) * rstd and wg = g * w:
// gx = rstd * (wg - mean(wg) - xhat * mean(wg * xhat)).
template <class T, bool kWarpRows>
__global__ void layer_norm_grad_input_kernel(const T* __restrict__ g, const T* __restrict__ x,
                                             const compute_t<T>* __restrict__ mean, const compute_t<T>* __restrict__ rstd,
                                             const T* __restrict__ w, T* __restrict__ gx, int64_t rows, int64_t n) {
  using A = compute_t<T>;
  __shared__ A shared[32];
  const RowGroup<kWarpRows> grp;
  const A inv_n = A(1) / static_cast<A>(n);
  for (int64_t r = grp.first_row(); r < rows; r += grp.row_stride()) {
    const T* gr = g + r * n;
    const T* xr = x + r * n;
    const A mu = mean[r], rs = rstd[r];
    A s1 = 0, s2 = 0;
    for (int64_t i = grp.lane(); i < n; i += grp.size()) {
      const A wg = w ? static_cast<A>(gr[i]) * static_cast<A>(w[i]) : static_cast<A>(gr[i]);
      s1 += wg;
      s2 += wg * ((static_cast<A>(xr[i]) - mu) * rs);
    }
    const A c1 = grp.reduce(s1, SumOp{}, A(0), shared) * inv_n;
    const A c2 = grp.reduce(s2, SumOp{}, A(0), shared) * inv_n;
    T* out = gx + r * n;
    for (int64_t i = grp.lane(); i < n; i += grp.size()) {
      const A wg = w ? static_cast<A>(gr[i]) * static_cast<A>(w[i]) : static_cast<A>(gr[i]);
      const A xhat = (static_cast<A>(xr[i]) - mu) * rs;
      out[i] = static_cast<T>(rs * (wg - c1 - xhat * c2));
    }
  }
}

// Weight and bias gradients: per column, sum over rows of g * xhat (the product in A, as the CPU)
// and of g, in double (device/channel_sums.cuh), rounded once to T.
template <class T>
struct ParamTerms {
  using A = compute_t<T>;
  const T* g;
  const T* x;
  const A* mean;
  const A* rstd;
  __device__ void operator()(int64_t i, int64_t r, int64_t, double& w, double& b) const {
    const T gv = g[i];
    w += static_cast<double>(static_cast<A>(gv) * ((static_cast<A>(x[i]) - mean[r]) * rstd[r]));
    b += static_cast<double>(gv);
  }
};
template <class T>
struct WriteParamGrads {
  T* dw;
  T* db;
  __device__ void operator()(int64_t col, double w, double b) const {
    if (dw) dw[col] = static_cast<T>(w);
    if (db) db[col] = static_cast<T>(b);
  }
};

template <class T>
const T* optional_ptr(std::span<const Tensor> ts, bool present, size_t i) {
  return present ? static_cast<const T*>(ts[i].data_ptr()) : nullptr;
}

void layer_norm_forward(KernelArgs& a) {
  const auto& at = *static_cast<const LayerNormAttrs*>(a.attrs);
  const Tensor& x = a.inputs[0];
  const int64_t rows = x.size(0), n = x.size(1);
  if (rows == 0) return;
  visit_float_dtype(x.dtype(), "layer_norm", [&]<class T>() {
    using A = compute_t<T>;
    const T* w = optional_ptr<T>(a.inputs, at.has_weight, 1);
    const T* b = optional_ptr<T>(a.inputs, at.has_bias, at.has_weight ? 2 : 1);
    auto launch = [&]<bool kWarpRows>() {
      layer_norm_forward_kernel<T, kWarpRows><<<row_blocks(rows, kWarpRows), kThreads, 0, stream_of(a)>>>(
          x.data_ptr<T>(), w, b, a.outputs[0].data_ptr<T>(), a.outputs[1].data_ptr<A>(), a.outputs[2].data_ptr<A>(),
          rows, n, static_cast<A>(at.eps));
    };
    if (n <= kWarpRowMax) launch.template operator()<true>();
    else launch.template operator()<false>();
  });
  KILN_CUDA_LAUNCHED("layer_norm");
}

void layer_norm_backward(KernelArgs& a) {
  const auto& at = *static_cast<const LayerNormAttrs*>(a.attrs);
  const Tensor& g = a.inputs[0];
  const Tensor& x = a.inputs[1];
  const int64_t rows = x.size(0), n = x.size(1);
  if (n == 0) return;  // nothing to write (rows == 0 still writes zero weight/bias gradients)
  visit_float_dtype(x.dtype(), "layer_norm_backward", [&]<class T>() {
    using A = compute_t<T>;
    const A* mean = a.inputs[2].data_ptr<A>();
    const A* rstd = a.inputs[3].data_ptr<A>();
    const T* w = optional_ptr<T>(a.inputs, at.has_weight, 4);
    cudaStream_t stream = stream_of(a);
    if (rows > 0) {
      auto launch = [&]<bool kWarpRows>() {
        layer_norm_grad_input_kernel<T, kWarpRows><<<row_blocks(rows, kWarpRows), kThreads, 0, stream>>>(
            g.data_ptr<T>(), x.data_ptr<T>(), mean, rstd, w, a.outputs[0].data_ptr<T>(), rows, n);
      };
      if (n <= kWarpRowMax) launch.template operator()<true>();
      else launch.template operator()<false>();
      KILN_CUDA_LAUNCHED("layer_norm_backward");
    }
    if (!at.grad_weight && !at.grad_bias) return;
    size_t k = 1;
    T* dw = at.grad_weight ? a.outputs[k++].data_ptr<T>() : nullptr;
    T* db = at.grad_bias ? a.outputs[k++].data_ptr<T>() : nullptr;
    channel_sums(rows, n, 1, ParamTerms<T>{g.data_ptr<T>(), x.data_ptr<T>(), mean, rstd}, WriteParamGrads<T>{dw, db},
                 x.device(), stream, "layer_norm_backward (weight and bias sums)");
  });
}

constexpr DeviceType kCuda = DeviceType::CUDA;
KILN_REGISTER_KERNEL(Op::LayerNorm, kCuda, layer_norm_forward);
KILN_REGISTER_KERNEL(Op::LayerNormBackward, kCuda, layer_norm_backward);

}  // namespace
}  // namespace kiln::backend::cuda
