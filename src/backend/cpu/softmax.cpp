// CPU kernels for softmax, log_softmax and masked softmax over one dim, and their backward passes.
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

// Softmax of x + mask (float mask) or of x where mask is true (bool mask), without a masked copy
// of x: the mask is read through its own strides (0 on broadcast dims). A row whose every
// element is masked (or -inf) gives zeros, not 0/0.
void masked_softmax_forward(KernelArgs& a) {
  const Tensor& x = a.inputs[0];
  const Tensor& mask = a.inputs[1];
  const Tensor& y = a.outputs[0];
  const int64_t dim = static_cast<const MaskedSoftmaxAttrs*>(a.attrs)->dim;
  Around g = around(x, dim);
  const int64_t rank = x.dim();
  const int64_t mstep = rank == 0 ? 0 : mask.stride(dim);
  // The mask's offset for row r = (o over the dims before `dim`, s over the dims after it).
  auto mask_offset = [&](int64_t r) {
    int64_t o = r / g.inner, s = r % g.inner, off = 0;
    for (int64_t d = rank - 1; d > dim; --d) {
      off += (s % x.size(d)) * mask.stride(d);
      s /= x.size(d);
    }
    for (int64_t d = dim - 1; d >= 0; --d) {
      off += (o % x.size(d)) * mask.stride(d);
      o /= x.size(d);
    }
    return off;
  };
  visit_float_dtype(x.dtype(), "masked_softmax", [&]<class T>() {
    using A = compute_t<T>;
    auto run = [&]<class M>() {
      const T* xp = x.data_ptr<T>();
      const M* mp = mask.data_ptr<M>();
      T* yp = y.data_ptr<T>();
      parallel_for(g.outer * g.inner, std::max<int64_t>(1, 16384 / std::max<int64_t>(g.n, 1)),
                   [&](int64_t b, int64_t e) {
        for (int64_t r = b; r < e; ++r) {
          const int64_t base = (r / g.inner) * g.n * g.inner + r % g.inner;
          const T* xr = xp + base;
          const M* mr = mp + mask_offset(r);
          T* yr = yp + base;
          constexpr A kNegInf = -std::numeric_limits<A>::infinity();
          // the masked score of element i, -inf where the bool mask drops it
          auto score = [&](int64_t i) -> A {
            A v = static_cast<A>(xr[i * g.inner]);
            if constexpr (std::is_same_v<M, bool>) v = mr[i * mstep] ? v : kNegInf;
            else v += static_cast<A>(mr[i * mstep]);
            return v;
          };
          A mx = kNegInf;
          for (int64_t i = 0; i < g.n; ++i) {
            const A v = score(i);
            mx = (v > mx || v != v) ? v : mx;
          }
          if (mx == kNegInf) {
            for (int64_t i = 0; i < g.n; ++i) yr[i * g.inner] = T(0);
            continue;
          }
          if (std::isinf(mx)) mx = A(0);  // +inf: let exp give inf/inf = NaN as plain softmax does
          A sum = 0;
          if constexpr (std::is_same_v<T, A>) {  // keep exp in y, then scale
            for (int64_t i = 0; i < g.n; ++i) sum += (yr[i * g.inner] = std::exp(score(i) - mx));
            const A inv = A(1) / sum;
            for (int64_t i = 0; i < g.n; ++i) yr[i * g.inner] *= inv;
          } else {  // y's type would round the unscaled exp: compute it twice
            for (int64_t i = 0; i < g.n; ++i) sum += std::exp(score(i) - mx);
            const A inv = A(1) / sum;
            for (int64_t i = 0; i < g.n; ++i) yr[i * g.inner] = static_cast<T>(std::exp(score(i) - mx) * inv);
          }
        }
      });
    };
    if (mask.dtype() == kBool) run.template operator()<bool>();
    else run.template operator()<T>();
  });
}

constexpr DeviceType kCpu = DeviceType::CPU;
KILN_REGISTER_KERNEL(Op::MaskedSoftmax, kCpu, masked_softmax_forward);
KILN_REGISTER_KERNEL(Op::Softmax, kCpu, softmax_forward<false>);
KILN_REGISTER_KERNEL(Op::LogSoftmax, kCpu, softmax_forward<true>);
KILN_REGISTER_KERNEL(Op::SoftmaxBackward, kCpu, softmax_backward<false>);
KILN_REGISTER_KERNEL(Op::LogSoftmaxBackward, kCpu, softmax_backward<true>);

}  // namespace
}  // namespace kiln::backend::cpu
