// The dtype switch every backend's kernels use, and the type their arithmetic runs in.
#pragma once

#include <type_traits>

#include "kiln/dtype.h"
#include "kiln/error.h"

namespace kiln::backend {

// The type elementwise math runs in: 16-bit floats widen to float, the rest stay.
template <class T>
using compute_t = std::conditional_t<std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>, float, T>;

// The type cumsum's running sum is kept in, as torch's CPU kernel (acc_type<T, false>): double for
// float32 and float64, float for 16-bit floats, int64 for integers and bool.
template <class T>
using cumsum_acc_t = std::conditional_t<std::is_floating_point_v<T>, double,
                                        std::conditional_t<std::is_integral_v<T>, int64_t, float>>;

// Calls f.template operator()<T>() with T the C++ type of dtype.
template <class F>
decltype(auto) visit_dtype(ScalarType dtype, const char* where, F&& f) {
  switch (dtype) {
    case kBool: return f.template operator()<bool>();
    case kUInt8: return f.template operator()<uint8_t>();
    case kInt32: return f.template operator()<int32_t>();
    case kInt64: return f.template operator()<int64_t>();
    case kFloat16: return f.template operator()<Half>();
    case kBFloat16: return f.template operator()<BFloat16>();
    case kFloat32: return f.template operator()<float>();
    case kFloat64: return f.template operator()<double>();
  }
  KILN_FAIL(where, "unsupported dtype");
}

// Only the floating types (for kernels that make no sense on integers).
template <class F>
decltype(auto) visit_float_dtype(ScalarType dtype, const char* where, F&& f) {
  switch (dtype) {
    case kFloat16: return f.template operator()<Half>();
    case kBFloat16: return f.template operator()<BFloat16>();
    case kFloat32: return f.template operator()<float>();
    case kFloat64: return f.template operator()<double>();
    default: KILN_FAIL(where, "expected a floating-point tensor, got ", dtype);
  }
}

}  // namespace kiln::backend
