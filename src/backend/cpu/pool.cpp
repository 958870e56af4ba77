// CPU kernels for 2-D max and average pooling (plain and adaptive) and their backward passes.
// Channels are the innermost loop, so channels-last tensors are read and written contiguously.
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "backend/cpu/loops.h"
#include "backend/dispatch.h"
#include "backend/pool_math.h"

namespace kiln::backend::cpu {
namespace {

struct Dims {
  int64_t n, c, h, w, oh, ow;
};
Dims dims_of(const Tensor& x, const Tensor& y) {
  return {x.size(0), x.size(1), x.size(2), x.size(3), y.size(2), y.size(3)};
}

using pool::avg_count;
using pool::avg_window;
using pool::Window;

// Zeroes a dense tensor (all-zero bits are 0 in every float type).
void zero_dense(const Tensor& t) { std::memset(t.data_ptr(), 0, t.nbytes()); }

// Channels-last x (the op layer's rule): each output position takes its window's max for all
// channels at once, the channel loop over unit-stride data (vectorised, with the index in I: 32
// bits when H * W allows, so that it vectorises with float values too). The first element of the
// window initialises, then NaN wins and stays (the last NaN's index), as in pool::max_at.
// Output row p = (n, oh), compiled per instruction set (in the kernel's lambda it was baseline
// x86-64 code, and bfloat16 ran slower than float32); best and arg hold C values each.
template <class T, class I, bool kIndices>
KILN_VECTORIZE void max_pool_row(const T* xp, T* yp, int64_t* ip, const int64_t* xs, const int64_t* ys,
                                 const int64_t* is, const PoolAttrs& a, const Dims& d, int64_t p,
                                 compute_t<T>* __restrict bp, I* __restrict ap) {
  using A = compute_t<T>;
  const int64_t n = p / d.oh, oh = p % d.oh;
  for (int64_t ow = 0; ow < d.ow; ++ow) {
    const int64_t h0 = oh * a.stride[0] - a.padding[0], w0 = ow * a.stride[1] - a.padding[1];
    bool first = true;
    const pool::Taps th = pool::taps_inside(h0, a.dilation[0], a.kernel[0], d.h);
    const pool::Taps tw = pool::taps_inside(w0, a.dilation[1], a.kernel[1], d.w);
    for (int64_t kh = th.first; kh < th.last; ++kh) {
      const int64_t ih = h0 + kh * a.dilation[0];
      for (int64_t kw = tw.first; kw < tw.last; ++kw) {
        const int64_t iw = w0 + kw * a.dilation[1];
        const T* __restrict src = xp + n * xs[0] + ih * xs[2] + iw * xs[3];
        const I flat = static_cast<I>(ih * d.w + iw);
        if (first) {
          for (int64_t c = 0; c < d.c; ++c) bp[c] = static_cast<A>(src[c]);
          if constexpr (kIndices) std::fill(ap, ap + d.c, flat);
          first = false;
          continue;
        }
        for (int64_t c = 0; c < d.c; ++c) {  // branch-free, so that it vectorises
          const A v = static_cast<A>(src[c]);
          const bool take = v > bp[c] || v != v;
          bp[c] = take ? v : bp[c];
          if constexpr (kIndices) ap[c] = take ? flat : ap[c];
        }
      }
    }
    if (first) {  // a window wholly in the padding (pool::max_at's result)
      std::fill(bp, bp + d.c, -std::numeric_limits<A>::infinity());
      if constexpr (kIndices) std::fill(ap, ap + d.c, I{-1});
    }
    T* __restrict dst = yp + n * ys[0] + oh * ys[2] + ow * ys[3];
    if (ys[1] == 1) {
      for (int64_t c = 0; c < d.c; ++c) dst[c] = static_cast<T>(bp[c]);
    } else {
      for (int64_t c = 0; c < d.c; ++c) dst[c * ys[1]] = static_cast<T>(bp[c]);
    }
    if constexpr (kIndices) {
      int64_t* idst = ip + n * is[0] + oh * is[2] + ow * is[3];
      for (int64_t c = 0; c < d.c; ++c) idst[c * is[1]] = ap[c];
    }
  }
}

template <class T, class I, bool kIndices>
void max_pool_channels_last(const Tensor& x, const Tensor& y, const Tensor* ind, const PoolAttrs& a, const Dims& d) {
  const T* xp = static_cast<const T*>(x.data_ptr());
  T* yp = static_cast<T*>(y.data_ptr());
  int64_t* ip = kIndices ? ind->data_ptr<int64_t>() : nullptr;
  const Shape no_strides(4, 0), &is = kIndices ? ind->strides() : no_strides;
  parallel_for(d.n * d.oh, std::max<int64_t>(1, 4096 / std::max<int64_t>(d.c * d.ow, 1)), [&](int64_t b, int64_t e) {
    std::vector<compute_t<T>> best(d.c);
    std::vector<I> arg(kIndices ? d.c : 0);
    for (int64_t p = b; p < e; ++p)
      max_pool_row<T, I, kIndices>(xp, yp, ip, x.strides().data(), y.strides().data(), is.data(), a, d, p, best.data(),
                                   arg.data());
  });
}

// {x} -> {y[, indices]}: the indices only when a backward pass will need them.
void max_pool_forward(KernelArgs& args) {
  const Tensor &x = args.inputs[0], &y = args.outputs[0];
  const Tensor* ind = args.outputs.size() > 1 ? &args.outputs[1] : nullptr;
  const auto& a = *static_cast<const PoolAttrs*>(args.attrs);
  const Dims d = dims_of(x, y);
  KILN_CHECK(x.stride(1) == 1 || d.c == 1, "max_pool2d", "the CPU kernel takes a channels-last input, got strides ",
             x.strides());
  const bool narrow = d.h * d.w <= std::numeric_limits<int32_t>::max();
  visit_float_dtype(x.dtype(), "max_pool2d", [&]<class T>() {
    if (!ind)
      max_pool_channels_last<T, int32_t, false>(x, y, ind, a, d);
    else if (narrow)
      max_pool_channels_last<T, int32_t, true>(x, y, ind, a, d);
    else
      max_pool_channels_last<T, int64_t, true>(x, y, ind, a, d);
  });
}

// The backward passes add output gradients into their windows' inputs: body(n, at, cl) adds batch
// item n's, at(p, c) naming the A accumulator of channel c's input gradient at position
// p = ih * W + iw (grad_x is dense, NCHW or channels-last, so p needs no division), and cl, where
// not null, the same accumulators as one channels-last plane (at(p, c) is cl[p * C + c]). Items
// write disjoint planes, so they run in parallel; each item's plane is zeroed by its thread just
// before its adds (in cache, not a whole-tensor memset first and a second trip to memory for the
// adds). Float16/bfloat16 planes are summed in float32 and rounded once (rounding after each add
// lost the small terms of overlapping windows), as the CUDA kernels do.
template <class T, class Body>
void add_into_planes(const Tensor& gx, const Dims& d, const Body& body) {
  using A = compute_t<T>;
  T* xp = static_cast<T*>(gx.data_ptr());
  const int64_t cs = gx.stride(1), ps = gx.stride(3), hw = d.h * d.w;
  KILN_CHECK(gx.stride(2) == d.w * ps, "pool2d_backward", "a dense input gradient, got strides ", gx.strides());
  constexpr bool kDirect = std::is_same_v<T, A>;  // 16-bit planes go through a float32 one
  const bool item_blocks = gx.stride(0) == hw * d.c, channels_last = cs == 1 && ps == d.c;
  if (kDirect && !item_blocks) zero_dense(gx);
  parallel_for(d.n, 1, [&](int64_t b, int64_t e) {
    std::vector<A> plane(kDirect ? 0 : hw * d.c);
    for (int64_t n = b; n < e; ++n) {
      T* item = xp + n * gx.stride(0);
      if constexpr (kDirect) {
        if (item_blocks) std::memset(item, 0, sizeof(T) * static_cast<size_t>(hw * d.c));
        body(n, [&](int64_t p, int64_t c) -> A& { return item[c * cs + p * ps]; }, channels_last ? item : nullptr);
      } else {
        std::fill(plane.begin(), plane.end(), A(0));
        body(n, [&](int64_t p, int64_t c) -> A& { return plane[p * d.c + c]; }, plane.data());
        for (int64_t p = 0; p < hw; ++p)
          for (int64_t c = 0; c < d.c; ++c) item[c * cs + p * ps] = static_cast<T>(plane[p * d.c + c]);
      }
    }
  });
}

// Output row (n, oh) of a channels-last max pooling's gradient into a channels-last plane:
// plane[flat * C + c] += g[c] at each output position. A position's channels have distinct
// targets, so the channel loop has no conflicts (ivdep): a gather, an add and a scatter. In the
// kernel's lambda this ran as baseline x86-64 code with a stride multiply per element.
template <class T, class A>
KILN_VECTORIZE void max_pool_backward_row(const T* __restrict g, const int64_t* __restrict ind, A* __restrict plane,
                                          int64_t ow_count, int64_t g_step, int64_t ind_step, int64_t c_count) {
  for (int64_t ow = 0; ow < ow_count; ++ow) {
    const T* gr = g + ow * g_step;
    const int64_t* ir = ind + ow * ind_step;
#pragma GCC ivdep
    for (int64_t c = 0; c < c_count; ++c) {
      // -1: a window wholly in the padding, whose gradient no input takes: it adds 0 to position
      // 0 instead (branch-free: g++ vectorises no conditional scatter).
      const int64_t flat = ir[c];
      plane[(flat < 0 ? 0 : flat) * c_count + c] += flat < 0 ? A(0) : static_cast<A>(gr[c]);
    }
  }
}

// grad_x[idx] += grad_y (idx -1: none).
void max_pool_backward(KernelArgs& args) {
  const Tensor &g = args.inputs[0], &ind = args.inputs[1], &gx = args.outputs[0];
  const Dims d = dims_of(gx, g);
  visit_float_dtype(g.dtype(), "max_pool2d_backward", [&]<class T>() {
    using A = compute_t<T>;
    const T* gp = static_cast<const T*>(g.data_ptr());
    const int64_t* ip = ind.data_ptr<int64_t>();
    const Shape &gs = g.strides(), &is = ind.strides();
    const bool rows = gs[1] == 1 && is[1] == 1;  // channels-last gradient and indices (the op layer's rule)
    add_into_planes<T>(gx, d, [&](int64_t n, const auto& at, A* cl) {
      if (rows && cl) {
        for (int64_t oh = 0; oh < d.oh; ++oh)
          max_pool_backward_row(gp + n * gs[0] + oh * gs[2], ip + n * is[0] + oh * is[2], cl, d.ow, gs[3], is[3], d.c);
        return;
      }
      for (int64_t oh = 0; oh < d.oh; ++oh)
        for (int64_t ow = 0; ow < d.ow; ++ow)
          for (int64_t c = 0; c < d.c; ++c) {
            const int64_t flat = ip[n * is[0] + c * is[1] + oh * is[2] + ow * is[3]];
            if (flat < 0) continue;  // a window wholly in the padding: no input to take the gradient
            at(flat, c) += static_cast<A>(gp[n * gs[0] + c * gs[1] + oh * gs[2] + ow * gs[3]]);
          }
    });
  });
}

void avg_pool_forward(KernelArgs& args) {
  const Tensor &x = args.inputs[0], &y = args.outputs[0];
  const auto& a = *static_cast<const PoolAttrs*>(args.attrs);
  const Dims d = dims_of(x, y);
  visit_float_dtype(x.dtype(), "avg_pool2d", [&]<class T>() {
    using A = compute_t<T>;
    const T* xp = static_cast<const T*>(x.data_ptr());
    T* yp = static_cast<T*>(y.data_ptr());
    const Shape &xs = x.strides(), &ys = y.strides();
    parallel_for(d.n * d.oh, std::max<int64_t>(1, 4096 / std::max<int64_t>(d.c * d.ow, 1)), [&](int64_t b, int64_t e) {
      std::vector<A> acc(d.c);
      for (int64_t p = b; p < e; ++p) {
        const int64_t n = p / d.oh, oh = p % d.oh;
        const Window wh = avg_window(a, 0, oh, d.h, d.oh);
        for (int64_t ow = 0; ow < d.ow; ++ow) {
          const Window ww = avg_window(a, 1, ow, d.w, d.ow);
          std::fill(acc.begin(), acc.end(), A(0));
          for (int64_t ih = wh.start; ih < wh.end; ++ih)
            for (int64_t iw = ww.start; iw < ww.end; ++iw) {
              const T* src = xp + n * xs[0] + ih * xs[2] + iw * xs[3];
              for (int64_t c = 0; c < d.c; ++c) acc[c] += static_cast<A>(src[c * xs[1]]);
            }
          const int64_t count = avg_count(a, wh, ww);
          const A inv = count > 0 ? A(1) / static_cast<A>(count) : A(0);
          T* dst = yp + n * ys[0] + oh * ys[2] + ow * ys[3];
          for (int64_t c = 0; c < d.c; ++c) dst[c * ys[1]] = static_cast<T>(acc[c] * inv);
        }
      }
    });
  });
}

void avg_pool_backward(KernelArgs& args) {
  const Tensor &g = args.inputs[0], &gx = args.outputs[0];
  const auto& a = *static_cast<const PoolAttrs*>(args.attrs);
  const Dims d = dims_of(gx, g);
  visit_float_dtype(g.dtype(), "avg_pool2d_backward", [&]<class T>() {
    using A = compute_t<T>;
    const T* gp = static_cast<const T*>(g.data_ptr());
    const Shape& gs = g.strides();
    add_into_planes<T>(gx, d, [&](int64_t n, const auto& at, A*) {
      for (int64_t oh = 0; oh < d.oh; ++oh) {
        const Window wh = avg_window(a, 0, oh, d.h, d.oh);
        for (int64_t ow = 0; ow < d.ow; ++ow) {
          const Window ww = avg_window(a, 1, ow, d.w, d.ow);
          const int64_t count = avg_count(a, wh, ww);
          if (count <= 0) continue;
          const A inv = A(1) / static_cast<A>(count);
          const T* src = gp + n * gs[0] + oh * gs[2] + ow * gs[3];
          for (int64_t ih = wh.start; ih < wh.end; ++ih)
            for (int64_t iw = ww.start; iw < ww.end; ++iw)
              for (int64_t c = 0; c < d.c; ++c) at(ih * d.w + iw, c) += static_cast<A>(src[c * gs[1]]) * inv;
        }
      }
    });
  });
}

KILN_REGISTER_KERNEL(Op::MaxPool2d, DeviceType::CPU, max_pool_forward);
KILN_REGISTER_KERNEL(Op::MaxPool2dBackward, DeviceType::CPU, max_pool_backward);
KILN_REGISTER_KERNEL(Op::AvgPool2d, DeviceType::CPU, avg_pool_forward);
KILN_REGISTER_KERNEL(Op::AvgPool2dBackward, DeviceType::CPU, avg_pool_backward);

}  // namespace
}  // namespace kiln::backend::cpu
