// softmax and log_softmax over one dim, with gradients through dedicated backward kernels.
#include <cmath>

#include "ops/op_util.h"

namespace kiln {
namespace {

using autograd::SavedTensor;
using ops::Op;

Tensor softmax_impl(const Tensor& x, int64_t dim, bool log) {
  const char* name = log ? "log_softmax" : "softmax";
  ops::check_defined(x, name);
  const int64_t d = x.dim() == 0 ? 0 : wrap_dim(dim, x.dim(), name);
  Tensor xc = ops::cast(x, ops::float_type(x.dtype())).contiguous();
  Tensor out = make_empty(x.shape(), xc.dtype(), x.device());
  backend::DimAttrs attrs{d};
  ops::run1(log ? Op::LogSoftmax : Op::Softmax, x.device(), {xc}, out, &attrs);
  if (autograd::needs_grad({&x}))
    autograd::record(log ? "LogSoftmaxBackward" : "SoftmaxBackward", {&x}, out,
                     [so = SavedTensor(out), d, log, dt = x.dtype()](const Tensor& g) -> TensorList {
                       Tensor y = so.get("SoftmaxBackward");
                       Tensor gc = ops::cast(g, y.dtype()).contiguous();
                       Tensor gx = make_empty(y.shape(), y.dtype(), y.device());
                       backend::DimAttrs a{d};
                       backend::run(log ? Op::LogSoftmaxBackward : Op::SoftmaxBackward, y.device(),
                                    std::initializer_list<Tensor>{gc, y}, std::span<Tensor>(&gx, 1), &a);
                       return {ops::cast(gx, dt)};
                     });
  return out;
}

}  // namespace

Tensor softmax(const Tensor& x, int64_t dim) { return softmax_impl(x, dim, false); }
Tensor log_softmax(const Tensor& x, int64_t dim) { return softmax_impl(x, dim, true); }

}  // namespace kiln

namespace kiln {

// STAND-IN: composed until the masked softmax kernel lands (fully masked rows give NaN here).
Tensor masked_softmax(const Tensor& x, const Tensor& mask, int64_t dim) {
  if (mask.dtype() == kBool) return softmax(masked_fill(x, logical_not(mask), -INFINITY), dim);
  return softmax(add(x, mask), dim);
}

}  // namespace kiln
