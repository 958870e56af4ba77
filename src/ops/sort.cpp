// sort, argsort and topk along one dim, in torch's order (NaN above every number, -0 equal to 0)
// and stable: equal elements keep their order, on every device (backend/sort_math.h). The
// values' gradient goes back to the positions the indices name.
#include <algorithm>
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
                       // Each position is picked once at most: the sum at it is exact in any dtype.
                       return {scatter_add(zeros(shape, g.options()), d, si.get("SortBackward"), g)};
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

}  // namespace kiln
