// sort, argsort and topk along one dim, in torch's order (NaN above every number, -0 equal to 0)
// and stable: equal elements keep their order, on every device (backend/sort_math.h). The
// values' gradient goes back to the positions the indices name. kthvalue, median and nanmedian
// pick from the sorted rows.
#include <algorithm>
#include <cmath>
#include <optional>

#include "ops/op_util.h"

namespace kiln {
namespace {

using autograd::SavedTensor;
using ops::Op;

// The first k of each row along dim (all of it when k is not given), as values and int64 indices
// shaped like x with k there.
std::tuple<Tensor, Tensor> sorted_along(const Tensor& x, int64_t dim, std::optional<int64_t> k_given, bool descending,
                                        const char* name) {
  ops::check_defined(x, name);
  const int64_t d = wrap_dim(dim, std::max<int64_t>(x.dim(), 1), name);
  const int64_t n = x.dim() == 0 ? 1 : x.size(d);
  const int64_t k = k_given.value_or(n);
  KILN_CHECK(k >= 0 && k <= n, name, "k (", k, ") is out of range for dim ", d, " of size ", n);
  // The kernel sorts the rows of a [rows, n] matrix: dim d goes last.
  const Tensor xt = x.dim() == 0 ? x.detach().reshape({1}) : x.detach().transpose(d, -1).contiguous();
  Shape out_shape = xt.shape();
  out_shape.back() = k;
  Tensor values = make_empty(out_shape, x.dtype(), x.device());
  Tensor indices = make_empty(out_shape, kInt64, x.device());
  if (values.numel() > 0) {
    const int64_t rows = xt.numel() / n;
    Tensor outs[2] = {values.view({rows, k}), indices.view({rows, k})};
    const Tensor in[1] = {xt.view({rows, n})};
    backend::SortAttrs attrs{descending, k};
    backend::run(Op::Sort, x.device(), in, outs, &attrs);
  }
  if (x.dim() == 0 && k == 1) {  // (k = 0 leaves [0]: no element to hold)
    values = values.reshape({});
    indices = indices.reshape({});
  } else if (d != x.dim() - 1) {
    values = values.transpose(d, -1).contiguous();
    indices = indices.transpose(d, -1).contiguous();
  }
  if (autograd::needs_grad({&x}))
    autograd::record("SortBackward", {&x}, values,
                     [si = SavedTensor(indices), d, shape = x.shape()](const Tensor& g) -> TensorList {
                       if (shape.empty()) return {g.numel() == 1 ? g.reshape(shape) : zeros(shape, g.options())};
                       return {ops::sum_at(shape, d, si.get("SortBackward"), g)};
                     });
  return {values, indices};
}

}  // namespace

std::tuple<Tensor, Tensor> sort(const Tensor& x, int64_t dim, bool descending) {
  return sorted_along(x, dim, std::nullopt, descending, "sort");
}

Tensor argsort(const Tensor& x, int64_t dim, bool descending) {
  NoGradGuard no_grad;
  return std::get<1>(sorted_along(x, dim, std::nullopt, descending, "argsort"));
}

// torch lets topk return unsorted results in any order; these are always sorted.
std::tuple<Tensor, Tensor> topk(const Tensor& x, int64_t k, int64_t dim, bool largest, bool /*sorted*/) {
  return sorted_along(x, dim, k, largest, "topk");
}

namespace {

// The element at sorted (ascending) position pos of each row along d: values and their indices in
// x, pos and the results shaped like x with size 1 at d (squeezed unless keepdim). Differentiable
// through the sort's values.
std::tuple<Tensor, Tensor> at_sorted(const Tensor& x, int64_t d, const Tensor& pos, bool keepdim) {
  auto [v, i] = sort(x, d);
  Tensor values = gather(v, d, pos), indices = gather(i, d, pos);
  if (!keepdim) return {values.squeeze(d), indices.squeeze(d)};
  return {values, indices};
}

// x (a 0-d x as [1], its results made 0-d again: `scalar`), its dim d wrapped and checked to be
// non-empty, and that dim's size n.
struct Along {
  Tensor x;
  int64_t d, n;
  bool scalar;
};
Along along(const Tensor& x, int64_t dim, const char* name) {
  ops::check_defined(x, name);
  KILN_CHECK(x.dtype() != kBool, name, "does not take bool tensors");
  const int64_t d = wrap_dim(dim, std::max<int64_t>(x.dim(), 1), name);
  const Tensor x1 = x.dim() == 0 ? x.reshape({1}) : x;
  KILN_CHECK(x1.size(d) > 0, name, "dim ", d, " of shape ", x.shape(), " is empty");
  return {x1, d, x1.size(d), x.dim() == 0};
}

std::tuple<Tensor, Tensor> scalar_result(std::tuple<Tensor, Tensor> r, bool scalar) {
  if (!scalar) return r;
  return {std::get<0>(r).reshape({}), std::get<1>(r).reshape({})};
}

// The lower median of each row (NaN rows: the first NaN, or, ignoring NaN, the lower median of the
// rest and NaN where all are NaN).
std::tuple<Tensor, Tensor> median_along(const Tensor& x, int64_t dim, bool keepdim, bool ignore_nan,
                                        const char* name) {
  const Along a = along(x, dim, name);
  Tensor nans = isnan(a.x).sum({a.d}, true);  // int64, shaped like x with 1 at d
  Tensor pos;
  if (ignore_nan) {
    const Tensor valid = nans.neg().add(a.n);  // n - NaNs
    pos = clamp_min((valid - 1).to(kFloat64).mul(0.5).floor(), 0.0).to(kInt64);
  } else {
    pos = where(nans > 0, nans.neg().add(a.n), full(nans.shape(), (a.n - 1) / 2, nans.options()));
  }
  return scalar_result(at_sorted(a.x, a.d, pos, keepdim || a.scalar), a.scalar);
}

// The median of all elements (an empty floating-point tensor: NaN, as torch's). Its gradient is
// torch's: spread evenly over the elements equal to it (over every NaN when it is NaN).
Tensor median_all(const Tensor& x, bool ignore_nan, const char* name) {
  ops::check_defined(x, name);
  if (x.numel() == 0 && x.is_floating_point()) return full({}, std::nan(""), x.options());
  Tensor m;
  {
    NoGradGuard no_grad;
    m = std::get<0>(median_along(x.reshape({-1}), 0, false, ignore_nan, name));
  }
  if (autograd::needs_grad({&x}))
    autograd::record("MedianBackward", {&x}, m, [sx = SavedTensor(x), sm = SavedTensor(m)](const Tensor& g) -> TensorList {
      const Tensor xv = sx.get("MedianBackward"), mv = sm.get("MedianBackward");
      const Tensor hit = logical_or(xv == mv, logical_and(isnan(xv), isnan(mv)));
      return {ops::spread_evenly(g, hit, ops::reduce_dims(xv, {}, false, "median"), xv)};
    });
  return m;
}

}  // namespace

std::tuple<Tensor, Tensor> kthvalue(const Tensor& x, int64_t k, int64_t dim, bool keepdim) {
  const Along a = along(x, dim, "kthvalue");
  KILN_CHECK(k >= 1 && k <= a.n, "kthvalue", "k (", k, ") is out of range for dim ", a.d, " of size ", a.n);
  Shape keep = a.x.shape();
  keep[a.d] = 1;
  const Tensor pos = full(keep, k - 1, TensorOptions(kInt64).device(x.device()));
  return scalar_result(at_sorted(a.x, a.d, pos, keepdim || a.scalar), a.scalar);
}

Tensor median(const Tensor& x) { return median_all(x, false, "median"); }
std::tuple<Tensor, Tensor> median(const Tensor& x, int64_t dim, bool keepdim) {
  return median_along(x, dim, keepdim, false, "median");
}
Tensor nanmedian(const Tensor& x) { return median_all(x, true, "nanmedian"); }
std::tuple<Tensor, Tensor> nanmedian(const Tensor& x, int64_t dim, bool keepdim) {
  return median_along(x, dim, keepdim, true, "nanmedian");
}

}  // namespace kiln
