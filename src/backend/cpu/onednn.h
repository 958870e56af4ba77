// The oneDNN wrapper the CPU kernels call; without oneDNN these report "not handled".
#pragma once

#include <string>

#include "kiln/tensor.h"

namespace kiln::backend::cpu {

// out = a @ w for 3-D a [Ba, M, K], w [Bb, K, N] (Ba, Bb equal or 1), out [B, M, N]
// contiguous. Returns false when oneDNN is absent or does not take these dtypes or strides.
bool onednn_matmul(const Tensor& a, const Tensor& w, const Tensor& out);
// "" when Kiln was built without oneDNN.
std::string onednn_version();

}  // namespace kiln::backend::cpu
