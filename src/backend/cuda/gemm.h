// Batched matrix products on the device through cuBLASLt, for kernels built from them (attention).
#pragma once

#include <cuda_runtime.h>

#include "kiln/tensor.h"

namespace kiln::backend::cuda {

// out[b] = a[b or 0] @ w[b or 0] for a [Ba, M, K], w [Bb, K, N] (Ba, Bb 1 or B; any strides,
// copied dense first where cuBLASLt cannot read them) into out [B, M, N] contiguous, on `stream`.
// float32 (TF32 when kiln::cuda::allow_tf32()), float64, bfloat16, float16; a and w share a dtype,
// which is out's or, for 16-bit operands, float32 (the products accumulate in float32 either way).
void gemm(const Tensor& a, const Tensor& w, const Tensor& out, cudaStream_t stream);

}  // namespace kiln::backend::cuda
