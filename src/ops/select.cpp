// Selection by value (ops.h): nonzero and argwhere, masked_select and count_nonzero, composed of
// cumsum, where, scatter_add and index_select, so they run on every device that has those kernels
// (integer cumsum scans long rows in parallel on a GPU) and masked_select's gradient is
// index_select's.
#include "ops/op_util.h"

namespace kiln {
namespace {

// The positions of m's true elements (m bool, 1-D), in order: int64 [n]. Every element gets a slot,
// the k-th true one k and the k-th false one n + k, a permutation of the positions: one scatter
// with no two elements in a slot puts the true ones' positions first. Reading n waits for the device.
Tensor true_positions(const Tensor& m) {
  const int64_t total = m.numel();
  const TensorOptions opts = TensorOptions(kInt64).device(m.device());
  if (total == 0) return empty({0}, opts);
  const Tensor trues = cumsum(m, 0);  // the true elements up to each, itself included
  const int64_t n = trues[total - 1].item<int64_t>();
  const Tensor pos = arange(total, opts);
  const Tensor slot = where(m, trues - 1, pos - trues + n);  // a false one: n + the false ones before it
  return zeros({total}, opts).scatter_add(0, slot, pos).slice(0, 0, n);
}

}  // namespace

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

Tensor count_nonzero(const Tensor& x, const Shape& dims) {
  ops::check_defined(x, "count_nonzero");
  return sum(ne(x.detach(), 0), dims);
}

}  // namespace kiln
