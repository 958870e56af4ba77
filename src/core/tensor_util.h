// Internal helpers for making tensors and views, used by ops, autograd and backends.
#pragma once

#include <memory>

#include "kiln/tensor.h"

namespace kiln {

// A new tensor over fresh storage on `device`; strides default to row-major.
Tensor make_empty(const Shape& shape, ScalarType dtype, Device device);
Tensor make_empty_strided(const Shape& shape, const Shape& strides, ScalarType dtype, Device device);
// A contiguous CPU tensor in page-locked memory (needs a CUDA device; see Tensor::pin_memory).
Tensor make_empty_pinned(const Shape& shape, ScalarType dtype);
// Whether t's elements exactly fill a block of memory, each once (any dim order).
bool is_non_overlapping_and_dense(const Tensor& t);
// A new tensor of `shape` laid out like `like` when `like` has that shape and is dense in another
// dim order (channels-last, transposed), otherwise row-major: elementwise results, clone and
// *_like keep their input's layout, as in PyTorch.
Tensor make_empty_like(const Tensor& like, const Shape& shape, ScalarType dtype, Device device);
// The strides make_empty_like would choose.
Shape strides_like(const Tensor& like, const Shape& shape);

// A view of `base`'s storage with the given geometry; no autograd (ops record that).
Tensor make_view(const Tensor& base, Shape sizes, Shape strides, int64_t offset);
// A handle sharing data and version counter with t but carrying no autograd history.
Tensor alias_detached(const Tensor& t);
// Whether sizes/strides describe a row-major layout (size-1 dims are ignored).
bool compute_contiguous(const Shape& sizes, const Shape& strides);
// Element offsets (relative to t's offset) of t's lowest and one-past-highest element.
std::pair<int64_t, int64_t> element_span(const Tensor& t);
// A CPU view over a host copy of the storage range a device tensor covers, same strides.
Tensor host_mirror(const Tensor& t);
// Writes a host mirror made by host_mirror back over the device tensor's storage range.
void upload_mirror(const Tensor& mirror, const Tensor& t);

}  // namespace kiln
