// Shape (sizes and strides) and the broadcasting and dimension rules shared by all ops.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <ostream>
#include <vector>

namespace kiln {

// A list of sizes or strides. Its own type so that it prints as [2, 3] in error messages.
struct Shape : std::vector<int64_t> {
  using std::vector<int64_t>::vector;
  Shape() = default;
  Shape(const std::vector<int64_t>& v) : std::vector<int64_t>(v) {}
};

std::ostream& operator<<(std::ostream& os, const Shape& s);

// The most dims an op takes (reductions keep a 64-bit mask of them; PyTorch's limit is 64 too).
// Files read from disk are held to it at load time.
inline constexpr int64_t kMaxDims = 64;

// Product of sizes, with a check against overflow.
int64_t shape_numel(const Shape& s, const char* where = "shape");
// Row-major strides for a shape.
Shape contiguous_strides(const Shape& s);
// NHWC strides for a 4-D NCHW shape (row-major strides for other ranks).
Shape channels_last_strides(const Shape& s);
// Wraps a possibly negative dim into [0, rank); rank 0 accepts -1 and 0 (as PyTorch does).
int64_t wrap_dim(int64_t dim, int64_t rank, const char* where);
// NumPy broadcasting of two shapes.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* where);

}  // namespace kiln
