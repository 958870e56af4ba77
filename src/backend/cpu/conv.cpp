// CPU conv2d kernels: oneDNN where it takes the dtype, otherwise direct loops (float64, and builds
// without oneDNN). The loops index through strides, so any layout works.
#include "backend/cpu/loops.h"
#include "backend/cpu/onednn.h"
#include "backend/dispatch.h"

namespace kiln::backend::cpu {
namespace {

// Element offset of [i0, i1, i2, i3] in t.
struct Index4 {
  int64_t s0, s1, s2, s3;
  explicit Index4(const Tensor& t) : s0(t.stride(0)), s1(t.stride(1)), s2(t.stride(2)), s3(t.stride(3)) {}
  int64_t operator()(int64_t a, int64_t b, int64_t c, int64_t d) const { return a * s0 + b * s1 + c * s2 + d * s3; }
};

struct ConvShape {
  int64_t n, c_in, h, w, c_out, kh, kw, oh, ow, cig, cog;
  ConvShape(const Tensor& x, const Tensor& wt, const Tensor& y, int64_t groups)
      : n(x.size(0)), c_in(x.size(1)), h(x.size(2)), w(x.size(3)), c_out(wt.size(0)), kh(wt.size(2)), kw(wt.size(3)),
        oh(y.size(2)), ow(y.size(3)), cig(wt.size(1)), cog(wt.size(0) / groups) {}
};

void conv_forward(KernelArgs& args) {
  const Tensor &x = args.inputs[0], &wt = args.inputs[1], &y = args.outputs[0];
  const Tensor b = args.inputs.size() > 2 ? args.inputs[2] : Tensor();
  const auto& a = *static_cast<const ConvAttrs*>(args.attrs);
  if (onednn_conv_forward(x, wt, b, y, a)) return;
  const ConvShape s(x, wt, y, a.groups);
  visit_float_dtype(x.dtype(), "conv2d", [&]<class T>() {
    using A = compute_t<T>;
    const T *xp = static_cast<const T*>(x.data_ptr()), *wp = static_cast<const T*>(wt.data_ptr());
    const T* bp = b.defined() ? static_cast<const T*>(b.data_ptr()) : nullptr;
    T* yp = static_cast<T*>(y.data_ptr());
    const Index4 xi(x), wi(wt), yi(y);
    parallel_for(s.n * s.c_out, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t p = lo; p < hi; ++p) {
        const int64_t n = p / s.c_out, oc = p % s.c_out, g = oc / s.cog;
        for (int64_t oh = 0; oh < s.oh; ++oh)
          for (int64_t ow = 0; ow < s.ow; ++ow) {
            A acc = bp ? static_cast<A>(bp[oc * b.stride(0)]) : A(0);
            for (int64_t ic = 0; ic < s.cig; ++ic)
              for (int64_t kh = 0; kh < s.kh; ++kh) {
                const int64_t ih = oh * a.stride[0] - a.padding[0] + kh * a.dilation[0];
                if (ih < 0 || ih >= s.h) continue;
                for (int64_t kw = 0; kw < s.kw; ++kw) {
                  const int64_t iw = ow * a.stride[1] - a.padding[1] + kw * a.dilation[1];
                  if (iw < 0 || iw >= s.w) continue;
                  acc += static_cast<A>(xp[xi(n, g * s.cig + ic, ih, iw)]) * static_cast<A>(wp[wi(oc, ic, kh, kw)]);
                }
              }
            yp[yi(n, oc, oh, ow)] = static_cast<T>(acc);
          }
      }
    });
  });
}

