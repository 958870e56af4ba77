// out = act(out + bias) on the device, for the matmul cases cuBLASLt's epilogues do not cover
// (GELU with erf, float64, an empty product). bias: [N] broadcast over out's last dim, or undefined;
// activation in LinearAttrs' numbering (0 none, 1 relu, 2 gelu erf, 3 gelu tanh).
#pragma once

#include <cuda_runtime.h>

#include "kiln/tensor.h"

namespace kiln::backend::cuda {

void bias_activation(const Tensor& out, const Tensor& bias, int activation, cudaStream_t stream);

}  // namespace kiln::backend::cuda
