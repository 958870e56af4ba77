// Helpers shared by the tensor tests (test_tensor*.cpp): every dtype, and storage sharing.
#pragma once

#include "test_util.h"

namespace kiln::test {

// Every dtype, in ScalarType order.
inline constexpr ScalarType kAllDtypes[] = {kBool, kUInt8, kInt32, kInt64, kFloat16, kBFloat16, kFloat32, kFloat64};

// Whether a and b are views of the same storage.
inline bool shares_storage(const Tensor& a, const Tensor& b) { return a.storage().get() == b.storage().get(); }

}  // namespace kiln::test
