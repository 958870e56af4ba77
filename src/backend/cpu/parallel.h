// parallel_for over the one OpenMP pool, and the dtype switch that kernels use.
#pragma once

#include <omp.h>

#include <cstdint>

#include "kiln/dtype.h"
#include "kiln/error.h"

namespace kiln::backend::cpu {

// Calls f(begin, end) on chunks of [0, n); in parallel when there are more than `grain` items
// per thread and we are not already inside a parallel region.
template <class F>
void parallel_for(int64_t n, int64_t grain, const F& f) {
  if (n <= 0) return;
  int threads = omp_get_max_threads();
  if (threads <= 1 || n <= grain || omp_in_parallel()) {
    f(int64_t{0}, n);
    return;
  }
  int64_t chunks = std::min<int64_t>(threads, (n + grain - 1) / grain);
#pragma omp parallel num_threads(static_cast<int>(chunks))
  {
    int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
    int64_t b = n * t / nt, e = n * (t + 1) / nt;
    if (b < e) f(b, e);
  }
}

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

}  // namespace kiln::backend::cpu
