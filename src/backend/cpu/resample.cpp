// The CPU kernel of Resample (interpolate's linear maps along one dim; the contract in
// dispatch.h): each output row of `inner` elements from its taps' rows, in tap order. Compiled
// with -ffp-contract=off (src/CMakeLists.txt): products and sums rounded apart, as the CUDA kernel.
#include <algorithm>

#include "backend/cpu/loops.h"
#include "backend/dispatch.h"

namespace kiln::backend::cpu {
namespace {

template <class T>
void resample_rows(const Tensor& x, const int64_t* off, const int64_t* src, const T* wt, const Tensor& out) {
  const int64_t outer = x.size(0), n = x.size(1), inner = x.size(2), m = out.size(1);
  const T* xp = static_cast<const T*>(x.data_ptr());
  T* op = static_cast<T*>(out.data_ptr());
  const int64_t taps = std::max<int64_t>(1, off[m] / std::max<int64_t>(m, 1));
  parallel_for(outer * m, std::max<int64_t>(1, kElementwiseGrain / (inner * taps)), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      const int64_t o = r / m, j = r - o * m;
      T* dst = op + r * inner;
      const int64_t b = off[j], e = off[j + 1];
      if (b == e) {
        std::fill(dst, dst + inner, T(0));
        continue;
      }
      const T* s = xp + (o * n + src[b]) * inner;
      const T w0 = wt[b];
      for (int64_t i = 0; i < inner; ++i) dst[i] = w0 * s[i];
      for (int64_t t = b + 1; t < e; ++t) {
        const T w = wt[t];
        const T* st = xp + (o * n + src[t]) * inner;
        for (int64_t i = 0; i < inner; ++i) dst[i] += w * st[i];
      }
    }
  });
}

void resample(KernelArgs& a) {
  const Tensor& x = a.inputs[0];
  const auto* off = static_cast<const int64_t*>(a.inputs[1].data_ptr());
  const auto* src = static_cast<const int64_t*>(a.inputs[2].data_ptr());
  const void* w = a.inputs[3].data_ptr();
  if (x.dtype() == kFloat64) resample_rows(x, off, src, static_cast<const double*>(w), a.outputs[0]);
  else if (x.dtype() == kFloat32) resample_rows(x, off, src, static_cast<const float*>(w), a.outputs[0]);
  else KILN_FAIL("interpolate", "resampling takes float32 or float64, got ", x.dtype());
}

KILN_REGISTER_KERNEL(Op::Resample, DeviceType::CPU, resample);

}  // namespace
}  // namespace kiln::backend::cpu
