// Views that share storage (view, reshape, permute, transpose, slice, select, narrow, diagonal,
// expand, squeeze, unsqueeze, flatten) and their gradients.
#include <algorithm>
#include <numeric>

#include "ops/op_util.h"

namespace kiln {
namespace {

using autograd::BackwardFn;

Tensor make_view_op(const char* name, const Tensor& x, Shape sizes, Shape strides, int64_t offset, BackwardFn bw) {
  Tensor v = make_view(x, std::move(sizes), std::move(strides), offset);
  if (autograd::needs_grad({&x})) autograd::record_view(name, x, v, std::move(bw));
  return v;
}

// Sizes with one -1 inferred from numel.
Shape infer_size(const Shape& shape, int64_t numel, const char* op) {
  Shape out = shape;
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      KILN_CHECK(infer < 0, op, "only one dimension can be -1, got ", shape);
      infer = static_cast<int64_t>(i);
    } else {
      KILN_CHECK(out[i] >= 0, op, "invalid size ", out[i], " in ", shape);
      known *= out[i];
    }
  }
  if (infer >= 0) {
    KILN_CHECK(known != 0 && numel % known == 0, op, "shape ", shape, " is invalid for an input of ", numel,
               " elements");
    out[infer] = numel / known;
  } else {
    KILN_CHECK(known == numel, op, "shape ", shape, " is invalid for an input of ", numel, " elements");
  }
  return out;
}

}  // namespace

