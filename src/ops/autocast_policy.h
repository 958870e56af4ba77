// The casting policy the ops apply under kiln::AutocastGuard (one place, used by every op on the
// lists in include/kiln/autocast.h).
#pragma once

#include "kiln/autocast.h"
#include "ops/op_util.h"

namespace kiln::ops {

// A tensor autocast may change: defined, floating point, not float64 (as PyTorch's autocast).
inline bool autocast_eligible(const Tensor& t) {
  return t.defined() && t.is_floating_point() && t.dtype() != kFloat64;
}

// For matmul, linear, conv and attention: t in the autocast dtype while autocast is on.
inline Tensor autocast_lower(const Tensor& t) {
  if (!autocast_enabled() || !autocast_eligible(t)) return t;
  return cast(t, autocast_dtype());
}

// For norms, softmax and losses: a float16/bfloat16 t in float32 while autocast is on.
inline Tensor autocast_float32(const Tensor& t) {
  if (!autocast_enabled() || !autocast_eligible(t)) return t;
  return cast(t, kFloat32);
}

// Autocast off for the rest of an op whose inputs the policy already cast, so that the ops a
// composite op calls inside (a matmul in a loss) keep its dtype, as PyTorch's autocast wrappers do.
class AutocastOff {
 public:
  AutocastOff() : guard_(autocast_dtype(), false) {}

 private:
  AutocastGuard guard_;
};

}  // namespace kiln::ops