void conv_backward_input(KernelArgs& args) {
  const Tensor &gy = args.inputs[0], &wt = args.inputs[1], &gx = args.outputs[0];
  const auto& a = *static_cast<const ConvAttrs*>(args.attrs);
  if (onednn_conv_backward_input(gy, wt, gx, a)) return;
  const ConvShape s(gx, wt, gy, a.groups);
  visit_float_dtype(gy.dtype(), "conv2d_backward", [&]<class T>() {
    using A = compute_t<T>;
    const T *gp = static_cast<const T*>(gy.data_ptr()), *wp = static_cast<const T*>(wt.data_ptr());
    T* xp = static_cast<T*>(gx.data_ptr());
    const Index4 gi(gy), wi(wt), xi(gx);
    parallel_for(s.n * s.c_in, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t p = lo; p < hi; ++p) {
        const int64_t n = p / s.c_in, c = p % s.c_in, g = c / s.cig, ic = c % s.cig;
        for (int64_t ih = 0; ih < s.h; ++ih)
          for (int64_t iw = 0; iw < s.w; ++iw) {
            A acc = 0;
            for (int64_t kh = 0; kh < s.kh; ++kh) {
              const int64_t th = ih + a.padding[0] - kh * a.dilation[0];
              if (th < 0 || th % a.stride[0] != 0 || th / a.stride[0] >= s.oh) continue;
              for (int64_t kw = 0; kw < s.kw; ++kw) {
                const int64_t tw = iw + a.padding[1] - kw * a.dilation[1];
                if (tw < 0 || tw % a.stride[1] != 0 || tw / a.stride[1] >= s.ow) continue;
                for (int64_t o = 0; o < s.cog; ++o) {
                  const int64_t oc = g * s.cog + o;
                  acc += static_cast<A>(gp[gi(n, oc, th / a.stride[0], tw / a.stride[1])]) *
                         static_cast<A>(wp[wi(oc, ic, kh, kw)]);
                }
              }
            }
            xp[xi(n, c, ih, iw)] = static_cast<T>(acc);
          }
      }
    });
  });
}

void conv_backward_weight(KernelArgs& args) {
  const Tensor &gy = args.inputs[0], &x = args.inputs[1], &gw = args.outputs[0];
  const Tensor gb = args.outputs.size() > 1 ? args.outputs[1] : Tensor();
  const auto& a = *static_cast<const ConvAttrs*>(args.attrs);
  if (onednn_conv_backward_weight(gy, x, gw, gb, a)) return;
  const ConvShape s(x, gw, gy, a.groups);
  visit_float_dtype(gy.dtype(), "conv2d_backward", [&]<class T>() {
    using A = compute_t<T>;
    const T *gp = static_cast<const T*>(gy.data_ptr()), *xp = static_cast<const T*>(x.data_ptr());
    T* wp = static_cast<T*>(gw.data_ptr());
    T* bp = gb.defined() ? static_cast<T*>(gb.data_ptr()) : nullptr;
    const Index4 gi(gy), xi(x), wi(gw);
    parallel_for(s.c_out, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t oc = lo; oc < hi; ++oc) {
        const int64_t g = oc / s.cog;
        for (int64_t ic = 0; ic < s.cig; ++ic)
          for (int64_t kh = 0; kh < s.kh; ++kh)
            for (int64_t kw = 0; kw < s.kw; ++kw) {
              A acc = 0;
              for (int64_t n = 0; n < s.n; ++n)
                for (int64_t oh = 0; oh < s.oh; ++oh) {
                  const int64_t ih = oh * a.stride[0] - a.padding[0] + kh * a.dilation[0];
                  if (ih < 0 || ih >= s.h) continue;
                  for (int64_t ow = 0; ow < s.ow; ++ow) {
                    const int64_t iw = ow * a.stride[1] - a.padding[1] + kw * a.dilation[1];
                    if (iw < 0 || iw >= s.w) continue;
                    acc += static_cast<A>(gp[gi(n, oc, oh, ow)]) * static_cast<A>(xp[xi(n, g * s.cig + ic, ih, iw)]);
                  }
                }
              wp[wi(oc, ic, kh, kw)] = static_cast<T>(acc);
            }
        if (bp) {
          A acc = 0;
          for (int64_t n = 0; n < s.n; ++n)
            for (int64_t oh = 0; oh < s.oh; ++oh)
              for (int64_t ow = 0; ow < s.ow; ++ow) acc += static_cast<A>(gp[gi(n, oc, oh, ow)]);
          bp[oc * gb.stride(0)] = static_cast<T>(acc);
        }
      }
    });
  });
}

KILN_REGISTER_KERNEL(Op::Conv2d, DeviceType::CPU, conv_forward);
KILN_REGISTER_KERNEL(Op::Conv2dBackwardInput, DeviceType::CPU, conv_backward_input);
KILN_REGISTER_KERNEL(Op::Conv2dBackwardWeight, DeviceType::CPU, conv_backward_weight);

}  // namespace
}  // namespace kiln::backend::cpu
