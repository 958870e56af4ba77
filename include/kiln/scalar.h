// kiln::Scalar: a number that is a bool, an integer or a float, as in PyTorch's scalar arguments.
#pragma once

#include <cstdint>
#include <type_traits>

#include "kiln/dtype.h"

namespace kiln {

namespace detail {
// A float as an int64 without undefined behaviour: truncated toward zero, NaN as 0, and values
// past int64's range clamped to it (a cast would be undefined: masked_fill(m, -INFINITY) makes one).
inline int64_t float_to_int64(double v) {
  if (!(v == v)) return 0;
  if (v >= 9223372036854775807.0) return INT64_MAX;  // 2^63, the first double past the range
  if (v < -9223372036854775808.0) return INT64_MIN;
  return static_cast<int64_t>(v);
}
}  // namespace detail

class Scalar {
 public:
  enum class Kind : int8_t { Bool, Int, Float };

  Scalar() : Scalar(int64_t{0}) {}
  template <class T, std::enable_if_t<std::is_same_v<T, bool>, int> = 0>
  Scalar(T v) : kind_(Kind::Bool), i_(v ? 1 : 0), d_(v ? 1.0 : 0.0) {}
  template <class T, std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>, int> = 0>
  Scalar(T v) : kind_(Kind::Int), i_(static_cast<int64_t>(v)), d_(static_cast<double>(v)) {}
  template <class T, std::enable_if_t<std::is_floating_point_v<T>, int> = 0>
  Scalar(T v) : kind_(Kind::Float), i_(detail::float_to_int64(static_cast<double>(v))), d_(static_cast<double>(v)) {}
  Scalar(Half v) : Scalar(static_cast<float>(v)) {}
  Scalar(BFloat16 v) : Scalar(static_cast<float>(v)) {}

  Kind kind() const { return kind_; }
  bool is_floating_point() const { return kind_ == Kind::Float; }
  bool is_integral() const { return kind_ == Kind::Int; }
  bool is_bool() const { return kind_ == Kind::Bool; }
  double to_double() const { return d_; }
  int64_t to_int() const { return i_; }
  // The dtype PyTorch gives a tensor made from this number alone.
  ScalarType natural_dtype() const {
    return kind_ == Kind::Bool ? kBool : kind_ == Kind::Int ? kInt64 : kDefaultFloat;
  }
  template <class T> T to() const {
    if constexpr (std::is_same_v<T, double>)
      return d_;
    else if constexpr (std::is_same_v<T, float> || std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>)
      return T(static_cast<float>(d_));
    else if constexpr (std::is_same_v<T, bool>)
      return kind_ == Kind::Float ? d_ != 0.0 : i_ != 0;
    else
      return static_cast<T>(i_);
  }

 private:
  Kind kind_;
  int64_t i_;
  double d_;
};

}  // namespace kiln
