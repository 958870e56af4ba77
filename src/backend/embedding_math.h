// Embedding backward's order of summation, the same on every device (backend/cpu/embedding.cpp,
// backend/cuda/index.cu), so that both give the same bits: a table row's gradient is the sum of
// the gradient rows at its positions, in increasing position order, in the compute type; a row
// with more than kEmbeddingSegment positions is summed in segments of kEmbeddingSegment positions
// (each from 0), and the segments' sums are added in order. On a GPU the segments of a frequent
// row are summed in parallel: token_type_ids put all 8192 positions of a batch of 64 x 128 on one
// or two rows, which one group of threads would otherwise walk alone, one load after another.
#pragma once

#include <cstdint>

#include "backend/dispatch.h"

namespace kiln::emb {

inline constexpr int64_t kEmbeddingSegment = 64;

// The segments a row with `count` positions is summed in: 0 when it is summed directly.
KILN_HOST_DEVICE inline int64_t segments(int64_t count) {
  return count > kEmbeddingSegment ? (count + kEmbeddingSegment - 1) / kEmbeddingSegment : 0;
}

// At least the segments of any rows whose counts add up to m: each count c > K has
// ceil(c / K) < c / K + 1 < 2c / K segments, so fewer than 2m / K in all.
KILN_HOST_DEVICE inline int64_t segment_bound(int64_t m) { return 2 * m / kEmbeddingSegment; }

// The row that segment q belongs to, given first[r] = the first segment of row r (an exclusive
// prefix sum of segments(), first[num] the total; q < first[num]): the last r with first[r] <= q.
KILN_HOST_DEVICE inline int64_t row_of_segment(const int64_t* first, int64_t num, int64_t q) {
  int64_t lo = 0, hi = num;  // first[lo] <= q < first[hi]
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (first[mid] <= q) lo = mid;
    else hi = mid;
  }
  return lo;
}

}  // namespace kiln::emb
