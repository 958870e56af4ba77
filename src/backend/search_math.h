// searchsorted's binary search, shared by the CPU and CUDA kernels. The comparisons are torch's
// (aten's cus_lower_bound / cus_upper_bound), so that both devices give torch's position for every
// input, NaNs included: a NaN value compares false with everything and goes past every element.
#pragma once

#include <cstdint>

#include "kiln/dtype.h"

namespace kiln::backend::search {

// The first i in [0, m) with row[i] >= v (row[i] > v when right), m if none, for a sorted row.
// C is the type the elements are compared in (float for 16-bit floats).
template <class C, class T>
KILN_HOST_DEVICE inline int64_t bound(const T* row, int64_t m, T value, bool right) {
  const C v = static_cast<C>(value);
  int64_t lo = 0, hi = m;
  while (lo < hi) {
    const int64_t mid = lo + ((hi - lo) >> 1);
    const C e = static_cast<C>(row[mid]);
    if (right ? !(e > v) : !(e >= v)) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

}  // namespace kiln::backend::search
