// parallel_for over the one OpenMP pool (and, from visit_dtype.h, the dtype switch).
#pragma once

#include <omp.h>

#include <cstdint>

#include "backend/visit_dtype.h"

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

}  // namespace kiln::backend::cpu
