// Pooling's index rules as host-and-device functions, shared by the CPU kernels
// (backend/cpu/pool.cpp) and the CUDA kernels (backend/cuda/pool.cu): the input rows an output
// averages over, its divisor, and the outputs whose window holds a given input, by which the
// CUDA backward passes gather their gradients instead of scattering them with atomics.
#pragma once

#include <cmath>
#include <cstdint>

#include "backend/dispatch.h"

namespace kiln::pool {

using backend::PoolAttrs;

KILN_HOST_DEVICE inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
KILN_HOST_DEVICE inline int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }
// floor(a / b) and ceil(a / b) for b > 0 and any sign of a.
KILN_HOST_DEVICE inline int64_t div_floor(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }
KILN_HOST_DEVICE inline int64_t div_ceil(int64_t a, int64_t b) { return -div_floor(-a, b); }

// The input rows (or columns) output position `o` averages over: [start, end) clipped to the
// input, and the divisor's share before clipping (PyTorch's avg_pool2d and adaptive rules).
struct Window {
  int64_t start, end, padded;
};
KILN_HOST_DEVICE inline Window avg_window(const PoolAttrs& a, int dim, int64_t o, int64_t in, int64_t out) {
  if (a.kind == PoolAttrs::AdaptiveAvg) {
    const int64_t s = o * in / out, e = ((o + 1) * in + out - 1) / out;
    return {s, e, e - s};
  }
  const int64_t s = o * a.stride[dim] - a.padding[dim];
  const int64_t e = min64(s + a.kernel[dim], in + a.padding[dim]);
  return {max64(s, 0), min64(e, in), e - s};
}

// What an average over the windows wh x ww divides by.
KILN_HOST_DEVICE inline int64_t avg_count(const PoolAttrs& a, const Window& wh, const Window& ww) {
  return a.kind == PoolAttrs::Avg && a.count_include_pad ? wh.padded * ww.padded
                                                          : (wh.end - wh.start) * (ww.end - ww.start);
}

// The output positions [first, last) along `dim` whose window can hold input position i: for
// max pooling the windows' taps o * stride - padding + k * dilation, k < kernel (a tap there
// still has to be the window's arg max); for average pooling exactly those whose avg_window
// holds i.
struct Range {
  int64_t first, last;
};
KILN_HOST_DEVICE inline Range outputs_holding(const PoolAttrs& a, int dim, int64_t i, int64_t in, int64_t out) {
  if (a.kind == PoolAttrs::AdaptiveAvg)
    return {min64(i * out / in, out), min64(div_ceil((i + 1) * out, in), out)};
  const int64_t span = a.kind == PoolAttrs::Max ? a.dilation[dim] * (a.kernel[dim] - 1) : a.kernel[dim] - 1;
  const int64_t first = max64(0, div_ceil(i + a.padding[dim] - span, a.stride[dim]));
  const int64_t last = min64(out, div_floor(i + a.padding[dim], a.stride[dim]) + 1);
  return {first, max64(first, last)};
}

// The taps k in [0, kernel) of a max window starting at `start` (dilation d) that land inside
// [0, in): the loops run over these only, so their time depends on the input, not the kernel.
struct Taps {
  int64_t first, last;
};
KILN_HOST_DEVICE inline Taps taps_inside(int64_t start, int64_t d, int64_t kernel, int64_t in) {
  const int64_t first = max64(0, div_ceil(-start, d));
  const int64_t last = min64(kernel, div_floor(in - 1 - start, d) + 1);
  return {first, max64(first, last)};
}

