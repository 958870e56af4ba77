// dropout: a Philox keep-mask (bool, kept for backward) and the 1/(1-p) scaling.
#include "ops/op_util.h"

namespace kiln {

using autograd::SavedTensor;

Tensor dropout(const Tensor& x, double p, bool training) {
  ops::check_defined(x, "dropout");
  KILN_CHECK(p >= 0.0 && p <= 1.0, "dropout", "probability must be in [0, 1], got ", p);
  KILN_CHECK(x.is_floating_point(), "dropout", "expects a floating-point tensor, got ", x.dtype());
  // As in PyTorch: the input itself (no copy, no random numbers drawn).
  if (!training || p == 0.0 || x.numel() == 0) return x;
  // As in PyTorch, x * 0: zeros with a zero gradient (and NaN where x is inf or NaN).
  if (p == 1.0) return mul(x, 0);

  Tensor out, keep;
  const double scale = 1.0 / (1.0 - p);
  {
    NoGradGuard ng;
    // Element i (row-major) keeps when Philox uniform i >= p: the mask depends only on the
    // generator state and the shape, so the same seed gives the same mask on every device.
    // float32 uniforms (24 bits) whatever x's dtype, so p is resolved finely for 16-bit inputs.
    Tensor u = rand(x.shape(), TensorOptions(kFloat32).device(x.device()));
    keep = ge(u, p);
    out = where(keep, x, 0);
    out.mul_(scale);
  }
  if (autograd::needs_grad({&x}))
    autograd::record("DropoutBackward", {&x}, out, [sk = SavedTensor(keep), scale](const Tensor& g) -> TensorList {
      // The mask is kept as bool (one byte an element), not as a float copy.
      return {mul(where(sk.get("DropoutBackward"), g, 0), scale)};
    });
  return out;
}

}  // namespace kiln
