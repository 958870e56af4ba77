// The matmul kernels of Kiln's own, beside cuBLASLt's products: the epilogue and integer products.
#pragma once

#include <cuda_runtime.h>

#include "kiln/tensor.h"

namespace kiln::backend::cuda {

// out = act(out + bias) on the device, for the matmul cases cuBLASLt's epilogues do not cover
// (GELU with erf, float64, an empty product, integers). bias: [N] broadcast over out's last dim,
// or undefined; activation in LinearAttrs' numbering (0 none, 1 relu, 2 gelu erf, 3 gelu tanh;
// integers take none).
void bias_activation(const Tensor& out, const Tensor& bias, int activation, cudaStream_t stream);

// out[b] = a[b or 0] @ w[b or 0] for uint8, int32 and int64 (integer_gemm.h): a [Ba, M, K],
// w [Bw, K, N], out [B, M, N], any strides.
void integer_gemm(const Tensor& a, const Tensor& w, const Tensor& out, cudaStream_t stream);

}  // namespace kiln::backend::cuda
