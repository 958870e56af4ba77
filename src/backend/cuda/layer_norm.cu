// CUDA kernels for layer norm over the rows of a [rows, n] tensor (the contract of
// backend/cpu/layer_norm.cpp): the forward pass (per-row mean and 1/std, then y), the backward's
// input gradient per row, and the weight/bias gradients as column sums over rows: per-block
// partial sums in double, then a fixed-order final sum (deterministic, no float atomics; the
// tiling is layer_norm_plan.h's).
#include "backend/cuda/device/row_group.cuh"
#include "backend/cuda/float_math.h"
#include "backend/cuda/layer_norm_plan.h"
#include "core/tensor_util.h"

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

// Weight and bias gradients, pass 1: block (column tile blockIdx.x, row chunk blockIdx.y) sums
// its chunk's rows of g * xhat (the product in A, as the CPU) and of g for 32 columns, in double;
// threadIdx.y takes every kColRowLanes-th row and the lanes are added in a fixed order.
constexpr int kColRowLanes = 8;

template <class T>
__global__ void layer_norm_param_partial_kernel(const T* __restrict__ g, const T* __restrict__ x,
                                                const compute_t<T>* __restrict__ mean,
                                                const compute_t<T>* __restrict__ rstd, double* __restrict__ part_w,
                                                double* __restrict__ part_b, int64_t rows, int64_t n,
                                                int64_t rows_per_chunk) {
  using A = compute_t<T>;
  __shared__ double sw[kColRowLanes][kWarp + 1], sb[kColRowLanes][kWarp + 1];
  const int64_t col = static_cast<int64_t>(blockIdx.x) * kWarp + threadIdx.x;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * rows_per_chunk;
  const int64_t r1 = std::min(rows, r0 + rows_per_chunk);
  double acc_w = 0, acc_b = 0;
  if (col < n) {
    for (int64_t r = r0 + threadIdx.y; r < r1; r += kColRowLanes) {
      const T gv = g[r * n + col];
      if (part_w) acc_w += static_cast<double>(static_cast<A>(gv) * ((static_cast<A>(x[r * n + col]) - mean[r]) * rstd[r]));
      if (part_b) acc_b += static_cast<double>(gv);
    }
  }
  sw[threadIdx.y][threadIdx.x] = acc_w;
  sb[threadIdx.y][threadIdx.x] = acc_b;
  __syncthreads();
  if (threadIdx.y == 0 && col < n) {
    double tw = 0, tb = 0;
    for (int k = 0; k < kColRowLanes; ++k) {
      tw += sw[k][threadIdx.x];
      tb += sb[k][threadIdx.x];
    }
    if (part_w) part_w[blockIdx.y * n + col] = tw;
    if (part_b) part_b[blockIdx.y * n + col] = tb;
  }
}

// Pass 2: each column's chunk partials summed in chunk order, rounded once to T.
template <class T>
__global__ void layer_norm_param_final_kernel(const double* __restrict__ part_w, const double* __restrict__ part_b,
                                              T* __restrict__ dw, T* __restrict__ db, int64_t chunks, int64_t n) {
  KILN_GRID_STRIDE(col, n) {
    if (dw) {
      double s = 0;
      for (int64_t c = 0; c < chunks; ++c) s += part_w[c * n + col];
      dw[col] = static_cast<T>(s);
    }
    if (db) {
      double s = 0;
      for (int64_t c = 0; c < chunks; ++c) s += part_b[c * n + col];
      db[col] = static_cast<T>(s);
    }
  }
}

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
    // The same split on every device and every run (it depends on rows and n only).
    const ParamChunks pc = param_chunks(rows, n);
    const int64_t tiles = pc.tiles, rows_per_chunk = pc.rows_per_chunk, chunks = pc.chunks;
    KILN_CHECK(tiles <= INT32_MAX, "layer_norm_backward", "rows of ", n, " elements are too long");
    const Device dev = x.device();
    Tensor part_w = at.grad_weight ? make_empty({chunks, n}, kFloat64, dev) : Tensor();
    Tensor part_b = at.grad_bias ? make_empty({chunks, n}, kFloat64, dev) : Tensor();
    double* pw = at.grad_weight ? part_w.data_ptr<double>() : nullptr;
    double* pb = at.grad_bias ? part_b.data_ptr<double>() : nullptr;
    layer_norm_param_partial_kernel<T><<<dim3(static_cast<unsigned>(tiles), static_cast<unsigned>(chunks)),
                                         dim3(kWarp, kColRowLanes), 0, stream>>>(g.data_ptr<T>(), x.data_ptr<T>(),
                                                                                 mean, rstd, pw, pb, rows, n,
                                                                                 rows_per_chunk);
    KILN_CUDA_LAUNCHED("layer_norm_backward (weight and bias partial sums)");
    size_t k = 1;
    T* dw = at.grad_weight ? a.outputs[k++].data_ptr<T>() : nullptr;
    T* db = at.grad_bias ? a.outputs[k++].data_ptr<T>() : nullptr;
    layer_norm_param_final_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(pw, pb, dw, db, chunks, n);
    KILN_CUDA_LAUNCHED("layer_norm_backward (weight and bias sums)");
  });
}

constexpr DeviceType kCuda = DeviceType::CUDA;
KILN_REGISTER_KERNEL(Op::LayerNorm, kCuda, layer_norm_forward);
KILN_REGISTER_KERNEL(Op::LayerNormBackward, kCuda, layer_norm_backward);

}  // namespace
}  // namespace kiln::backend::cuda