std::optional<Shape> ops::view_strides(const Shape& old_sizes, const Shape& old_strides, const Shape& new_sizes) {
  Shape new_strides(new_sizes.size());
  if (old_sizes.empty()) {
    std::fill(new_strides.begin(), new_strides.end(), 1);
    return new_strides;
  }
  int64_t numel = shape_numel(old_sizes);
  if (numel == 0) {
    if (old_sizes == new_sizes) return old_strides;
    return contiguous_strides(new_sizes);
  }
  int64_t view_d = static_cast<int64_t>(new_sizes.size()) - 1;
  int64_t chunk_base_stride = old_strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t d = static_cast<int64_t>(old_sizes.size()) - 1; d >= 0; --d) {
    tensor_numel *= old_sizes[d];
    if (d == 0 || (old_sizes[d - 1] != 1 && old_strides[d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || new_sizes[view_d] == 1)) {
        new_strides[view_d] = view_numel * chunk_base_stride;
        view_numel *= new_sizes[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (d > 0) {
        chunk_base_stride = old_strides[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return new_strides;
}

namespace {

using ops::view_strides;

BackwardFn reshape_back(const Shape& shape) {
  return [shape](const Tensor& g) -> TensorList { return {g.reshape(shape)}; };
}

}  // namespace

Tensor Tensor::view(const Shape& shape) const {
  ops::check_defined(*this, "view");
  Shape sizes = infer_size(shape, numel(), "view");
  auto st = view_strides(this->shape(), strides(), sizes);
  KILN_CHECK(st.has_value(), "view", "a tensor of shape ", this->shape(), " and strides ", strides(),
             " cannot be viewed as ", sizes, " without a copy; use reshape()");
  return make_view_op("ViewBackward", *this, sizes, *st, storage_offset(), reshape_back(this->shape()));
}

Tensor Tensor::reshape(const Shape& shape) const {
  ops::check_defined(*this, "reshape");
  Shape sizes = infer_size(shape, numel(), "reshape");
  if (auto st = view_strides(this->shape(), strides(), sizes))
    return make_view_op("ViewBackward", *this, sizes, *st, storage_offset(), reshape_back(this->shape()));
  return contiguous().view(sizes);
}

Tensor Tensor::permute(const Shape& dims) const {
  ops::check_defined(*this, "permute");
  KILN_CHECK(static_cast<int64_t>(dims.size()) == dim(), "permute", "got ", dims.size(), " dims ", dims,
             " for a tensor of rank ", dim());
  Shape sizes(dims.size()), st(dims.size()), inverse(dims.size());
  std::vector<bool> seen(dims.size(), false);
  for (size_t i = 0; i < dims.size(); ++i) {
    int64_t d = wrap_dim(dims[i], dim(), "permute");
    KILN_CHECK(!seen[d], "permute", "dim ", d, " repeats in ", dims);
    seen[d] = true;
    sizes[i] = shape()[d];
    st[i] = strides()[d];
    inverse[d] = static_cast<int64_t>(i);
  }
  return make_view_op("PermuteBackward", *this, sizes, st, storage_offset(),
                      [inverse](const Tensor& g) -> TensorList { return {g.permute(inverse)}; });
}

Tensor Tensor::transpose(int64_t d0, int64_t d1) const {
  ops::check_defined(*this, "transpose");
  if (dim() == 0) {
    wrap_dim(d0, 0, "transpose");
    wrap_dim(d1, 0, "transpose");
    return make_view_op("ViewBackward", *this, {}, {}, storage_offset(), reshape_back({}));
  }
  Shape perm(static_cast<size_t>(dim()));
  std::iota(perm.begin(), perm.end(), 0);
  std::swap(perm[wrap_dim(d0, dim(), "transpose")], perm[wrap_dim(d1, dim(), "transpose")]);
  return permute(perm);
}

Tensor Tensor::t() const {
  ops::check_defined(*this, "t");
  KILN_CHECK(dim() <= 2, "t", "expects a tensor of rank <= 2, got shape ", shape(), "; use transpose()");
  return dim() < 2 ? *this : transpose(0, 1);
}

Tensor Tensor::slice(int64_t dim_, std::optional<int64_t> start, std::optional<int64_t> end, int64_t step) const {
  ops::check_defined(*this, "slice");
  KILN_CHECK(dim() > 0, "slice", "cannot slice a 0-d tensor");
  KILN_CHECK(step > 0, "slice", "step must be positive, got ", step);
  const int64_t d = wrap_dim(dim_, dim(), "slice");
  const int64_t n = shape()[d];
  auto clamp_index = [n](int64_t i) { return std::clamp<int64_t>(i < 0 ? i + n : i, 0, n); };
  int64_t s = start ? clamp_index(*start) : 0;
  int64_t e = end ? clamp_index(*end) : n;
  if (e < s) e = s;
  Shape sizes = shape(), st = strides();
  sizes[d] = e == s ? 0 : (e - s - 1) / step + 1;  // not e - s + step - 1: a huge step overflows it
  st[d] *= step;
  Shape in_shape = shape();
  return make_view_op("SliceBackward", *this, sizes, st, storage_offset() + s * strides()[d],
                      [in_shape, d, s, e, step](const Tensor& g) -> TensorList {
                        Tensor z = zeros(in_shape, g.options());
                        z.slice(d, s, e, step).copy_(g);
                        return {z};
                      });
}

Tensor Tensor::narrow(int64_t dim_, int64_t start, int64_t length) const {
  ops::check_defined(*this, "narrow");
  KILN_CHECK(dim() > 0, "narrow", "cannot narrow a 0-d tensor");
  const int64_t d = wrap_dim(dim_, dim(), "narrow");
  const int64_t n = shape()[d];
  KILN_CHECK(start >= -n && start <= n, "narrow", "start ", start, " is out of range for dim ", d, " of size ", n);
  if (start < 0) start += n;
  KILN_CHECK(length >= 0 && length <= n - start, "narrow", "start ", start, " + length ", length,
             " exceeds dim ", d, " of size ", n);
  return slice(d, start, start + length, 1);
}

Tensor Tensor::select(int64_t dim_, int64_t index) const {
  ops::check_defined(*this, "select");
  KILN_CHECK(dim() > 0, "select", "cannot select from a 0-d tensor");
  const int64_t d = wrap_dim(dim_, dim(), "select");
  const int64_t n = shape()[d];
  KILN_CHECK(index >= -n && index < n, "select", "index ", index, " is out of range for dim ", d, " of size ", n);
  if (index < 0) index += n;
  Shape sizes = shape(), st = strides();
  sizes.erase(sizes.begin() + d);
  st.erase(st.begin() + d);
  Shape in_shape = shape();
  return make_view_op("SelectBackward", *this, sizes, st, storage_offset() + index * strides()[d],
                      [in_shape, d, index](const Tensor& g) -> TensorList {
                        Tensor z = zeros(in_shape, g.options());
                        z.select(d, index).copy_(g);
                        return {z};
                      });
}

Tensor Tensor::diagonal(int64_t offset, int64_t dim1, int64_t dim2) const {
  ops::check_defined(*this, "diagonal");
  KILN_CHECK(dim() >= 2, "diagonal", "expected a tensor of at least 2 dims, got shape ", shape());
  const int64_t d1 = wrap_dim(dim1, dim(), "diagonal"), d2 = wrap_dim(dim2, dim(), "diagonal");
  KILN_CHECK(d1 != d2, "diagonal", "diagonal dimensions cannot be identical ", dim1, ", ", dim2);
  const int64_t n1 = shape()[d1], n2 = shape()[d2];
  const int64_t len = std::max<int64_t>(0, offset >= 0 ? std::min(n1, n2 - offset) : std::min(n1 + offset, n2));
  int64_t start = storage_offset();
  if (len > 0) start += offset >= 0 ? offset * strides()[d2] : -offset * strides()[d1];
  Shape sizes, st;
  for (int64_t d = 0; d < dim(); ++d)
    if (d != d1 && d != d2) sizes.push_back(shape()[d]), st.push_back(strides()[d]);
  sizes.push_back(len);
  st.push_back(strides()[d1] + strides()[d2]);
  return make_view_op("DiagonalBackward", *this, sizes, st, start,
                      [in_shape = shape(), offset, d1, d2](const Tensor& g) -> TensorList {
                        Tensor z = zeros(in_shape, g.options());
                        z.diagonal(offset, d1, d2).copy_(g);
                        return {z};
                      });
}

Tensor Tensor::expand(const Shape& shape_) const {
  ops::check_defined(*this, "expand");
  const int64_t n = static_cast<int64_t>(shape_.size());
  KILN_CHECK(n >= dim(), "expand", "the target shape ", shape_, " has fewer dims than the tensor's ", shape());
  Shape sizes(static_cast<size_t>(n)), st(static_cast<size_t>(n));
  for (int64_t i = n - 1; i >= 0; --i) {
    int64_t j = i - (n - dim());
    int64_t want = shape_[i];
    if (j < 0) {
      KILN_CHECK(want >= 0, "expand", "size -1 is not allowed for a new leading dim in ", shape_);
      sizes[i] = want;
      st[i] = 0;
      continue;
    }
    int64_t have = shape()[j];
    if (want == -1) want = have;
    KILN_CHECK(want >= 0, "expand", "negative size ", want, " in the target shape ", shape_);
    KILN_CHECK(want == have || have == 1, "expand", "cannot expand shape ", shape(), " to ", shape_,
               " (dim ", i, ": size ", have, " is not 1)");
    sizes[i] = want;
    st[i] = want == have ? strides()[j] : 0;
  }
  Shape in_shape = shape();
  return make_view_op("ExpandBackward", *this, sizes, st, storage_offset(),
                      [in_shape](const Tensor& g) -> TensorList { return {autograd::sum_to(g, in_shape)}; });
}

Tensor Tensor::squeeze() const {
  ops::check_defined(*this, "squeeze");
  Shape sizes, st;
  for (int64_t d = 0; d < dim(); ++d)
    if (shape()[d] != 1) {
      sizes.push_back(shape()[d]);
      st.push_back(strides()[d]);
    }
  return make_view_op("SqueezeBackward", *this, sizes, st, storage_offset(), reshape_back(shape()));
}

Tensor Tensor::squeeze(int64_t dim_) const {
  ops::check_defined(*this, "squeeze");
  if (dim() == 0) {
    wrap_dim(dim_, 0, "squeeze");
    return make_view_op("SqueezeBackward", *this, {}, {}, storage_offset(), reshape_back({}));
  }
  const int64_t d = wrap_dim(dim_, dim(), "squeeze");
  Shape sizes = shape(), st = strides();
  if (sizes[d] == 1) {
    sizes.erase(sizes.begin() + d);
    st.erase(st.begin() + d);
  }
  return make_view_op("SqueezeBackward", *this, sizes, st, storage_offset(), reshape_back(shape()));
}

Tensor Tensor::unsqueeze(int64_t dim_) const {
  ops::check_defined(*this, "unsqueeze");
  const int64_t d = wrap_dim(dim_, dim() + 1, "unsqueeze");
  Shape sizes = shape(), st = strides();
  int64_t new_stride = d < dim() ? sizes[d] * st[d] : 1;
  sizes.insert(sizes.begin() + d, 1);
  st.insert(st.begin() + d, new_stride);
  return make_view_op("UnsqueezeBackward", *this, sizes, st, storage_offset(), reshape_back(shape()));
}

Tensor Tensor::flatten(int64_t start_dim, int64_t end_dim) const {
  ops::check_defined(*this, "flatten");
  if (dim() == 0) {  // a 0-d tensor takes dims 0 and -1 only, as torch
    wrap_dim(start_dim, 0, "flatten");
    wrap_dim(end_dim, 0, "flatten");
    return reshape({1});
  }
  const int64_t s = wrap_dim(start_dim, dim(), "flatten"), e = wrap_dim(end_dim, dim(), "flatten");
  KILN_CHECK(s <= e, "flatten", "start_dim ", start_dim, " comes after end_dim ", end_dim);
  Shape sizes;
  for (int64_t d = 0; d < s; ++d) sizes.push_back(shape()[d]);
  int64_t m = 1;
  for (int64_t d = s; d <= e; ++d) m *= shape()[d];
  sizes.push_back(m);
  for (int64_t d = e + 1; d < dim(); ++d) sizes.push_back(shape()[d]);
  return reshape(sizes);
}

Tensor Tensor::detach() const {
  ops::check_defined(*this, "detach");
  return alias_detached(*this);
}

Tensor reshape(const Tensor& x, const Shape& shape) { return x.reshape(shape); }
Tensor permute(const Tensor& x, const Shape& dims) { return x.permute(dims); }
Tensor transpose(const Tensor& x, int64_t d0, int64_t d1) { return x.transpose(d0, d1); }
Tensor flatten(const Tensor& x, int64_t s, int64_t e) { return x.flatten(s, e); }
Tensor squeeze(const Tensor& x) { return x.squeeze(); }
Tensor squeeze(const Tensor& x, int64_t dim) { return x.squeeze(dim); }
Tensor unsqueeze(const Tensor& x, int64_t dim) { return x.unsqueeze(dim); }
Tensor diagonal(const Tensor& x, int64_t offset, int64_t dim1, int64_t dim2) { return x.diagonal(offset, dim1, dim2); }

}  // namespace kiln