// One output of a plane: max pooling's value and flat arg max h * W + w, x(h, w) reading the
// plane. NaN wins (a later NaN moves the arg max), and an all -inf window points at its first tap
// inside the input: the CPU kernel's rules.
template <class A>
struct MaxAt {
  A value;
  int64_t arg;
};
template <class A, class X>
KILN_HOST_DEVICE MaxAt<A> max_at(const PoolAttrs& a, int64_t oh, int64_t ow, int64_t h, int64_t w, const X& x) {
  const int64_t h0 = oh * a.stride[0] - a.padding[0], w0 = ow * a.stride[1] - a.padding[1];
  MaxAt<A> r{-static_cast<A>(INFINITY), -1};
  const Taps th = taps_inside(h0, a.dilation[0], a.kernel[0], h), tw = taps_inside(w0, a.dilation[1], a.kernel[1], w);
  for (int64_t kh = th.first; kh < th.last; ++kh) {
    const int64_t ih = h0 + kh * a.dilation[0];
    for (int64_t kw = tw.first; kw < tw.last; ++kw) {
      const int64_t iw = w0 + kw * a.dilation[1];
      const A v = x(ih, iw);
      if (r.arg < 0) r.arg = ih * w + iw;
      if (v > r.value || v != v) r = {v, ih * w + iw};
    }
  }
  return r;
}

// One output of a plane: the average over its window.
template <class A, class X>
KILN_HOST_DEVICE A avg_at(const PoolAttrs& a, int64_t oh, int64_t ow, int64_t h, int64_t w, int64_t out_h,
                          int64_t out_w, const X& x) {
  const Window wh = avg_window(a, 0, oh, h, out_h), ww = avg_window(a, 1, ow, w, out_w);
  A acc = 0;
  for (int64_t ih = wh.start; ih < wh.end; ++ih)
    for (int64_t iw = ww.start; iw < ww.end; ++iw) acc += x(ih, iw);
  const int64_t count = avg_count(a, wh, ww);
  return acc * (count > 0 ? A(1) / static_cast<A>(count) : A(0));
}

// The gradient at input (ih, iw) of a plane, gathered from the outputs whose window holds it in
// (oh, ow) order (the order the CPU's scatter adds them in): for max pooling those whose arg max
// index(oh, ow) is this input, for average pooling each output's share. grad(oh, ow) reads the
// output gradient.
template <class A, class G, class I>
KILN_HOST_DEVICE A max_grad_at(const PoolAttrs& a, int64_t ih, int64_t iw, int64_t h, int64_t w, int64_t out_h,
                               int64_t out_w, const G& grad, const I& index) {
  const Range rh = outputs_holding(a, 0, ih, h, out_h), rw = outputs_holding(a, 1, iw, w, out_w);
  const int64_t flat = ih * w + iw;
  A acc = 0;
  for (int64_t oh = rh.first; oh < rh.last; ++oh)
    for (int64_t ow = rw.first; ow < rw.last; ++ow)
      if (index(oh, ow) == flat) acc += grad(oh, ow);
  return acc;
}
template <class A, class G>
KILN_HOST_DEVICE A avg_grad_at(const PoolAttrs& a, int64_t ih, int64_t iw, int64_t h, int64_t w, int64_t out_h,
                               int64_t out_w, const G& grad) {
  const Range rh = outputs_holding(a, 0, ih, h, out_h), rw = outputs_holding(a, 1, iw, w, out_w);
  A acc = 0;
  for (int64_t oh = rh.first; oh < rh.last; ++oh) {
    const Window wh = avg_window(a, 0, oh, h, out_h);
    if (ih < wh.start || ih >= wh.end) continue;
    for (int64_t ow = rw.first; ow < rw.last; ++ow) {
      const Window ww = avg_window(a, 1, ow, w, out_w);
      if (iw < ww.start || iw >= ww.end) continue;
      const int64_t count = avg_count(a, wh, ww);
      if (count > 0) acc += grad(oh, ow) * (A(1) / static_cast<A>(count));
    }
  }
  return acc;
}

// Element offsets of a 4-D tensor [N, C, H, W] with any strides.
struct Strides4 {
  int64_t s[4];
  KILN_HOST_DEVICE int64_t at(int64_t n, int64_t c, int64_t h, int64_t w) const {
    return n * s[0] + c * s[1] + h * s[2] + w * s[3];
  }
};

}  // namespace kiln::pool
