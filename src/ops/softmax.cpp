// softmax, log_softmax and masked_softmax over one dim, with gradients through the softmax backward kernels.
#include <cmath>

#include "ops/autocast_policy.h"
#include "ops/op_util.h"

namespace kiln {
namespace {

using autograd::SavedTensor;
using ops::Op;

// The input's gradient from the output's (g) and the output (y) along dim d: softmax's kernel, or,
// under create_graph, its formula in differentiable ops (y (g - sum(g y)); log_softmax's
// g - exp(y) sum(g)). A masked softmax's masked elements have y = 0, and so a gradient of 0.
Tensor softmax_backward(const Tensor& g, const Tensor& y, int64_t d, bool log) {
  Tensor gc = ops::cast(g, y.dtype());
  if (autograd::needs_grad({&gc, &y}))
    return log ? gc - exp(y) * sum(gc, {d}, true) : y * (gc - sum(gc * y, {d}, true));
  gc = gc.contiguous();
  Tensor gx = make_empty(y.shape(), y.dtype(), y.device());
  backend::DimAttrs a{d};
  if (gx.numel() > 0) ops::run1(log ? Op::LogSoftmaxBackward : Op::SoftmaxBackward, y.device(), {gc, y}, gx, &a);
  return gx;
}

Tensor softmax_impl(const Tensor& x, int64_t dim, bool log) {
  const char* name = log ? "log_softmax" : "softmax";
  ops::check_defined(x, name);
  const int64_t d = x.dim() == 0 ? 0 : wrap_dim(dim, x.dim(), name);
  Tensor xc = ops::cast(x, ops::float_type(x.dtype())).contiguous();
  Tensor out = make_empty(x.shape(), xc.dtype(), x.device());
  backend::DimAttrs attrs{d};
  // An empty tensor has no rows (and the kernels' blocking divides by the row stride).
  if (xc.numel() > 0) ops::run1(log ? Op::LogSoftmax : Op::Softmax, x.device(), {xc}, out, &attrs);
  if (autograd::needs_grad({&x}))
    autograd::record(log ? "LogSoftmaxBackward" : "SoftmaxBackward", {&x}, out,
                     [so = SavedTensor(out), d, log, dt = x.dtype()](const Tensor& g) -> TensorList {
                       return {ops::cast(softmax_backward(g, so.get("SoftmaxBackward"), d, log), dt)};
                     });
  return out;
}

}  // namespace

Tensor softmax(const Tensor& x, int64_t dim) { return softmax_impl(ops::autocast_float32(x), dim, false); }
Tensor log_softmax(const Tensor& x, int64_t dim) { return softmax_impl(ops::autocast_float32(x), dim, true); }

}  // namespace kiln

namespace kiln {

Tensor masked_softmax(const Tensor& x_in, const Tensor& mask_in, int64_t dim) {
  const Tensor x = ops::autocast_float32(x_in), mask = ops::autocast_float32(mask_in);
  const char* name = "masked_softmax";
  ops::check_defined(x, name);
  ops::check_defined(mask, name);
  const Device dev = ops::common_device({&x, &mask}, name);
  KILN_CHECK(x.is_floating_point(), name, "expected a floating-point input, got ", x.dtype());
  KILN_CHECK(mask.dtype() == kBool || mask.is_floating_point(), name,
             "mask must be bool (true = keep) or floating point (added to the input), got ", mask.dtype());
  bool fits = mask.dim() <= x.dim();
  for (int64_t i = 1; fits && i <= mask.dim(); ++i)
    fits = mask.size(-i) == 1 || mask.size(-i) == x.size(-i);
  KILN_CHECK(fits, name, "mask of shape ", mask.shape(), " cannot be broadcast to the input's shape ", x.shape());
  const int64_t d = x.dim() == 0 ? 0 : wrap_dim(dim, x.dim(), name);
  // The mask is read through broadcast strides: only a float mask of another dtype is converted.
  Tensor m = (mask.dtype() == kBool ? mask : ops::cast(mask, x.dtype())).expand(x.shape());
  Tensor xc = x.contiguous();
  Tensor out = make_empty(x.shape(), x.dtype(), dev);
  backend::MaskedSoftmaxAttrs attrs{d};
  if (out.numel() > 0) ops::run1(Op::MaskedSoftmax, dev, {xc, m}, out, &attrs);
  if (autograd::needs_grad({&x}))
    autograd::record("MaskedSoftmaxBackward", {&x}, out, [so = SavedTensor(out), d](const Tensor& g) -> TensorList {
      return {softmax_backward(g, so.get("MaskedSoftmaxBackward"), d, false)};
    });
  return out;
}

}  // namespace kiln
