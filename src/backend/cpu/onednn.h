// The oneDNN wrapper the CPU kernels call; without oneDNN these report "not handled".
#pragma once

#include <string>

#include "kiln/tensor.h"

namespace kiln::backend {
struct ConvAttrs;
}

namespace kiln::backend::cpu {

// out = a @ w for 3-D a [Ba, M, K], w [Bb, K, N] (Ba, Bb equal or 1), out [B, M, N]
// contiguous. Returns false when oneDNN is absent or does not take these dtypes or strides.
// With bias ([N], a's dtype) defined, adds it; activation 1/2/3 applies relu / gelu (erf) /
// gelu (tanh) after, both as oneDNN post-ops fused into the matmul (LinearAttrs' codes).
bool onednn_matmul(const Tensor& a, const Tensor& w, const Tensor& out, const Tensor& bias = {},
                   int activation = 0);
// Convolution through oneDNN on 4-D tensors of any strides (channels-last is the fast case);
// false when oneDNN is absent or has no kernel for the dtype. b and gb may be undefined.
bool onednn_conv_forward(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y, const ConvAttrs& a);
bool onednn_conv_backward_input(const Tensor& gy, const Tensor& w, const Tensor& gx, const ConvAttrs& a);
bool onednn_conv_backward_weight(const Tensor& gy, const Tensor& x, const Tensor& gw, const Tensor& gb,
                                 const ConvAttrs& a);
// "" when Kiln was built without oneDNN.
std::string onednn_version();

}  // namespace kiln::backend::cpu
