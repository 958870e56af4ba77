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

// Whether autocast is on for t: eligible, and autocast on for its device's type. An op follows
// its tensors' device (ops take tensors of one device; a CPU number beside them is float32 or
// float64, which neither policy changes).
inline bool autocast_applies(const Tensor& t) { return autocast_eligible(t) && autocast_enabled(t.device().type); }

// For matmul, linear, conv and attention: t in the autocast dtype while autocast is on.
inline Tensor autocast_lower(const Tensor& t) {
  return autocast_applies(t) ? cast(t, autocast_dtype(t.device().type)) : t;
}

// For norms, softmax and losses: a float16/bfloat16 t in float32 while autocast is on.
inline Tensor autocast_float32(const Tensor& t) { return autocast_applies(t) ? cast(t, kFloat32) : t; }

// For the promote list (scatter_add): two floating operands of different dtypes, one of them
// under autocast, both in the wider dtype (a 16-bit matmul output into a float32 accumulator).
inline void autocast_promote(Tensor& a, Tensor& b) {
  if (a.dtype() == b.dtype() || !a.is_floating_point() || !b.is_floating_point()) return;
  if (!autocast_applies(a) && !autocast_applies(b)) return;
  const ScalarType wide = promote_types(a.dtype(), b.dtype());
  a = cast(a, wide);
  b = cast(b, wide);
}

// Autocast off for the rest of an op whose inputs the policy already cast, so that the ops a
// composite op calls inside (a matmul in a loss) keep its dtype, as PyTorch's autocast wrappers do.
class AutocastOff {
 public:
  AutocastOff() : guard_(kBFloat16, /*enabled=*/false) {}

 private:
  AutocastGuard guard_;
};

}  // namespace kiln::ops
