// linear: x[..., in] @ weight[out, in]^T + bias (bias and activation fused into the matmul), with
// its own backward (no transposed copies).
#include "ops/autocast_policy.h"
#include "ops/op_util.h"

namespace kiln {

using autograd::SavedTensor;

namespace {

void check_linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
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
}

// The rows of x[..., in]: the product of its leading dims (x.numel() / in fails for in == 0).
int64_t leading_rows(const Tensor& x) {
  int64_t rows = 1;
  for (int64_t d = 0; d + 1 < x.dim(); ++d) rows *= x.size(d);
  return rows;
}

// act(x @ weight^T + bias) in one kernel: the bias and activation are the matmul's epilogue.
Tensor linear_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, Activation act) {
  const int64_t in = weight.size(1), outf = weight.size(0);
  Shape shape = x.shape();
  shape.back() = outf;
  Tensor out = make_empty(shape, x.dtype(), x.device());
  const int64_t rows = leading_rows(x);
  if (out.numel() == 0) return out;
  // weight.t() is a strided view: the kernels (oneDNN) read it transposed in place.
  Tensor x3 = x.detach().reshape({1, rows, in});
  Tensor w3 = weight.detach().t().unsqueeze(0);
  Tensor o3 = out.view({1, rows, outf});
  backend::LinearAttrs attrs{bias.defined(), static_cast<int>(act)};
  std::vector<Tensor> ins{x3, w3};
  if (bias.defined()) ins.push_back(bias.detach().contiguous());
  backend::run(ops::Op::Linear, x.device(), ins, std::span<Tensor>(&o3, 1), &attrs);
  return out;
}

}  // namespace

Tensor linear(const Tensor& x_in, const Tensor& weight_in, const Tensor& bias_in) {
  const Tensor x = ops::autocast_lower(x_in), weight = ops::autocast_lower(weight_in), bias = ops::autocast_lower(bias_in);
  check_linear(x, weight, bias);
  Tensor out = linear_forward(x, weight, bias, Activation::None);
  if (autograd::needs_grad({&x, &weight, &bias})) {
    const bool nx = x.requires_grad(), nw = weight.requires_grad();
    const bool nb = bias.defined() && bias.requires_grad();
    autograd::record("LinearBackward", {&x, &weight, &bias}, out,
                     [sx = SavedTensor(nw ? x : Tensor()), sw = SavedTensor(nx ? weight : Tensor()), nx, nw, nb,
                      in = weight.size(1), outf = weight.size(0), rows = leading_rows(x)](const Tensor& g) -> TensorList {
                       Tensor gx, gw, gb;
                       // g [..., out] @ weight [out, in]
                       if (nx) gx = matmul(g, sw.get("LinearBackward"));
                       // g^T [out, rows] @ x [rows, in]: a dense [out, in] gradient, laid out like weight
                       // (rows, not -1: a reshape cannot infer it when in or out is 0)
                       Tensor g2 = (nw || nb) ? g.reshape({rows, outf}) : Tensor();
                       if (nw) gw = matmul(g2.t(), sx.get("LinearBackward").reshape({rows, in}));
                       if (nb) gb = sum(g2, {0});
                       return {gx, gw, gb};
                     });
  }
  return out;
}

}  // namespace kiln

namespace kiln {

// In evaluation the bias and activation run inside the matmul; in training the bias is still
// fused but the activation is its own op, which keeps the pre-activation its backward needs.
Tensor linear(const Tensor& x_in, const Tensor& weight_in, const Tensor& bias_in, Activation activation) {
  const Tensor x = ops::autocast_lower(x_in), weight = ops::autocast_lower(weight_in), bias = ops::autocast_lower(bias_in);
  check_linear(x, weight, bias);
  const bool fuse = activation == Activation::None || x.is_floating_point();
  if (fuse && !autograd::needs_grad({&x, &weight, &bias})) return linear_forward(x, weight, bias, activation);
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
