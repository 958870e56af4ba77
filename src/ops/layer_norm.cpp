// layer_norm over the trailing dims: one forward kernel saving each row's mean and 1/std, and
// one backward kernel giving the input, weight and bias gradients together. group_norm is
// layer_norm of each group's row, then the per-channel weight and bias.
#include "ops/autocast_policy.h"
#include "ops/op_util.h"

namespace kiln {

using autograd::SavedTensor;
using ops::Op;

namespace {

void check_param(const Tensor& p, const Tensor& x, const Shape& normalized_shape, const char* what) {
  if (!p.defined()) return;
  ops::common_device({&x, &p}, "layer_norm");
  KILN_CHECK(p.shape() == normalized_shape, "layer_norm", what, " must have normalized_shape ", normalized_shape,
             ", got shape ", p.shape());
  KILN_CHECK(p.dtype() == x.dtype(), "layer_norm", "input has dtype ", x.dtype(), " but ", what, " has ", p.dtype());
}

// Under create_graph: the gradients of x [rows, n], weight and bias in differentiable ops, the
// statistics recomputed from x (their own dependence on x is part of the second derivative).
std::vector<Tensor> layer_norm_backward_composite(const Tensor& g, const Tensor& x, const Tensor& w, double eps) {
  const Tensor xc = x - mean(x, {1}, true);
  const Tensor rstd = rsqrt(mean(xc * xc, {1}, true) + eps), xhat = xc * rstd;
  const Tensor gw = w.defined() ? g * w : g;
  const Tensor dx = rstd * (gw - mean(gw, {1}, true) - xhat * mean(gw * xhat, {1}, true));
  return {dx, sum(g * xhat, {0}), sum(g, {0})};
}

}  // namespace

Tensor layer_norm(const Tensor& x_in, const Shape& normalized_shape, const Tensor& weight_in, const Tensor& bias_in,
                  double eps) {
  const Tensor x = ops::autocast_float32(x_in), weight = ops::autocast_float32(weight_in),
               bias = ops::autocast_float32(bias_in);
  ops::check_defined(x, "layer_norm");
  KILN_CHECK(x.is_floating_point(), "layer_norm", "expected a floating-point input, got ", x.dtype());
  const int64_t k = static_cast<int64_t>(normalized_shape.size());
  KILN_CHECK(k >= 1, "layer_norm", "normalized_shape must have at least 1 dim, got ", normalized_shape);
  KILN_CHECK(k <= x.dim() && Shape(x.shape().end() - k, x.shape().end()) == normalized_shape, "layer_norm",
             "input of shape ", x.shape(), " does not end with normalized_shape ", normalized_shape);
  KILN_CHECK(eps >= 0, "layer_norm", "eps must be non-negative, got ", eps);
  check_param(weight, x, normalized_shape, "weight");
  check_param(bias, x, normalized_shape, "bias");
  const Device dev = x.device();
  int64_t rows = 1, n = 1;
  for (int64_t d = 0; d < x.dim(); ++d) (d < x.dim() - k ? rows : n) *= x.size(d);
  const ScalarType stat = x.dtype() == kFloat64 ? kFloat64 : kFloat32;

  Tensor xc = x.contiguous().view({rows, n});
  Tensor w = weight.defined() ? weight.detach().contiguous().view({n}) : Tensor();
  Tensor b = bias.defined() ? bias.detach().contiguous().view({n}) : Tensor();
  std::vector<Tensor> outs{make_empty({rows, n}, x.dtype(), dev), make_empty({rows}, stat, dev),
                           make_empty({rows}, stat, dev)};
  backend::LayerNormAttrs attrs{eps, w.defined(), b.defined()};
  if (rows * n > 0) {
    std::vector<Tensor> in{xc};
    if (w.defined()) in.push_back(w);
    if (b.defined()) in.push_back(b);
    backend::run(Op::LayerNorm, dev, in, outs, &attrs);
  }
  Tensor out = outs[0].view(x.shape());
  if (autograd::needs_grad({&x, &weight, &bias})) {
    const bool gx = x.requires_grad();
    const bool gw = weight.defined() && weight.requires_grad(), gb = bias.defined() && bias.requires_grad();
    autograd::record("NativeLayerNormBackward", {&x, &weight, &bias}, out,
                     [sx = SavedTensor(xc), sw = SavedTensor(weight), mean = outs[1], rstd = outs[2], gx, gw, gb, normalized_shape,
                      shape = x.shape(), eps](const Tensor& g_in) -> TensorList {
                       Tensor xs = sx.get("NativeLayerNormBackward");
                       Tensor ws = sw.defined() ? sw.get("NativeLayerNormBackward").contiguous().view({xs.size(1)}) : Tensor();
                       const int64_t rows = xs.size(0), n = xs.size(1);
                       Tensor g = ops::cast(g_in, xs.dtype()).contiguous().view({rows, n});
                       if (autograd::needs_grad({&g, &xs, &ws})) {  // create_graph
                         std::vector<Tensor> r = layer_norm_backward_composite(g, xs, ws, eps);
                         return {gx ? r[0].view(shape) : Tensor(), gw ? r[1].view(normalized_shape) : Tensor(),
                                 gb ? r[2].view(normalized_shape) : Tensor()};
                       }
                       backend::LayerNormAttrs a{eps, ws.defined(), false, gw, gb};
                       std::vector<Tensor> res{make_empty({rows, n}, xs.dtype(), xs.device())};
                       if (gw) res.push_back(make_empty({n}, xs.dtype(), xs.device()));
                       if (gb) res.push_back(make_empty({n}, xs.dtype(), xs.device()));
                       if (rows * n > 0) {
                         std::vector<Tensor> in{g, xs, mean, rstd};
                         if (ws.defined()) in.push_back(ws);
                         backend::run(Op::LayerNormBackward, xs.device(), in, res, &a);
                       } else {
                         for (size_t i = 1; i < res.size(); ++i) res[i].zero_();
                       }
                       size_t i = 1;
                       Tensor dw = gw ? res[i++].view(normalized_shape) : Tensor();
                       Tensor db = gb ? res[i++].view(normalized_shape) : Tensor();
                       return {gx ? res[0].view(shape) : Tensor(), dw, db};
                     });
  }
  return out;
}

Tensor group_norm(const Tensor& x_in, int64_t num_groups, const Tensor& weight_in, const Tensor& bias_in, double eps) {
  const char* op = "group_norm";
  const Tensor x = ops::autocast_float32(x_in), weight = ops::autocast_float32(weight_in),
               bias = ops::autocast_float32(bias_in);
  ops::check_defined(x, op);
  KILN_CHECK(x.dim() >= 2, op, "expected an input [N, C, *] of at least 2 dims, got shape ", x.shape());
  KILN_CHECK(x.is_floating_point(), op, "expected a floating-point input, got ", x.dtype());
  const int64_t n = x.size(0), c = x.size(1);
  KILN_CHECK(num_groups > 0 && c % num_groups == 0, op, "expected the number of channels of input ", x.shape(),
             " to be divisible by num_groups, got num_groups=", num_groups);
  KILN_CHECK(eps >= 0, op, "eps must be non-negative, got ", eps);
  // 16-bit inputs are normalised and scaled in float32 and rounded once, as torch's kernels.
  const ScalarType wide = x.dtype() == kFloat16 || x.dtype() == kBFloat16 ? kFloat32 : x.dtype();
  for (const auto& [p, what] : {std::pair{&weight, "weight"}, std::pair{&bias, "bias"}}) {
    if (!p->defined()) continue;
    ops::common_device({&x, p}, op);
    KILN_CHECK(p->dim() == 1 && p->size(0) == c, op, "expected ", what, " of shape [", c, "] (one per channel of input ",
               x.shape(), "), got shape ", p->shape());
    // (a 16-bit input may take float32 parameters, as torch's CPU kernel: it scales in float32)
    KILN_CHECK(p->dtype() == x.dtype() || (p->dtype() == wide && wide != x.dtype()), op, "input has dtype ",
               x.dtype(), " but ", what, " has ", p->dtype());
  }
  int64_t group = c / num_groups;
  for (int64_t d = 2; d < x.dim(); ++d) group *= x.size(d);
  Tensor y = layer_norm(ops::cast(x, wide).reshape({n, num_groups, group}), {group}, {}, {}, eps).view(x.shape());
  if (weight.defined() || bias.defined()) {
    Shape per_channel(static_cast<size_t>(x.dim()), 1);
    per_channel[1] = c;
    const Tensor w = weight.defined() ? ops::cast(weight, wide).view(per_channel) : Tensor();
    const Tensor b = bias.defined() ? ops::cast(bias, wide).view(per_channel) : Tensor();
    y = w.defined() && b.defined() ? addcmul(b, y, w) : w.defined() ? y * w : y + b;
  }
  return ops::cast(y, x.dtype());
}

}  // namespace kiln
