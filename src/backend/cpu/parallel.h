// parallel_for over the one OpenMP pool (and, from visit_dtype.h, the dtype switch).
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "backend/visit_dtype.h"

namespace kiln::backend::cpu {

// How many chunks the loops below split [0, n) into: one per thread while each has more than
// `grain` items, and one where there is a single thread or we are already inside a parallel region.
inline int64_t parallel_chunks(int64_t n, int64_t grain) {
  const int threads = omp_get_max_threads();
  grain = std::max<int64_t>(grain, 1);  // a grain of 0 or less: one item per chunk at least
  if (n <= grain || threads <= 1 || omp_in_parallel()) return 1;
  return std::min<int64_t>(threads, (n + grain - 1) / grain);
}

// Calls f(begin, end, chunk) on chunk `chunk` of `chunks` equal chunks of [0, n), in parallel when
// there is more than one.
template <class F>
void for_chunks(int64_t n, int64_t chunks, const F& f) {
  if (chunks <= 1) {
    f(int64_t{0}, n, int64_t{0});
    return;
  }
#pragma omp parallel num_threads(static_cast<int>(chunks))
  {
    const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
    for (int64_t c = t; c < chunks; c += nt) {
      const int64_t b = n * c / chunks, e = n * (c + 1) / chunks;
      if (b < e) f(b, e, c);
    }
  }
}

// Calls f(begin, end) on chunks of [0, n); in parallel when there are more than `grain` items
// per thread and we are not already inside a parallel region.
template <class F>
void parallel_for(int64_t n, int64_t grain, const F& f) {
  if (n <= 0) return;
  for_chunks(n, parallel_chunks(n, grain), [&](int64_t b, int64_t e, int64_t) { f(b, e); });
}

// `width` sums over [0, n), split as parallel_for splits it: body(begin, end, partial) adds items
// [begin, end) into its chunk's `width` doubles (zero to start). The chunks' partials are added in
// chunk order, not in the order the threads finish: the same bits on every run with the same
// number of threads. Each chunk's partials are allocated by the thread that sums into them (in one
// shared array, BM_BatchNormRelu's channels-last statistics took 1.5 times as long).
template <class F>
std::vector<double> parallel_sums(int64_t n, int64_t grain, size_t width, const F& body) {
  std::vector<double> total(width, 0.0);
  if (n <= 0) return total;
  const int64_t chunks = parallel_chunks(n, grain);
  if (chunks == 1) {
    body(int64_t{0}, n, total.data());
    return total;
  }
  std::vector<std::vector<double>> parts(static_cast<size_t>(chunks));
  for_chunks(n, chunks, [&](int64_t b, int64_t e, int64_t c) {
    std::vector<double>& p = parts[static_cast<size_t>(c)];
    p.assign(width, 0.0);
    body(b, e, p.data());
  });
  for (const std::vector<double>& p : parts)
    for (size_t i = 0; i < p.size(); ++i) total[i] += p[i];
  return total;
}

}  // namespace kiln::backend::cpu
