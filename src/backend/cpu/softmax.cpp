// CPU kernels for softmax, log_softmax and masked softmax over one dim, and their backward passes.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backend/cpu/loops.h"
#include "backend/cpu/softmax_rows.h"
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

// Rows per parallel chunk: about 16384 elements.
int64_t row_grain(int64_t n) { return std::max<int64_t>(1, 16384 / std::max<int64_t>(n, 1)); }

// Blocks of [n, w] columns (about 64K elements each, w <= inner) of a [outer, n, inner] tensor
// with inner > 1: f(offset of the block's first column, w, scratch of 3 * w A values), the
// blocks in parallel.
template <class A, class F>
void for_column_blocks(const Around& g, const F& f) {
  const int64_t w = std::min(g.inner, std::max<int64_t>(16, 65536 / std::max<int64_t>(g.n, 1) / 16 * 16));
  const int64_t per_outer = (g.inner + w - 1) / w;
  parallel_for(g.outer * per_outer, std::max<int64_t>(1, 32768 / std::max<int64_t>(g.n * w, 1)),
               [&](int64_t b, int64_t e) {
                 std::vector<A> scratch(static_cast<size_t>(3 * w));
                 for (int64_t t = b; t < e; ++t) {
                   const int64_t o = t / per_outer, j0 = (t % per_outer) * w;
                   f(o * g.n * g.inner + j0, std::min(w, g.inner - j0), scratch.data());
                 }
               });
}

// Softmax over the last dim (contiguous rows): the vectorised row kernels of softmax_rows.h.
// Over another dim: blocks of columns, the columns innermost (softmax_columns).
template <bool kLog>
void softmax_forward(KernelArgs& a) {
  const Tensor& x = a.inputs[0];
  const Tensor& y = a.outputs[0];
  Around g = around(x, static_cast<const DimAttrs*>(a.attrs)->dim);
  visit_float_dtype(x.dtype(), "softmax", [&]<class T>() {
    using A = compute_t<T>;
    const T* xp = static_cast<const T*>(x.data_ptr());
    T* yp = static_cast<T*>(y.data_ptr());
    if (g.inner == 1) {
      auto row = [&](const A* xr, A* yr) { softmax_row<kLog, A>(xr, yr, g.n, row_max<A, A>(xr, g.n)); };
      parallel_for(g.outer, row_grain(g.n), [&](int64_t b, int64_t e) {
        // float16/bfloat16 rows through float32 copies, which the vectorised kernels take
        std::vector<A> bx(std::is_same_v<T, A> ? 0 : g.n), by(bx.size());
        for (int64_t r = b; r < e; ++r) {
          const T* xr = xp + r * g.n;
          T* yr = yp + r * g.n;
          if constexpr (std::is_same_v<T, A>) {
            row(xr, yr);
          } else {
            for (int64_t i = 0; i < g.n; ++i) bx[i] = static_cast<A>(xr[i]);
            row(bx.data(), by.data());
            for (int64_t i = 0; i < g.n; ++i) yr[i] = static_cast<T>(by[i]);
          }
        }
      });
      return;
    }
    for_column_blocks<A>(g, [&](int64_t base, int64_t w, A* scratch) {
      softmax_columns<kLog, T, A>(xp + base, yp + base, g.n, g.inner, w, scratch, scratch + w, scratch + 2 * w);
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
    if (g.inner == 1) {
      parallel_for(g.outer, row_grain(g.n), [&](int64_t b, int64_t e) {
        for (int64_t r = b; r < e; ++r) {
          const int64_t o = r * g.n;
          row_grad<kLog, T, A>(gyp + o, yp + o, gxp + o, g.n, row_grad_dot<kLog, T, A>(gyp + o, yp + o, g.n));
        }
      });
      return;
    }
    for_column_blocks<A>(g, [&](int64_t base, int64_t w, A* scratch) {
      softmax_grad_columns<kLog, T, A>(gyp + base, yp + base, gxp + base, g.n, g.inner, w, scratch);
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
      constexpr A kNegInf = -std::numeric_limits<A>::infinity();
      parallel_for(g.outer * g.inner, row_grain(g.n), [&](int64_t b, int64_t e) {
        std::vector<A> scores(static_cast<size_t>(g.n)), p(scores.size());
        for (int64_t r = b; r < e; ++r) {
          const int64_t base = (r / g.inner) * g.n * g.inner + r % g.inner;
          const T* xr = xp + base;
          const M* mr = mp + mask_offset(r);
          T* yr = yp + base;
          // the masked scores, -inf where the bool mask drops an element; then the row kernels
          for (int64_t i = 0; i < g.n; ++i) {
            A v = static_cast<A>(xr[i * g.inner]);
            if constexpr (std::is_same_v<M, bool>)
              v = mr[i * mstep] ? v : kNegInf;
            else
              v += static_cast<A>(mr[i * mstep]);
            scores[i] = v;
          }
          const A mx = row_max<A, A>(scores.data(), g.n);  // skips NaN
          if (mx == kNegInf && std::none_of(scores.begin(), scores.end(), [](A v) { return v != v; })) {
            for (int64_t i = 0; i < g.n; ++i) yr[i * g.inner] = T(0);  // every element masked
            continue;
          }
          softmax_row<false, A>(scores.data(), p.data(), g.n, mx);  // +inf or NaN: NaN, as softmax
          for (int64_t i = 0; i < g.n; ++i) yr[i * g.inner] = static_cast<T>(p[i]);
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
