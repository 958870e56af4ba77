// Automatic mixed precision (torch.autocast): a thread-local mode in which matmul, linear, conv
// and attention run in bfloat16/float16, and norms, softmax, losses, sums and exp/log in float32.
#pragma once

#include "kiln/device.h"
#include "kiln/dtype.h"

namespace kiln {

// True while an enabled AutocastGuard for tensors on device_type is alive on this thread (and not
// inside backward()); torch.is_autocast_enabled(device_type).
bool autocast_enabled(DeviceType device_type);
// True while autocast is on for any device type.
bool autocast_enabled();
// The lower-precision type autocast casts device_type's tensors to (kBFloat16 unless a guard chose
// kFloat16); torch.get_autocast_dtype(device_type).
ScalarType autocast_dtype(DeviceType device_type);

// Turns autocast on (or off, with enabled = false) for this thread while alive, and restores the
// previous mode and dtype after (a guard for one device type restores that type only); guards nest
// like torch.autocast. An enabled guard takes kBFloat16 or kFloat16; a disabled one any dtype
// (AutocastGuard g(amp ? kBFloat16 : kFloat32, amp)), and keeps the dtype there was.
// AutocastGuard(kCUDA, kBFloat16) is torch.autocast("cuda", torch.bfloat16): it changes only ops on
// CUDA tensors, and CPU work in the same region (metrics, a loss kept on the host) runs in the
// dtypes it is given; AutocastGuard(kCPU, ...) likewise.
// AutocastGuard(dtype) sets every device type at once (device-agnostic code: `kiln train --amp`,
// `kiln bench`). The dtype defaults to bfloat16 on every device (torch's CUDA default is float16;
// bfloat16 needs no GradScaler). Under autocast, for ops whose tensors are on a device type it is
// on for:
//  - matmul, mm, bmm, linear, conv2d and scaled_dot_product_attention cast their float32 (and
//    float16/bfloat16 of the other kind) operands to the autocast dtype and return it;
//  - layer_norm, softmax, log_softmax, masked_softmax, cross_entropy, nll_loss, mse_loss, sum,
//    prod, norm, logsumexp, exp, expm1, log, log1p, rsqrt, reciprocal, pow and a number divided by
//    a tensor (torch's reciprocal(t) * number) cast float16/bfloat16 operands to float32 and
//    return float32: torch's CUDA float32 list, as far as Kiln has those ops, on every device
//    (torch's CPU list keeps softmax, layer_norm, sum and exp in 16 bits; Kiln keeps one list);
//    mean and the other elementwise ops run in the dtype they are given, as in torch;
//  - scatter_add of a 16-bit src into a float32 tensor (or the reverse) runs in the wider dtype
//    (torch's promote list, as cat, stack and where always do);
//  - batch_norm keeps its input's dtype; its per-channel sums are in double and its statistics
//    float32 anyway;
//  - float64 tensors are never cast; everything else runs in the dtype it is given.
// The casts are ordinary differentiable ops, so gradients reach float32 parameters as float32
// (the optimizer keeps float32 master weights). backward() runs with autocast off.
class AutocastGuard {
 public:
  explicit AutocastGuard(ScalarType dtype = kBFloat16, bool enabled = true);
  explicit AutocastGuard(DeviceType device_type, ScalarType dtype = kBFloat16, bool enabled = true);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

  struct Mode {
    bool enabled = false;
    ScalarType dtype = kBFloat16;
  };

 private:
  Mode prev_[kNumDeviceTypes];
  int device_type_ = -1;  // the one device type this guard set and restores; -1: all
};

}  // namespace kiln
