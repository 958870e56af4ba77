// Automatic mixed precision (torch.autocast): a thread-local mode in which matmul, linear, conv
// and attention run in bfloat16/float16, and norms, softmax, losses, sums and exp/log in float32.
#pragma once

#include "kiln/dtype.h"

namespace kiln {

// True while an enabled AutocastGuard is alive on this thread (and not inside backward()).
bool autocast_enabled();
// The lower-precision type autocast casts to (kBFloat16 unless a guard chose kFloat16).
ScalarType autocast_dtype();

// Turns autocast on (or off, with enabled = false) for this thread while alive, and restores
// the previous mode and dtype after; guards nest like torch.autocast. Only kBFloat16 and
// kFloat16 are accepted. Under autocast:
//  - matmul, mm, bmm, linear, conv2d and scaled_dot_product_attention cast their float32 (and
//    float16/bfloat16 of the other kind) operands to the autocast dtype and return it;
//  - layer_norm, softmax, log_softmax, masked_softmax, cross_entropy, nll_loss, mse_loss, sum,
//    prod, norm, logsumexp, exp, expm1, log, log1p, rsqrt, reciprocal and pow (torch's float32 list, as far
//    as Kiln has those ops) cast float16/bfloat16 operands to float32 and return float32; mean
//    and the other elementwise ops run in the dtype they are given, as in torch;
//  - batch_norm keeps its input's dtype; its per-channel sums are in double and its statistics
//    float32 anyway;
//  - float64 tensors are never cast; everything else runs in the dtype it is given.
// The casts are ordinary differentiable ops, so gradients reach float32 parameters as float32
// (the optimizer keeps float32 master weights). backward() runs with autocast off.
class AutocastGuard {
 public:
  explicit AutocastGuard(ScalarType dtype = kBFloat16, bool enabled = true);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  bool prev_enabled_;
  ScalarType prev_dtype_;
};

}  // namespace kiln
