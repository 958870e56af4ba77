// linear: x[..., in] @ weight[out, in]^T + bias, with its own backward (no transposed copies).
#include "ops/op_util.h"

namespace kiln {

using autograd::SavedTensor;

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  ops::check_defined(x, "linear");
  ops::check_defined(weight, "linear");
  if (bias.defined()) ops::common_device({&x, &weight, &bias}, "linear");
  else ops::common_device({&x, &weight}, "linear");
  KILN_CHECK(weight.dim() == 2, "linear", "weight must be 2-D [out, in], got shape ", weight.shape());
  KILN_CHECK(x.dim() >= 1, "linear", "input must have at least 1 dim, got shape ", x.shape());
  KILN_CHECK(x.size(-1) == weight.size(1), "linear", "input of shape ", x.shape(), " and weight of shape ",
             weight.shape(), " do not fit (", x.size(-1), " input features, weight takes ", weight.size(1), ")");
  KILN_CHECK(x.dtype() == weight.dtype(), "linear", "input has dtype ", x.dtype(), " but weight has ",
             weight.dtype());
  KILN_CHECK(x.dtype() != kBool, "linear", "is not defined for bool tensors");
  if (bias.defined()) {
    KILN_CHECK(bias.dim() == 1 && bias.size(0) == weight.size(0), "linear", "bias must have shape [",
               weight.size(0), "] for weight of shape ", weight.shape(), ", got ", bias.shape());
    KILN_CHECK(bias.dtype() == x.dtype(), "linear", "input has dtype ", x.dtype(), " but bias has ", bias.dtype());
  }

  Tensor out;
  {
    NoGradGuard ng;
    // weight.t() is a strided view: the matmul kernels (oneDNN) read it transposed in place.
    out = matmul(x, weight.t());
    if (bias.defined()) out.add_(bias);  // in place: the fresh result is ours alone
  }
  if (autograd::needs_grad({&x, &weight, &bias})) {
    const bool nx = x.requires_grad(), nw = weight.requires_grad();
    const bool nb = bias.defined() && bias.requires_grad();
    autograd::record("LinearBackward", {&x, &weight, &bias}, out,
                     [sx = SavedTensor(nw ? x : Tensor()), sw = SavedTensor(nx ? weight : Tensor()), nx, nw, nb,
                      in = weight.size(1), outf = weight.size(0)](const Tensor& g) -> TensorList {
                       Tensor gx, gw, gb;
                       // g [..., out] @ weight [out, in]
                       if (nx) gx = matmul(g, sw.get("LinearBackward"));
                       // g^T [out, rows] @ x [rows, in]: a dense [out, in] gradient, laid out like weight
                       Tensor g2 = (nw || nb) ? g.reshape({-1, outf}) : Tensor();
                       if (nw) gw = matmul(g2.t(), sx.get("LinearBackward").reshape({-1, in}));
                       if (nb) gb = sum(g2, {0});
                       return {gx, gw, gb};
                     });
  }
  return out;
}

}  // namespace kiln

namespace kiln {

// STAND-IN: unfused until the oneDNN post-op path lands.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias, Activation activation) {
  Tensor y = linear(x, weight, bias);
  switch (activation) {
    case Activation::None: return y;
    case Activation::ReLU: return relu(y);
    case Activation::GELU: return gelu(y);
    case Activation::GELUTanh: return gelu(y, "tanh");
  }
  return y;
}

}  // namespace kiln
