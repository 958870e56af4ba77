// leaky_relu, elu, softplus, hardtanh and relu6: torch.nn.functional's activations with
// parameters, one kernel each way (backend/activation_math.h); under create_graph the gradient is
// the same formula in differentiable ops.
#include "backend/activation_math.h"
#include "ops/op_util.h"

namespace kiln {
namespace {

using autograd::SavedTensor;
using backend::ActivationAttrs;
using ops::Op;

// The gradient under create_graph: the kernels' formulas in differentiable ops, in float32 for
// 16-bit tensors (as the kernels compute) and rounded once. Their own derivatives are torch's:
// elu's and softplus's second derivative is 0 at their kinks (x = 0, beta x = threshold), and no
// branch that `where` leaves out overflows (its zero gradient times an infinity would be NaN).
Tensor differentiable_backward(const Tensor& g_in, const Tensor& x_in, const ActivationAttrs& at) {
  const ScalarType ct = x_in.dtype() == kFloat16 || x_in.dtype() == kBFloat16 ? kFloat32 : x_in.dtype();
  const Tensor g = ops::cast(g_in, ct), x = ops::cast(x_in, ct);
  Tensor gx;
  switch (at.kind) {
    case ActivationAttrs::LeakyRelu: gx = where(x > 0, g, g * at.a); break;
    case ActivationAttrs::Elu: gx = where(x > 0, g, g * exp(where(x < 0, x, zeros_like(x))) * at.a); break;
    case ActivationAttrs::Softplus: {
      const Tensor bx = x * at.a;
      gx = where(bx > at.b, g, g * sigmoid(where(bx < at.b, bx, bx.detach())));
      break;
    }
    case ActivationAttrs::Hardtanh: gx = where(logical_and(x > at.a, x < at.b), g, zeros_like(g)); break;
  }
  return ops::cast(gx, x_in.dtype());
}

// The input's gradient from the output's (g) and the input (x), laid out like x.
Tensor activation_backward(const Tensor& g_in, const Tensor& x, const ActivationAttrs& at) {
  const Tensor g = ops::cast(g_in, x.dtype());
  if (autograd::needs_grad({&g, &x})) return differentiable_backward(g, x, at);
  Tensor gx = make_empty_like(x, x.shape(), x.dtype(), x.device());
  if (gx.numel() > 0) ops::run1(Op::ActivationBackward, x.device(), {g, x}, gx, &at);
  return gx;
}

Tensor activation(const Tensor& x, const ActivationAttrs& at, const char* name) {
  ops::check_defined(x, name);
  KILN_CHECK(x.is_floating_point(), name, "expects a floating-point tensor, got ", x.dtype());
  Tensor out = make_empty_like(x, x.shape(), x.dtype(), x.device());
  if (out.numel() > 0) ops::run1(Op::Activation, x.device(), {x}, out, &at);
  if (autograd::needs_grad({&x}))
    autograd::record("ActivationBackward", {&x}, out, [sx = SavedTensor(x), at](const Tensor& g) -> TensorList {
      return {activation_backward(g, sx.get("ActivationBackward"), at)};
    });
  return out;
}

}  // namespace

Tensor leaky_relu(const Tensor& x, double negative_slope) {
  return activation(x, {ActivationAttrs::LeakyRelu, negative_slope, 0}, "leaky_relu");
}

Tensor elu(const Tensor& x, double alpha) { return activation(x, {ActivationAttrs::Elu, alpha, 0}, "elu"); }

Tensor softplus(const Tensor& x, double beta, double threshold) {
  KILN_CHECK(beta != 0, "softplus", "beta must not be 0");
  return activation(x, {ActivationAttrs::Softplus, beta, threshold}, "softplus");
}

Tensor hardtanh(const Tensor& x, double min_val, double max_val) {
  KILN_CHECK(min_val <= max_val, "hardtanh", "min_val (", min_val, ") must not be above max_val (", max_val, ")");
  return activation(x, {ActivationAttrs::Hardtanh, min_val, max_val}, "hardtanh");
}

Tensor relu6(const Tensor& x) { return hardtanh(x, 0, 6); }

}  // namespace kiln
