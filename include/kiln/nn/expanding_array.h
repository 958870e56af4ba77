// ExpandingArray<D> (libtorch's name): one number for every spatial dim, or D numbers.
#pragma once

#include <cstddef>
#include <initializer_list>

#include "kiln/error.h"
#include "kiln/shape.h"

namespace kiln::nn {

// `3` means {3, 3}; `{3, 5}` means {3, 5}. Default-constructed it is empty, which options
// use for "not given" (a pooling stride that defaults to the kernel size).
template <size_t D>
class ExpandingArray {
 public:
  ExpandingArray() = default;
  ExpandingArray(int64_t value) : values_(D, value) {}
  ExpandingArray(std::initializer_list<int64_t> values) : values_(values) {
    KILN_CHECK(values.size() == D, "ExpandingArray", "expected ", D, " values, got ", Shape(values_));
  }
  ExpandingArray(const Shape& values) : values_(values) {
    KILN_CHECK(values.size() == D, "ExpandingArray", "expected ", D, " values, got ", values);
  }

  bool empty() const { return values_.empty(); }
  int64_t operator[](size_t i) const { return values_.at(i); }
  const Shape& shape() const { return values_; }
  operator const Shape&() const { return values_; }
  friend bool operator==(const ExpandingArray& a, const ExpandingArray& b) { return a.values_ == b.values_; }

 private:
  Shape values_;
};

}  // namespace kiln::nn
