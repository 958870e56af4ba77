// Tensor metadata and the internal helpers that make tensors and views.
#include <algorithm>
#include <vector>

#include "kiln/autograd.h"
#include "core/device_runtime.h"
#include "core/tensor_util.h"

namespace kiln {

namespace {
Tensor empty_strided(const Shape& shape, const Shape& strides, ScalarType dtype, Device device, bool pinned) {
  auto impl = std::make_shared<TensorImpl>();
  impl->numel = shape_numel(shape, "empty");
  int64_t span = 0;  // elements the storage must hold
  if (impl->numel > 0) {
    span = 1;
    for (size_t i = 0; i < shape.size(); ++i) {
      KILN_CHECK(strides[i] >= 0, "empty_strided", "negative stride in ", strides);
      int64_t reach = 0;
      bool overflow = __builtin_mul_overflow(shape[i] - 1, strides[i], &reach) || __builtin_add_overflow(span, reach, &span);
      KILN_CHECK(!overflow, "empty_strided", "shape ", shape, " with strides ", strides, " spans too many elements");
    }
  }
  int64_t nbytes = 0;
  KILN_CHECK(!__builtin_mul_overflow(span, static_cast<int64_t>(element_size(dtype)), &nbytes), "empty",
             "shape ", shape, " of ", dtype, " needs more bytes than can be addressed");
  impl->storage = pinned ? std::make_shared<Storage>(static_cast<size_t>(nbytes), Storage::Pinned{})
                         : std::make_shared<Storage>(static_cast<size_t>(nbytes), device);
  impl->sizes = shape;
  impl->strides = strides;
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}
}  // namespace

Tensor make_empty_strided(const Shape& shape, const Shape& strides, ScalarType dtype, Device device) {
  return empty_strided(shape, strides, dtype, device, false);
}

Tensor make_empty_pinned(const Shape& shape, ScalarType dtype) {
  shape_numel(shape, "empty");
  return empty_strided(shape, contiguous_strides(shape), dtype, Device::cpu(), true);
}

Tensor make_empty(const Shape& shape, ScalarType dtype, Device device) {
  shape_numel(shape, "empty");  // checks sizes and overflow before strides are computed from them
  return make_empty_strided(shape, contiguous_strides(shape), dtype, device);
}

bool is_non_overlapping_and_dense(const Tensor& t) {
  if (t.is_contiguous()) return true;
  std::vector<int64_t> dims;
  for (int64_t d = 0; d < t.dim(); ++d)
    if (t.shape()[d] != 1) dims.push_back(d);
  std::sort(dims.begin(), dims.end(), [&](int64_t a, int64_t b) { return t.strides()[a] < t.strides()[b]; });
  int64_t expected = 1;
  for (int64_t d : dims) {
    if (t.strides()[d] != expected) return false;
    expected *= t.shape()[d];
  }
  return true;
}

Shape strides_like(const Tensor& like, const Shape& shape) {
  if (!like.defined() || like.shape() != shape || like.is_contiguous() || !is_non_overlapping_and_dense(like))
    return contiguous_strides(shape);
  return like.strides();  // dense in another dim order
}

Tensor make_empty_like(const Tensor& like, const Shape& shape, ScalarType dtype, Device device) {
  shape_numel(shape, "empty");
  return make_empty_strided(shape, strides_like(like, shape), dtype, device);
}

Tensor make_view(const Tensor& base, Shape sizes, Shape strides, int64_t offset) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = base.storage();
  impl->numel = shape_numel(sizes, "view");
  impl->sizes = std::move(sizes);
  impl->strides = std::move(strides);
  impl->offset = offset;
  impl->dtype = base.dtype();
  impl->is_view = true;
  impl->view_history = ~uint64_t{0};  // no history attached yet (autograd's attach sets it)
  impl->view_no_grad = !autograd::is_grad_enabled();
  impl->view_base = base.impl()->view_base ? base.impl()->view_base : base.impl_ptr();
  return Tensor(std::move(impl));
}

Tensor alias_detached(const Tensor& t) {
  auto impl = std::make_shared<TensorImpl>();
  const TensorImpl& src = *t.impl();
  impl->storage = src.storage;
  impl->sizes = src.sizes;
  impl->strides = src.strides;
  impl->offset = src.offset;
  impl->numel = src.numel;
  impl->dtype = src.dtype;
  // A detached alias starts a history of its own: it is not a view for autograd's purposes.
  return Tensor(std::move(impl));
}

bool compute_contiguous(const Shape& sizes, const Shape& strides) {
  // No elements: contiguous whatever the strides (as torch), wherever the empty dim is.
  if (std::find(sizes.begin(), sizes.end(), 0) != sizes.end()) return true;
  int64_t expected = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    if (sizes[i] == 1) continue;
    if (strides[i] != expected) return false;
    expected *= sizes[i];
  }
  return true;
}

std::pair<int64_t, int64_t> element_span(const Tensor& t) {
  if (t.numel() == 0) return {0, 0};
  int64_t lo = 0, hi = 0;
  for (int64_t d = 0; d < t.dim(); ++d) {
    int64_t reach = (t.shape()[d] - 1) * t.strides()[d];
    (reach < 0 ? lo : hi) += reach;
  }
  return {lo, hi + 1};
}

Tensor host_mirror(const Tensor& t) {
  auto [lo, hi] = element_span(t);
  Tensor host = make_empty({hi - lo}, t.dtype(), Device::cpu());
  size_t es = t.element_size();
  copy_bytes(host.data_ptr(), Device::cpu(), static_cast<char*>(t.data_ptr()) + lo * static_cast<int64_t>(es),
             t.device(), static_cast<size_t>(hi - lo) * es);
  return make_view(host, t.shape(), t.strides(), -lo);
}

void upload_mirror(const Tensor& mirror, const Tensor& t) {
  auto [lo, hi] = element_span(t);
  size_t es = t.element_size();
  copy_bytes(static_cast<char*>(t.data_ptr()) + lo * static_cast<int64_t>(es), t.device(),
             static_cast<char*>(mirror.data_ptr()) + lo * static_cast<int64_t>(es), Device::cpu(),
             static_cast<size_t>(hi - lo) * es);
}

// wrap_dim takes dim 0 (and -1) of a 0-d tensor, as reductions over it do; a size has none.
int64_t Tensor::size(int64_t d) const {
  KILN_CHECK(dim() > 0, "size", "dim ", d, " asked of a 0-d tensor, which has no dims");
  return impl_->sizes[wrap_dim(d, dim(), "size")];
}
int64_t Tensor::stride(int64_t d) const {
  KILN_CHECK(dim() > 0, "stride", "dim ", d, " asked of a 0-d tensor, which has no dims");
  return impl_->strides[wrap_dim(d, dim(), "stride")];
}
bool Tensor::is_contiguous() const { return compute_contiguous(impl_->sizes, impl_->strides); }
bool Tensor::is_contiguous(MemoryFormat format) const {
  if (format == MemoryFormat::Contiguous || dim() != 4) return is_contiguous();
  // Size-1 dims may have any stride, as in PyTorch.
  const Shape want = channels_last_strides(impl_->sizes);
  for (int64_t d = 0; d < 4; ++d)
    if (impl_->sizes[d] != 1 && impl_->strides[d] != want[d]) return false;
  return true;
}

namespace detail {
void check_data_ptr(const Tensor& t, ScalarType want) {
  KILN_CHECK(t.defined(), "data_ptr", "the tensor is undefined");
  KILN_CHECK(t.dtype() == want, "data_ptr", "asked for ", want, " data of a ", t.dtype(), " tensor");
}
}  // namespace detail

}  // namespace kiln
