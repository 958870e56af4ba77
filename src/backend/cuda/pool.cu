// CUDA kernels for 2-D max and average pooling (plain and adaptive) and their backward passes,
// for 4-D tensors with any strides (the contract of backend/cpu/pool.cpp). A thread per output
// (forward) or per input element (backward), channels fastest, so channels-last tensors are read
// and written coalesced. The backward passes gather: each input element sums the gradients of
// the outputs whose window holds it (pool_math.h), in the CPU's order, with no atomics, so
// overlapping windows give the same bits on every run.
#include "backend/cuda/device/common.cuh"
#include "backend/pool_math.h"

namespace kiln::backend::cuda {
namespace {

using pool::Strides4;

struct Geom {
  int64_t n, c, h, w, oh, ow;
};

// (n, c, h, w) of flat index i over [N, H, W, C] (channels fastest).
struct Nhwc {
  int64_t n, c, h, w;
};
__device__ __forceinline__ Nhwc nhwc_of(int64_t i, int64_t C, int64_t H, int64_t W) {
  Nhwc p;
  p.c = i % C;
  i /= C;
  p.w = i % W;
  i /= W;
  p.h = i % H;
  p.n = i / H;
  return p;
}

Strides4 strides4(const Tensor& t) { return {{t.stride(0), t.stride(1), t.stride(2), t.stride(3)}}; }
Geom geom_of(const Tensor& x, const Tensor& y) {
  return {x.size(0), x.size(1), x.size(2), x.size(3), y.size(2), y.size(3)};
}

// The per-output and per-input math is pool_math.h's (the CPU tests run it too).
template <class T>
__global__ void max_pool_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t* __restrict__ ind, Geom d,
                                Strides4 xs, Strides4 ys, Strides4 is, PoolAttrs a) {
  using A = compute_t<T>;
  KILN_GRID_STRIDE(i, d.n * d.oh * d.ow * d.c) {
    const Nhwc o = nhwc_of(i, d.c, d.oh, d.ow);
    const pool::MaxAt<A> m = pool::max_at<A>(a, o.h, o.w, d.h, d.w, [&](int64_t ih, int64_t iw) {
      return static_cast<A>(x[xs.at(o.n, o.c, ih, iw)]);
    });
    y[ys.at(o.n, o.c, o.h, o.w)] = static_cast<T>(m.value);
    if (ind) ind[is.at(o.n, o.c, o.h, o.w)] = m.arg;
  }
}

template <class T>
__global__ void max_pool_backward_kernel(const T* __restrict__ g, const int64_t* __restrict__ ind, T* __restrict__ gx,
                                         Geom d, Strides4 gs, Strides4 is, Strides4 xs, PoolAttrs a) {
  using A = compute_t<T>;
  KILN_GRID_STRIDE(i, d.n * d.h * d.w * d.c) {
    const Nhwc p = nhwc_of(i, d.c, d.h, d.w);
    const A v = pool::max_grad_at<A>(
        a, p.h, p.w, d.h, d.w, d.oh, d.ow,
        [&](int64_t oh, int64_t ow) { return static_cast<A>(g[gs.at(p.n, p.c, oh, ow)]); },
        [&](int64_t oh, int64_t ow) { return ind[is.at(p.n, p.c, oh, ow)]; });
    gx[xs.at(p.n, p.c, p.h, p.w)] = static_cast<T>(v);
  }
}

template <class T>
__global__ void avg_pool_kernel(const T* __restrict__ x, T* __restrict__ y, Geom d, Strides4 xs, Strides4 ys,
                                PoolAttrs a) {
  using A = compute_t<T>;
  KILN_GRID_STRIDE(i, d.n * d.oh * d.ow * d.c) {
    const Nhwc o = nhwc_of(i, d.c, d.oh, d.ow);
    const A v = pool::avg_at<A>(a, o.h, o.w, d.h, d.w, d.oh, d.ow, [&](int64_t ih, int64_t iw) {
      return static_cast<A>(x[xs.at(o.n, o.c, ih, iw)]);
    });
    y[ys.at(o.n, o.c, o.h, o.w)] = static_cast<T>(v);
  }
}

template <class T>
__global__ void avg_pool_backward_kernel(const T* __restrict__ g, T* __restrict__ gx, Geom d, Strides4 gs,
                                         Strides4 xs, PoolAttrs a) {
  using A = compute_t<T>;
  KILN_GRID_STRIDE(i, d.n * d.h * d.w * d.c) {
    const Nhwc p = nhwc_of(i, d.c, d.h, d.w);
    const A v = pool::avg_grad_at<A>(a, p.h, p.w, d.h, d.w, d.oh, d.ow, [&](int64_t oh, int64_t ow) {
      return static_cast<A>(g[gs.at(p.n, p.c, oh, ow)]);
    });
    gx[xs.at(p.n, p.c, p.h, p.w)] = static_cast<T>(v);
  }
}

void max_pool_forward(KernelArgs& args) {
  const Tensor &x = args.inputs[0], &y = args.outputs[0];
  const Tensor* ind = args.outputs.size() > 1 ? &args.outputs[1] : nullptr;  // only for a backward pass
  const auto& a = *static_cast<const PoolAttrs*>(args.attrs);
  const Geom d = geom_of(x, y);
  visit_float_dtype(x.dtype(), "max_pool2d", [&]<class T>() {
    max_pool_kernel<T><<<blocks_for(y.numel()), kThreads, 0, stream_of(args)>>>(
        x.data_ptr<T>(), y.data_ptr<T>(), ind ? ind->data_ptr<int64_t>() : nullptr, d, strides4(x), strides4(y),
        ind ? strides4(*ind) : strides4(y), a);
  });
  KILN_CUDA_LAUNCHED("max_pool2d");
}

void max_pool_backward(KernelArgs& args) {
  const Tensor &g = args.inputs[0], &ind = args.inputs[1], &gx = args.outputs[0];
  const auto& a = *static_cast<const PoolAttrs*>(args.attrs);
  const Geom d = geom_of(gx, g);
  visit_float_dtype(g.dtype(), "max_pool2d_backward", [&]<class T>() {
    max_pool_backward_kernel<T><<<blocks_for(gx.numel()), kThreads, 0, stream_of(args)>>>(
        g.data_ptr<T>(), ind.data_ptr<int64_t>(), gx.data_ptr<T>(), d, strides4(g), strides4(ind), strides4(gx), a);
  });
  KILN_CUDA_LAUNCHED("max_pool2d_backward");
}

void avg_pool_forward(KernelArgs& args) {
  const Tensor &x = args.inputs[0], &y = args.outputs[0];
  const auto& a = *static_cast<const PoolAttrs*>(args.attrs);
  const Geom d = geom_of(x, y);
  visit_float_dtype(x.dtype(), "avg_pool2d", [&]<class T>() {
    avg_pool_kernel<T><<<blocks_for(y.numel()), kThreads, 0, stream_of(args)>>>(x.data_ptr<T>(), y.data_ptr<T>(), d,
                                                                                strides4(x), strides4(y), a);
  });
  KILN_CUDA_LAUNCHED("avg_pool2d");
}

void avg_pool_backward(KernelArgs& args) {
  const Tensor &g = args.inputs[0], &gx = args.outputs[0];
  const auto& a = *static_cast<const PoolAttrs*>(args.attrs);
  const Geom d = geom_of(gx, g);
  visit_float_dtype(g.dtype(), "avg_pool2d_backward", [&]<class T>() {
    avg_pool_backward_kernel<T><<<blocks_for(gx.numel()), kThreads, 0, stream_of(args)>>>(
        g.data_ptr<T>(), gx.data_ptr<T>(), d, strides4(g), strides4(gx), a);
  });
  KILN_CUDA_LAUNCHED("avg_pool2d_backward");
}

constexpr DeviceType kCuda = DeviceType::CUDA;
KILN_REGISTER_KERNEL(Op::MaxPool2d, kCuda, max_pool_forward);
KILN_REGISTER_KERNEL(Op::MaxPool2dBackward, kCuda, max_pool_backward);
KILN_REGISTER_KERNEL(Op::AvgPool2d, kCuda, avg_pool_forward);
KILN_REGISTER_KERNEL(Op::AvgPool2dBackward, kCuda, avg_pool_backward);

}  // namespace
}  // namespace kiln::backend::cuda
