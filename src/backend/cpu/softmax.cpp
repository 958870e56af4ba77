// CPU kernels for softmax and log_softmax over one dim, and their backward passes.
#include <cmath>
#include <limits>

#include "backend/cpu/loops.h"
#include "backend/dispatch.h"

namespace kiln::backend::cpu {
namespace {

// Views a contiguous tensor as [outer, n, inner] around `dim`.
struct Around {
  int64_t outer = 1, n = 1, inner = 1;
};
Around around(const Tensor& t, int64_t dim) {
  Around r;
  for (int64_t d = 0; d < t.dim(); ++d) {
    int64_t s = t.shape()[d];
    if (d < dim) r.outer *= s;
    else if (d == dim) r.n = s;
    else r.inner *= s;
  }
  return r;
}

template <bool kLog>
void softmax_forward(KernelArgs& a) {
  const Tensor& x = a.inputs[0];
  const Tensor& y = a.outputs[0];
  Around g = around(x, static_cast<const DimAttrs*>(a.attrs)->dim);
  visit_float_dtype(x.dtype(), "softmax", [&]<class T>() {
    using A = compute_t<T>;
    const T* xp = static_cast<const T*>(x.data_ptr());
    T* yp = static_cast<T*>(y.data_ptr());
    parallel_for(g.outer * g.inner, std::max<int64_t>(1, 16384 / std::max<int64_t>(g.n, 1)),
                 [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        const int64_t base = (r / g.inner) * g.n * g.inner + r % g.inner;
        const T* xr = xp + base;
        T* yr = yp + base;
        A mx = -std::numeric_limits<A>::infinity();
        for (int64_t i = 0; i < g.n; ++i) {
          A v = static_cast<A>(xr[i * g.inner]);
          mx = (v > mx || v != v) ? v : mx;
        }
        if (std::isinf(mx)) mx = mx > 0 ? mx : A(0);
        A sum = 0;
        for (int64_t i = 0; i < g.n; ++i) sum += std::exp(static_cast<A>(xr[i * g.inner]) - mx);
        if constexpr (kLog) {
          A lse = mx + std::log(sum);
          for (int64_t i = 0; i < g.n; ++i) yr[i * g.inner] = static_cast<T>(static_cast<A>(xr[i * g.inner]) - lse);
        } else {
          A inv = A(1) / sum;
          for (int64_t i = 0; i < g.n; ++i)
            yr[i * g.inner] = static_cast<T>(std::exp(static_cast<A>(xr[i * g.inner]) - mx) * inv);
        }
      }
    });
  });
}

// inputs: grad (contiguous), y = forward output (contiguous); output: grad of x.
template <bool kLog>
void softmax_backward(KernelArgs& a) {
  const Tensor& gy = a.inputs[0];
  const Tensor& y = a.inputs[1];
  const Tensor& gx = a.outputs[0];
  Around g = around(y, static_cast<const DimAttrs*>(a.attrs)->dim);
  visit_float_dtype(y.dtype(), "softmax_backward", [&]<class T>() {
    using A = compute_t<T>;
    const T* gyp = static_cast<const T*>(gy.data_ptr());
    const T* yp = static_cast<const T*>(y.data_ptr());
    T* gxp = static_cast<T*>(gx.data_ptr());
    parallel_for(g.outer * g.inner, std::max<int64_t>(1, 16384 / std::max<int64_t>(g.n, 1)),
                 [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        const int64_t base = (r / g.inner) * g.n * g.inner + r % g.inner;
        A dot = 0;
        for (int64_t i = 0; i < g.n; ++i) {
          int64_t k = base + i * g.inner;
          dot += kLog ? static_cast<A>(gyp[k]) : static_cast<A>(gyp[k]) * static_cast<A>(yp[k]);
        }
        for (int64_t i = 0; i < g.n; ++i) {
          int64_t k = base + i * g.inner;
          A yv = static_cast<A>(yp[k]), gv = static_cast<A>(gyp[k]);
          gxp[k] = static_cast<T>(kLog ? gv - std::exp(yv) * dot : yv * (gv - dot));
        }
      }
    });
  });
}

constexpr DeviceType kCpu = DeviceType::CPU;
KILN_REGISTER_KERNEL(Op::Softmax, kCpu, softmax_forward<false>);
KILN_REGISTER_KERNEL(Op::LogSoftmax, kCpu, softmax_forward<true>);
KILN_REGISTER_KERNEL(Op::SoftmaxBackward, kCpu, softmax_backward<false>);
KILN_REGISTER_KERNEL(Op::LogSoftmaxBackward, kCpu, softmax_backward<true>);

}  // namespace
}  // namespace kiln::backend::cpu
