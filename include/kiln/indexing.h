// Tensor indexing as libtorch's (torch::indexing): x.index({Slice(1, None), 0, idx}) is Python's
// x[1:, 0, idx], and x.index_put_({mask}, 0) is x[mask] = 0. An index list holds
//   - an integer: that position (negative from the end), the dim removed;
//   - Slice(start, stop, step): a range (step > 0; out-of-range bounds clamped, as Python's);
//   - None: a new dim of size 1; Ellipsis (or "..."): as many full slices as the other entries
//     leave dims; true / false: a new dim of size 1 / 0;
//   - a tensor ("advanced" indexing): integer positions (int64 or int32; negative from the end; a
//     0-d one is an integer, read on the host), or a bool mask over as many dims as it has (of
//     their sizes), standing for the positions of its true elements. The index tensors broadcast
//     together; the result has their shape where the indexed dims were when those dims are next
//     to each other, else at the front (numpy's and torch's rule). Index tensors may be on the
//     CPU for a tensor on a GPU.
// Integers, slices, None and Ellipsis alone give a view; tensors give a copy (with a gradient).
// index_put_ writes only the elements it names where no gradient is recorded and the indexed dims
// merge into one view of x; otherwise (autograd, or dims that do not merge) it copies x's indexed
// view, updated, back into it (without accumulate through index_copy, which reads the positions
// on the host). x.index_put_({mask}, value) with one value is a masked_fill_. A bool mask's
// positions are counted on the host (a wait on a GPU), as torch's.
#pragma once

#include <cstdint>
#include <optional>
#include <type_traits>
#include <vector>

#include "kiln/scalar.h"
#include "kiln/tensor.h"

namespace kiln::indexing {

inline constexpr std::nullopt_t None = std::nullopt;

struct EllipsisIndexType {
  constexpr EllipsisIndexType() = default;
};
inline constexpr EllipsisIndexType Ellipsis{};

// Python's start:stop:step; an absent start or stop is the dim's start or end, an absent step 1.
class Slice {
 public:
  Slice(std::optional<int64_t> start = std::nullopt, std::optional<int64_t> stop = std::nullopt,
        std::optional<int64_t> step = std::nullopt)
      : start_(start), stop_(stop), step_(step.value_or(1)) {}
  std::optional<int64_t> start() const { return start_; }
  std::optional<int64_t> stop() const { return stop_; }
  int64_t step() const { return step_; }

 private:
  std::optional<int64_t> start_, stop_;
  int64_t step_;
};

class TensorIndex {
 public:
  enum class Kind { None, Ellipsis, Integer, Boolean, Slice, Tensor };

  TensorIndex(std::nullopt_t) : kind_(Kind::None) {}
  TensorIndex(EllipsisIndexType) : kind_(Kind::Ellipsis) {}
  // "..." only (anything else is an error when the index is used).
  TensorIndex(const char* text);
  template <class T, std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>, int> = 0>
  TensorIndex(T i) : kind_(Kind::Integer), integer_(static_cast<int64_t>(i)) {}
  template <class T, std::enable_if_t<std::is_same_v<T, bool>, int> = 0>
  TensorIndex(T b) : kind_(Kind::Boolean), boolean_(b) {}
  TensorIndex(Slice s) : kind_(Kind::Slice), slice_(s) {}
  TensorIndex(Tensor t) : kind_(Kind::Tensor), tensor_(std::move(t)) {}

  Kind kind() const { return kind_; }
  int64_t integer() const { return integer_; }
  bool boolean() const { return boolean_; }
  const Slice& slice() const { return slice_; }
  const Tensor& tensor() const { return tensor_; }

 private:
  Kind kind_;
  int64_t integer_ = 0;
  bool boolean_ = false;
  Slice slice_;
  Tensor tensor_;
};

}  // namespace kiln::indexing

namespace kiln {

// x[indices] (Tensor::index).
Tensor index(const Tensor& x, const std::vector<indexing::TensorIndex>& indices);
// A copy of x with x[indices] set to values (or, with accumulate, values added to them: a position
// named twice gets both), values broadcast to x[indices]'s shape (leading dims of size 1 dropped
// first, as torch's) and converted to x's dtype; a
// position named twice without accumulate takes one of its values (torch leaves which undefined).
Tensor index_put(const Tensor& x, const std::vector<indexing::TensorIndex>& indices, const Tensor& values,
                 bool accumulate = false);

}  // namespace kiln
