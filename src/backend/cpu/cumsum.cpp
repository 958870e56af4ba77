// The CPU kernel of cumsum and cumprod (the contract in dispatch.h): each column's running sum
// (or product) in order, in cumsum_acc_t, as torch's CPU kernels accumulate it. Along the innermost dim a thread walks 8 rows at a
// time; along another, each step adds a row of inner elements into a row of sums (contiguous, so
// the compiler vectorizes it).
#include <algorithm>
#include <cstdint>
#include <vector>

#include "backend/cpu/parallel.h"
#include "backend/dispatch.h"

namespace kiln::backend::cpu {
namespace {

// Along the innermost dim: kLanes rows at a time, each sum in its own register, so the adds of
// one row do not wait on each other's latency one by one.
template <bool Product, class A>
inline void step(A& acc, A v) {
  if constexpr (Product) acc *= v;
  else acc += v;
}

template <bool Product, class T>
void cumsum_innermost(const T* x, T* out, int64_t o, int64_t rows, int64_t n, bool reverse) {
  using A = cumsum_acc_t<T>;
  constexpr int64_t kLanes = 8;
  for (; rows > 0; o += kLanes, rows -= kLanes) {
    const int64_t m = std::min(rows, kLanes);
    A acc[kLanes];
    std::fill(acc, acc + kLanes, A{Product ? 1 : 0});
    for (int64_t s = 0; s < n; ++s) {
      const int64_t j = reverse ? n - 1 - s : s;
      for (int64_t r = 0; r < m; ++r) {
        step<Product>(acc[r], static_cast<A>(x[(o + r) * n + j]));
        out[(o + r) * n + j] = static_cast<T>(acc[r]);
      }
    }
  }
}

template <bool Product, class T>
void cumsum_rows(const T* x, T* out, int64_t outer, int64_t n, int64_t inner, bool reverse) {
  using A = cumsum_acc_t<T>;
  const int64_t grain = std::max<int64_t>(1, 65536 / std::max<int64_t>(n * inner, 1));
  parallel_for(outer, grain, [&](int64_t begin, int64_t end) {
    if (inner == 1) return cumsum_innermost<Product>(x, out, begin, end - begin, n, reverse);
    std::vector<A> acc(static_cast<size_t>(inner));
    for (int64_t o = begin; o < end; ++o) {
      std::fill(acc.begin(), acc.end(), A{Product ? 1 : 0});
      for (int64_t s = 0; s < n; ++s) {
        const int64_t j = reverse ? n - 1 - s : s;
        const T* xr = x + (o * n + j) * inner;
        T* yr = out + (o * n + j) * inner;
        for (int64_t i = 0; i < inner; ++i) {
          step<Product>(acc[i], static_cast<A>(xr[i]));
          yr[i] = static_cast<T>(acc[i]);
        }
      }
    }
  });
}

void cumsum_kernel(KernelArgs& a) {
  const Tensor& x = a.inputs[0];
  const auto& attrs = *static_cast<const CumsumAttrs*>(a.attrs);
  visit_dtype(x.dtype(), "cumsum", [&]<class T>() {
    const T* in = static_cast<const T*>(x.data_ptr());
    T* out = static_cast<T*>(a.outputs[0].data_ptr());
    if (attrs.product) cumsum_rows<true>(in, out, x.size(0), x.size(1), x.size(2), attrs.reverse);
    else cumsum_rows<false>(in, out, x.size(0), x.size(1), x.size(2), attrs.reverse);
  });
}

KILN_REGISTER_KERNEL(Op::Cumsum, DeviceType::CPU, cumsum_kernel);

}  // namespace
}  // namespace kiln::backend::cpu
