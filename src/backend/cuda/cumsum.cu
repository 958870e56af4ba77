// The CUDA kernel of cumsum (the contract in dispatch.h, the CPU's in backend/cpu/cumsum.cpp): a
// thread per column adds it up in order, in the CPU's accumulator type, so each output has the
// CPU's bits. Along a dim that is not innermost, neighbouring threads read neighbouring elements.
// Along the innermost dim each thread walks its own row: a few long rows are a serial walk each.
#include "backend/cuda/device/common.cuh"

namespace kiln::backend::cuda {
namespace {

template <class T>
__global__ void cumsum_columns(const T* __restrict__ x, T* __restrict__ out, int64_t outer, int64_t n, int64_t inner,
                               bool reverse) {
  using A = cumsum_acc_t<T>;
  KILN_GRID_STRIDE(c, outer * inner) {
    const int64_t o = c / inner, i = c - o * inner;
    A acc{0};
    for (int64_t s = 0; s < n; ++s) {
      const int64_t e = (o * n + (reverse ? n - 1 - s : s)) * inner + i;
      acc += static_cast<A>(x[e]);
      out[e] = static_cast<T>(acc);
    }
  }
}

void cumsum(KernelArgs& a) {
  const Tensor& x = a.inputs[0];
  const bool reverse = static_cast<const CumsumAttrs*>(a.attrs)->reverse;
  const int64_t outer = x.size(0), n = x.size(1), inner = x.size(2);
  visit_dtype(x.dtype(), "cumsum", [&]<class T>() {
    cumsum_columns<<<blocks_for(outer * inner), kThreads, 0, stream_of(a)>>>(
        static_cast<const T*>(x.data_ptr()), static_cast<T*>(a.outputs[0].data_ptr()), outer, n, inner, reverse);
    KILN_CUDA_LAUNCHED("cumsum");
  });
}

KILN_REGISTER_KERNEL(Op::Cumsum, DeviceType::CUDA, cumsum);

}  // namespace
}  // namespace kiln::backend::cuda
