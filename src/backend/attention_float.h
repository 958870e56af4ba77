// Attention kernels that compute in float32 only (the CPU's, CUDA's fused path) take 16-bit calls
// through this: float32 copies of q, k, v (and, backward, grad_out) in, the gradients converted to
// the inputs' dtype out. The mask, out and logsumexp are float32 already (AttentionAttrs' contract).
#pragma once

#include "backend/dispatch.h"

namespace kiln::backend {

void attention_in_float(KernelArgs& a, bool backward, Kernel kernel);

}  // namespace kiln::backend
