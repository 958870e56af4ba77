// CPU kernels for layer norm over rows of a [rows, n] tensor: the forward pass (statistics and the
// normalised, scaled, shifted row, while the row is in cache) and one backward pass giving the
// input gradient and the per-thread partial sums of the weight and bias gradients.
#include <cmath>
#include <vector>

#include "backend/cpu/loops.h"
#include "backend/dispatch.h"

namespace kiln::backend::cpu {
namespace {

// One row: mean and variance in two passes over the cached row (no cancellation), then y.
template <class T, class A>
KILN_VECTORIZE void forward_row(const T* __restrict x, T* __restrict y, const T* __restrict w,
                                const T* __restrict b, int64_t n, A eps, A* mean_out, A* rstd_out) {
  const A mean = lane_sum<A>(n, [&](int64_t i) { return static_cast<A>(x[i]); }) / static_cast<A>(n);
  const A var = lane_sum<A>(n, [&](int64_t i) {
                  const A d = static_cast<A>(x[i]) - mean;
                  return d * d;
                }) / static_cast<A>(n);
  const A rstd = A(1) / std::sqrt(var + eps);
  *mean_out = mean;
  *rstd_out = rstd;
  if (w && b) {
    for (int64_t i = 0; i < n; ++i)
      y[i] = static_cast<T>((static_cast<A>(x[i]) - mean) * rstd * static_cast<A>(w[i]) + static_cast<A>(b[i]));
  } else if (w) {
    for (int64_t i = 0; i < n; ++i) y[i] = static_cast<T>((static_cast<A>(x[i]) - mean) * rstd * static_cast<A>(w[i]));
  } else if (b) {
    for (int64_t i = 0; i < n; ++i) y[i] = static_cast<T>((static_cast<A>(x[i]) - mean) * rstd + static_cast<A>(b[i]));
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] = static_cast<T>((static_cast<A>(x[i]) - mean) * rstd);
  }
}

// One row of the backward pass. With xhat = (x - mean) * rstd and wg = g * w:
// dx = rstd * (wg - mean(wg) - xhat * mean(wg * xhat)); dw += g * xhat; db += g.
template <class T, class A>
KILN_VECTORIZE void backward_row(const T* __restrict g, const T* __restrict x, const T* __restrict w,
                                 T* __restrict gx, double* __restrict dw, double* __restrict db, int64_t n,
                                 A mean, A rstd) {
  auto wg = [&](int64_t i) { return w ? static_cast<A>(g[i]) * static_cast<A>(w[i]) : static_cast<A>(g[i]); };
  auto xhat = [&](int64_t i) { return (static_cast<A>(x[i]) - mean) * rstd; };
  const A inv_n = A(1) / static_cast<A>(n);
  const A c1 = lane_sum<A>(n, wg) * inv_n;
  const A c2 = lane_sum<A>(n, [&](int64_t i) { return wg(i) * xhat(i); }) * inv_n;
  if (gx)
    for (int64_t i = 0; i < n; ++i) gx[i] = static_cast<T>(rstd * (wg(i) - c1 - xhat(i) * c2));
  if (dw)
    for (int64_t i = 0; i < n; ++i) dw[i] += static_cast<double>(static_cast<A>(g[i]) * xhat(i));
  if (db)
    for (int64_t i = 0; i < n; ++i) db[i] += static_cast<double>(g[i]);
}

int64_t row_grain(int64_t n) { return std::max<int64_t>(1, 16384 / std::max<int64_t>(n, 1)); }

void layer_norm_forward(KernelArgs& a) {
  const auto& at = *static_cast<const LayerNormAttrs*>(a.attrs);
  const Tensor& x = a.inputs[0];
  const int64_t rows = x.size(0), n = x.size(1);
  visit_float_dtype(x.dtype(), "layer_norm", [&]<class T>() {
    using A = compute_t<T>;
    const T* xp = x.data_ptr<T>();
    const T* w = at.has_weight ? a.inputs[1].data_ptr<T>() : nullptr;
    const T* b = at.has_bias ? a.inputs[at.has_weight ? 2 : 1].data_ptr<T>() : nullptr;
    T* yp = a.outputs[0].data_ptr<T>();
    A* mean = a.outputs[1].data_ptr<A>();
    A* rstd = a.outputs[2].data_ptr<A>();
    parallel_for(rows, row_grain(n), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r)
        forward_row<T, A>(xp + r * n, yp + r * n, w, b, n, static_cast<A>(at.eps), mean + r, rstd + r);
    });
  });
}

void layer_norm_backward(KernelArgs& a) {
  const auto& at = *static_cast<const LayerNormAttrs*>(a.attrs);
  const Tensor& g = a.inputs[0];
  const Tensor& x = a.inputs[1];
  const int64_t rows = x.size(0), n = x.size(1);
  visit_float_dtype(x.dtype(), "layer_norm_backward", [&]<class T>() {
    using A = compute_t<T>;
    const T* gp = g.data_ptr<T>();
    const T* xp = x.data_ptr<T>();
    const A* mean = a.inputs[2].data_ptr<A>();
    const A* rstd = a.inputs[3].data_ptr<A>();
    const T* w = at.has_weight ? a.inputs[4].data_ptr<T>() : nullptr;
    T* gx = a.outputs[0].data_ptr<T>();
    // The weight's and the bias's gradients: sums over the rows, in double.
    const size_t nw = at.grad_weight ? static_cast<size_t>(n) : 0, nb = at.grad_bias ? static_cast<size_t>(n) : 0;
    const std::vector<double> sums = parallel_sums(rows, row_grain(n), nw + nb, [&](int64_t r0, int64_t r1, double* p) {
      for (int64_t r = r0; r < r1; ++r)
        backward_row<T, A>(gp + r * n, xp + r * n, w, gx + r * n, nw ? p : nullptr, nb ? p + nw : nullptr, n, mean[r],
                           rstd[r]);
    });
    const double* dw = sums.data();
    const double* db = sums.data() + nw;
    size_t k = 1;
    if (at.grad_weight) {
      T* o = a.outputs[k++].data_ptr<T>();
      for (int64_t i = 0; i < n; ++i) o[i] = static_cast<T>(dw[i]);
    }
    if (at.grad_bias) {
      T* o = a.outputs[k++].data_ptr<T>();
      for (int64_t i = 0; i < n; ++i) o[i] = static_cast<T>(db[i]);
    }
  });
}

constexpr DeviceType kCpu = DeviceType::CPU;
KILN_REGISTER_KERNEL(Op::LayerNorm, kCpu, layer_norm_forward);
KILN_REGISTER_KERNEL(Op::LayerNormBackward, kCpu, layer_norm_backward);

}  // namespace
}  // namespace kiln::backend::cpu
