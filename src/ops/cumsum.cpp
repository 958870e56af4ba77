// cumsum and cumprod along one dim, with torch's result dtype (int64 for integers and bool unless a
// dtype is given) and its accumulation (the kernels' contract in backend/dispatch.h). cumsum's
// gradient is the reversed running sum of the output's gradient; cumprod's is torch's, zeros
// included.
#include <algorithm>
#include <optional>
#include <vector>

#include "ops/op_util.h"

namespace kiln {
namespace {

using autograd::SavedTensor;
using ops::Op;

// The running sum (or product) of x along d (from the end when reverse), in dtype rt. A sum's
// gradient is g cast to x's dtype first, then summed the other way (torch's order: a float64 input
// summed in float32 gets its gradient summed in float64); a product's is cumprod_grad.
Tensor scan(const Tensor& x, int64_t d, bool reverse, bool product, ScalarType rt);

// torch's cumprod gradient, zeros included: sum over k >= i of g_k y_k / x_i before a row's first
// zero (y is 0 from it on); at the first zero z, y_{z-1} times the sum over k >= z of g_k times
// the product of x_{z+1..k}; 0 after it. Differentiable ops, so it differentiates again.
Tensor cumprod_grad(const Tensor& g, const Tensor& x, const Tensor& y, int64_t d) {
  const ScalarType t = x.dtype();
  const Tensor zeros_so_far = scan(x == 0, d, false, false, kInt64);
  const Tensor before = zeros_so_far == 0, first = (x == 0).logical_and(zeros_so_far == 1);
  const Tensor one = ones({}, x.options());
  const Tensor before_z = scan(g * y, d, true, false, t) / where(before, x, one);
  const Tensor after = scan(where(before.logical_or(first), one, x), d, false, true, t);  // x_{z+1..k}
  const Tensor at_z = scan(where(before, x, one), d, false, true, t) * scan(g * after, d, true, false, t);
  return where(before, before_z, where(first, at_z, zeros({}, x.options())));
}

// The same gradient for create_graph where x has zeros, differentiable again (cumprod_grad's masks
// are not: x_z's own derivative is lost), as torch's O(n^2) formula: input k's gradient is the sum
// over m >= k of g_m times the product of x_0..m without x_k.
Tensor cumprod_grad_twice(const Tensor& g, const Tensor& x, int64_t d) {
  const int64_t n = x.size(d);
  Shape one_shape = x.shape();
  one_shape[d] = 1;
  const Tensor ones_slice = ones(one_shape, x.options());
  std::vector<Tensor> columns;
  for (int64_t k = 0; k < n; ++k) {
    const Tensor before = k > 0 ? prod(x.narrow(d, 0, k), {d}, true) : ones_slice;
    const Tensor after = k + 1 < n ? cat({ones_slice, cumprod(x.narrow(d, k + 1, n - k - 1), d)}, d) : ones_slice;
    columns.push_back(sum(g.narrow(d, k, n - k) * (before * after), {d}, true));
  }
  return cat(columns, d);
}

Tensor scan(const Tensor& x, int64_t d, bool reverse, bool product, ScalarType rt) {
  const Shape& shape = x.shape();
  int64_t outer = 1, inner = 1;
  for (int64_t k = 0; k < d; ++k) outer *= shape[k];
  for (int64_t k = d + 1; k < x.dim(); ++k) inner *= shape[k];
  const int64_t n = x.dim() == 0 ? 1 : shape[d];
  Tensor out = make_empty(shape, rt, x.device());
  if (out.numel() > 0) {
    Tensor o3 = out.view({outer, n, inner});
    backend::CumsumAttrs attrs{reverse, product};
    ops::run1(Op::Cumsum, x.device(), {ops::cast(x.detach(), rt).contiguous().view({outer, n, inner})}, o3, &attrs);
  }
  if (autograd::needs_grad({&x}) && is_floating_point(rt)) {
    if (product)
      autograd::record("CumprodBackward", {&x}, out,
                       [d, sx = SavedTensor(x), sy = SavedTensor(out), dt = x.dtype()](const Tensor& g) -> TensorList {
                         const Tensor xs = ops::cast(sx.get("CumprodBackward"), g.dtype());
                         if (autograd::needs_grad({&g, &xs}) && xs.dim() > 0 && (xs == 0).any().item<bool>())
                           return {ops::cast(cumprod_grad_twice(g, xs, d), dt)};  // create_graph
                         return {ops::cast(cumprod_grad(g, xs, sy.get("CumprodBackward"), d), dt)};
                       });
    else
      autograd::record("CumsumBackward", {&x}, out, [d, reverse, dt = x.dtype()](const Tensor& g) -> TensorList {
        return {scan(g, d, !reverse, false, dt)};
      });
  }
  return out;
}

// torch's result dtype: the one given, else x's for floats and int64 for integers and bool.
Tensor scan_op(const Tensor& x, int64_t dim, std::optional<ScalarType> dtype, bool product, const char* op) {
  ops::check_defined(x, op);
  const int64_t d = wrap_dim(dim, std::max<int64_t>(x.dim(), 1), op);
  const ScalarType rt = dtype.value_or(x.is_floating_point() ? x.dtype() : kInt64);
  return scan(x, x.dim() == 0 ? 0 : d, false, product, rt);
}

}  // namespace

Tensor cumsum(const Tensor& x, int64_t dim, std::optional<ScalarType> dtype) {
  return scan_op(x, dim, dtype, false, "cumsum");
}

Tensor cumprod(const Tensor& x, int64_t dim, std::optional<ScalarType> dtype) {
  return scan_op(x, dim, dtype, true, "cumprod");
}

Tensor Tensor::cumprod(int64_t dim, std::optional<ScalarType> dtype) const { return kiln::cumprod(*this, dim, dtype); }

}  // namespace kiln
