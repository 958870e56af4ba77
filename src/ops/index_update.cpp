// index_add, index_copy and index_fill (and their in-place forms): slices of x along dim, picked
// by a 1-D index, updated from source's slices or a value; written with scatter_add, where and
// index_select, so every device runs them on its kernels and their gradients are those ops'.
#include <vector>

#include "ops/op_util.h"

namespace kiln {
namespace {

// The checks index_add and index_copy share (torch's): a 0-d or 1-D integer index; source of x's
// dtype and shape but along dim, where it has one slice per index.
int64_t check_update(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& source, const char* op) {
  ops::check_defined(x, op);
  ops::check_defined(index, op);
  ops::check_defined(source, op);
  KILN_CHECK(x.dim() >= 1, op, "expected a tensor of at least 1 dim, got a 0-d one");
  const int64_t d = wrap_dim(dim, x.dim(), op);
  KILN_CHECK(index.dtype() == kInt64 || index.dtype() == kInt32, op, "indices must be int64 or int32, got ",
             index.dtype());
  KILN_CHECK(index.dim() <= 1, op, "index must be 0-d or 1-D, got shape ", index.shape());
  KILN_CHECK(source.dtype() == x.dtype(), op, "self (", x.dtype(), ") and source (", source.dtype(),
             ") must have the same dtype");
  Shape want = x.shape();
  want[d] = index.numel();
  KILN_CHECK(source.shape() == want, op, "source of shape ", source.shape(), " does not fit self ", x.shape(),
             " with ", index.numel(), " indices along dim ", d, " (expected ", want, ")");
  ops::common_device({&x, &index, &source}, op);
  return d;
}

// index as a [1, .., n, .., 1] view along dim of a rank-r tensor.
Tensor along(const Tensor& index, int64_t d, int64_t rank) {
  Shape view(static_cast<size_t>(rank), 1);
  view[d] = index.numel();
  return ops::cast(index, kInt64).reshape(view);
}

// Where the index is on the CPU its range is checked here, naming the op (on a device the kernels
// that read it check it, as scatter_add's); negative indices count from the end where allowed.
void check_range(const Tensor& index, int64_t size, bool negative_ok, int64_t d, const char* op) {
  if (!index.device().is_cpu()) return;
  for (int64_t i : ops::cast(index, kInt64).reshape({-1}).to_vector<int64_t>())
    KILN_CHECK((negative_ok ? i >= -size : i >= 0) && i < size, op, "index ", i, " is out of bounds for dim ", d,
               " of size ", size);
}

}  // namespace

Tensor index_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& source, Scalar alpha) {
  const int64_t d = check_update(x, dim, index, source, "index_add");
  KILN_CHECK(is_floating_point(x.dtype()) || !alpha.is_floating_point(), "index_add", "for ", x.dtype(),
             " tensors alpha must be an integer, got ", alpha.to_double());
  ops::check_fill_value(alpha, x.dtype(), "index_add");
  check_range(index, x.size(d), false, d, "index_add");
  const Tensor idx = along(index, d, x.dim()).expand(source.shape()).contiguous();
  if (alpha.to_double() == 1.0) return scatter_add(x, d, idx, source);
  // 16-bit: x + alpha * source in float32, rounded once (torch's opmath)
  const bool widen = x.dtype() == kFloat16 || x.dtype() == kBFloat16;
  const ScalarType t = widen ? kFloat32 : x.dtype();
  return ops::cast(scatter_add(ops::cast(x, t), d, idx, ops::cast(source, t) * ops::wrap_scalar(alpha, t)), x.dtype());
}

