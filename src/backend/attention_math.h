// Fused attention's dropout masks, shared by the CPU and CUDA kernels: dropout_math.h's rule applied
// to the scores, so the fused op drops exactly what softmax + dropout would with the same generator state.
#pragma once

#include <cmath>
#include <cstdint>

#include "backend/dropout_math.h"
#include "core/philox.h"

namespace kiln::attention {

// Keep flags of scores [n, n + count) (count <= 64) as bits of a mask: bit t for score n + t.
// Each Philox counter gives four consecutive scores.
KILN_HOST_DEVICE inline uint64_t keep_bits(uint64_t seed, uint64_t offset, uint64_t n, int count, uint32_t threshold) {
  uint64_t bits = 0;
  uint64_t c = n >> 2;
  int t = 0;
  int w = static_cast<int>(n & 3);
  while (t < count) {
    philox::U32x4 r = philox::philox(seed, offset + c);
    for (; w < 4 && t < count; ++w, ++t)
      if (dropout_math::kept(r.v[w], threshold)) bits |= uint64_t{1} << t;
    w = 0;
    ++c;
  }
  return bits;
}

}  // namespace kiln::attention
