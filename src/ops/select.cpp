// Selection by value (ops.h): nonzero and argwhere, masked_select, count_nonzero, unique and
// unique_consecutive: a count and the MaskPositions kernel (the positions of a mask's true elements),
// with sort, cumsum, scatter_add and index_select, so masked_select's gradient is index_select's.
#include <vector>

#include "ops/op_util.h"

namespace kiln {

using ops::Op;
using ops::true_positions;

// n counted first (reading it waits for the device), then the kernel (MaskPositions).
Tensor ops::true_positions(const Tensor& m) {
  const Tensor mc = m.contiguous();
  const int64_t n = m.numel() == 0 ? 0 : sum(mc).item<int64_t>();
  Tensor out = make_empty({n}, kInt64, m.device());
  if (n > 0) ops::run1(Op::MaskPositions, m.device(), {mc}, out);
  return out;
}

Tensor nonzero(const Tensor& x) {
  ops::check_defined(x, "nonzero");
  Tensor rest = true_positions(ne(x.detach().flatten(), 0));
  const int64_t n = rest.size(0), d = x.dim();
  if (d == 0) return empty({n, 0}, TensorOptions(kInt64).device(x.device()));
  // Row-major coordinates of each position: the last dim's is the position modulo its size.
  std::vector<Tensor> coords(static_cast<size_t>(d));
  for (int64_t k = d - 1; k > 0; --k) {
    coords[static_cast<size_t>(k)] = remainder(rest, x.size(k));
    rest = floor_divide(rest, x.size(k));
  }
  coords[0] = rest;
  return stack(coords, 1);
}

Tensor argwhere(const Tensor& x) {
  ops::check_defined(x, "argwhere");
  return nonzero(x);
}

Tensor masked_select(const Tensor& x, const Tensor& mask) {
  ops::check_defined(x, "masked_select");
  ops::check_defined(mask, "masked_select");
  KILN_CHECK(mask.dtype() == kBool, "masked_select", "expects a bool mask, got ", mask.dtype());
  const Device dev = ops::common_device({&x, &mask}, "masked_select");
  const Shape shape = broadcast_shapes(x.shape(), mask.shape(), "masked_select");
  const Tensor pos = true_positions(mask.to(dev).expand(shape).flatten());
  return index_select(x.expand(shape).flatten(), 0, pos);
}

namespace {

// The runs of equal neighbours in `values` (1-D): the first of each, and on request each element's
// run (placed back at x's positions through `order`, a permutation, when values is x sorted) and
// each run's length.
std::tuple<Tensor, Tensor, Tensor> runs(const Tensor& values, const Tensor& order, const Shape& shape,
                                        bool return_inverse, bool return_counts) {
  const int64_t n = values.numel();
  const TensorOptions index = TensorOptions(kInt64).device(values.device());
  if (n == 0)
    return {values.clone(), return_inverse ? empty(shape, index) : Tensor(), return_counts ? empty({0}, index) : Tensor()};
  const Tensor firsts = cat({ones({1}, TensorOptions(kBool).device(values.device())),
                             ne(values.slice(0, 1), values.slice(0, 0, n - 1))});
  Tensor inverse, counts;
  if (return_inverse) {
    const Tensor run = cumsum(firsts, 0) - 1;
    inverse = (order.defined() ? zeros({n}, index).scatter_add(0, order, run) : run).view(shape);
  }
  if (return_counts) {
    const Tensor starts = true_positions(firsts);
    counts = cat({starts.slice(0, 1), full({1}, n, index)}) - starts;
  }
  return {masked_select(values, firsts), inverse, counts};
}

}  // namespace

std::tuple<Tensor, Tensor, Tensor> unique(const Tensor& x, bool /*sorted*/, bool return_inverse, bool return_counts) {
  ops::check_defined(x, "unique");
  const auto [values, order] = sort(x.detach().flatten());
  return runs(values, order, x.shape(), return_inverse, return_counts);
}

std::tuple<Tensor, Tensor, Tensor> unique_consecutive(const Tensor& x, bool return_inverse, bool return_counts) {
  ops::check_defined(x, "unique_consecutive");
  return runs(x.detach().flatten(), Tensor(), x.shape(), return_inverse, return_counts);
}

Tensor count_nonzero(const Tensor& x, const Shape& dims) {
  ops::check_defined(x, "count_nonzero");
  ops::reduce_dims(x, dims, false, "count_nonzero");  // the dims' errors name count_nonzero, not sum
  return sum(ne(x.detach(), 0), dims);
}

}  // namespace kiln
