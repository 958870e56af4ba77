// cumsum along one dim, with torch's result dtype (int64 for integers and bool unless a dtype is
// given) and its accumulation (the kernels' contract in backend/dispatch.h). The gradient is the
// reversed running sum of the output's gradient.
#include <algorithm>
#include <optional>

#include "ops/op_util.h"

namespace kiln {
namespace {

using autograd::SavedTensor;
using ops::Op;

// The running sum of x along d (from the end when reverse), in dtype rt. Its gradient is g cast to
// x's dtype first, then summed the other way (torch's order: a float64 input summed in float32
// gets its gradient summed in float64).
Tensor running_sum(const Tensor& x, int64_t d, bool reverse, ScalarType rt) {
  const Shape& shape = x.shape();
  int64_t outer = 1, inner = 1;
  for (int64_t k = 0; k < d; ++k) outer *= shape[k];
  for (int64_t k = d + 1; k < x.dim(); ++k) inner *= shape[k];
  const int64_t n = x.dim() == 0 ? 1 : shape[d];
  Tensor out = make_empty(shape, rt, x.device());
  if (out.numel() > 0) {
    Tensor o3 = out.view({outer, n, inner});
    backend::CumsumAttrs attrs{reverse};
    ops::run1(Op::Cumsum, x.device(), {ops::cast(x.detach(), rt).contiguous().view({outer, n, inner})}, o3, &attrs);
  }
  if (autograd::needs_grad({&x}) && is_floating_point(rt))
    autograd::record("CumsumBackward", {&x}, out, [d, reverse, dt = x.dtype()](const Tensor& g) -> TensorList {
      return {running_sum(g, d, !reverse, dt)};
    });
  return out;
}

}  // namespace

Tensor cumsum(const Tensor& x, int64_t dim, std::optional<ScalarType> dtype) {
  ops::check_defined(x, "cumsum");
  const int64_t d = wrap_dim(dim, std::max<int64_t>(x.dim(), 1), "cumsum");
  const ScalarType rt = dtype.value_or(x.is_floating_point() ? x.dtype() : kInt64);
  return running_sum(x, x.dim() == 0 ? 0 : d, false, rt);
}

}  // namespace kiln