// The slices index names are source's (the last one for an index named twice, as torch's CPU
// loop leaves it); the index is read on the host, where its range is checked. The gradient is
// torch's: x's without the copied slices, and each source slice the gradient of its index's slice
// (an index named twice gives both the gradient).
Tensor index_copy(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& source) {
  const int64_t d = check_update(x, dim, index, source, "index_copy");
  const int64_t size = x.size(d);
  const Tensor host = ops::cast(index, kInt64).cpu().reshape({-1});
  check_range(host, size, false, d, "index_copy");
  const std::vector<int64_t> idx = host.to_vector<int64_t>();
  std::vector<int64_t> from(static_cast<size_t>(size), -1);
  for (size_t i = 0; i < idx.size(); ++i) from[idx[i]] = static_cast<int64_t>(i);
  std::vector<int64_t> pick(from.size());
  std::vector<bool> copied(from.size());
  for (size_t p = 0; p < from.size(); ++p) pick[p] = std::max<int64_t>(from[p], 0), copied[p] = from[p] >= 0;
  if (idx.empty()) return x.clone();
  const TensorOptions on = TensorOptions().device(x.device());
  Shape view(static_cast<size_t>(x.dim()), 1);
  view[d] = size;
  Tensor out;
  {
    NoGradGuard ng;
    out = where(tensor(copied, view, on.dtype(kBool)), index_select(source, d, tensor(pick, on.dtype(kInt64))), x);
  }
  if (autograd::needs_grad({&x, &source}))
    autograd::record("IndexCopyBackward", {&x, &source}, out,
                     [d, i = host.to(x.device()), nx = x.requires_grad(), ns = source.requires_grad()](
                         const Tensor& g) -> TensorList {
                       return {nx ? index_fill(g, d, i, 0) : Tensor(), ns ? index_select(g, d, i) : Tensor()};
                     });
  return out;
}

// Negative indices count from the end (torch's index_fill takes them); the mask of the named
// slices is built on x's device (a count per slice by scatter_add, whose kernels check the range).
Tensor index_fill(const Tensor& x, int64_t dim, const Tensor& index, Scalar value) {
  const char* op = "index_fill";
  ops::check_defined(x, op);
  ops::check_defined(index, op);
  KILN_CHECK(index.dtype() == kInt64 || index.dtype() == kInt32, op, "indices must be int64 or int32, got ",
             index.dtype());
  KILN_CHECK(index.dim() <= 1, op, "index must be 0-d or 1-D, got shape ", index.shape());
  ops::check_fill_value(value, x.dtype(), op);
  const Device dev = ops::common_device({&x, &index}, op);
  const int64_t d = x.dim() == 0 ? 0 : wrap_dim(dim, x.dim(), op);
  const int64_t size = x.dim() == 0 ? 1 : x.size(d);
  check_range(index, size, true, d, op);
  Tensor i = ops::cast(index, kInt64).reshape({-1});
  i = where((i < 0).logical_and(i >= -size), i + size, i);  // past -size: an error naming it
  const Tensor counts = scatter_add(zeros({size}, TensorOptions(kInt64).device(dev)), 0, i, ones_like(i));
  Shape view(static_cast<size_t>(x.dim()), 1);
  if (x.dim() > 0) view[d] = size;
  return masked_fill(x, (counts > 0).reshape(view), value);
}

Tensor Tensor::index_add(int64_t dim, const Tensor& index, const Tensor& source, Scalar alpha) const {
  return kiln::index_add(*this, dim, index, source, alpha);
}
Tensor Tensor::index_copy(int64_t dim, const Tensor& index, const Tensor& source) const {
  return kiln::index_copy(*this, dim, index, source);
}
Tensor Tensor::index_fill(int64_t dim, const Tensor& index, Scalar value) const {
  return kiln::index_fill(*this, dim, index, value);
}
Tensor& Tensor::index_add_(int64_t dim, const Tensor& index, const Tensor& source, Scalar alpha) {
  return copy_(kiln::index_add(*this, dim, index, source, alpha));
}
Tensor& Tensor::index_copy_(int64_t dim, const Tensor& index, const Tensor& source) {
  return copy_(kiln::index_copy(*this, dim, index, source));
}
Tensor& Tensor::index_fill_(int64_t dim, const Tensor& index, Scalar value) {
  return copy_(kiln::index_fill(*this, dim, index, value));
}

}  // namespace kiln
