// Integer products on the GPU (cuBLASLt has none for these types): out[b] = a[b or 0] @ w[b or 0]
// with any strides, one output element per thread, summed in 64 bits as the CPU's loop sums
// them. The per-element work is plain C++ that the CPU tests run too; epilogue.cu launches it.
#pragma once

#include <cstdint>

#include "backend/cuda/host_device.h"
#include "kiln/tensor.h"

namespace kiln::backend::cuda {

// a [Ba, M, K], w [Bw, K, N], out [B, M, N] by their strides; a batch of size 1 has stride 0.
struct IntGemmGeom {
  int64_t M = 0, N = 0, K = 0;
  int64_t sa0 = 0, sa1 = 0, sa2 = 0, sw0 = 0, sw1 = 0, sw2 = 0, so0 = 0, so1 = 0, so2 = 0;
};

// The geometry of out = a @ w (3-D tensors as above).
inline IntGemmGeom integer_gemm_geom(const Tensor& a, const Tensor& w, const Tensor& out) {
  IntGemmGeom g;
  g.M = out.size(1), g.N = out.size(2), g.K = a.size(2);
  g.sa0 = a.size(0) == 1 ? 0 : a.stride(0), g.sa1 = a.stride(1), g.sa2 = a.stride(2);
  g.sw0 = w.size(0) == 1 ? 0 : w.stride(0), g.sw1 = w.stride(1), g.sw2 = w.stride(2);
  g.so0 = out.stride(0), g.so1 = out.stride(1), g.so2 = out.stride(2);
  return g;
}

// Output element i (row-major over [B, M, N]): stores the sum of a's row times w's column at
// out's offset for it. Unsigned arithmetic: a sum that overflows wraps as the CPU's int64 does
// in practice, without undefined behaviour.
template <class T>
KILN_HOST_DEVICE KILN_CUDA_INLINE void integer_gemm_element(const T* a, const T* w, T* out, const IntGemmGeom& g,
                                                            int64_t i) {
  const int64_t n = i % g.N, m = (i / g.N) % g.M, b = i / (g.N * g.M);
  const T* ar = a + b * g.sa0 + m * g.sa1;
  const T* wc = w + b * g.sw0 + n * g.sw2;
  uint64_t acc = 0;
  for (int64_t k = 0; k < g.K; ++k)
    acc += static_cast<uint64_t>(static_cast<int64_t>(ar[k * g.sa2])) *
           static_cast<uint64_t>(static_cast<int64_t>(wc[k * g.sw1]));
  out[b * g.so0 + m * g.so1 + n * g.so2] = static_cast<T>(static_cast<int64_t>(acc));
}

}  // namespace kiln::backend::cuda
