// Fused attention's dropout rule (which scores are kept), shared by the CPU and CUDA kernels.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/philox.h"

namespace kiln::attention {

// Score n is kept when the top 24 bits of its Philox word are at least this. It is the rule of
// dropout(): float32 uniform u = k / 2^24 is kept when u >= float(p), i.e. k >= float(p) * 2^24,
// so the fused op drops exactly what softmax + dropout would with the same generator state.
KILN_HOST_DEVICE inline uint32_t keep_threshold(double p) {
  return static_cast<uint32_t>(std::ceil(static_cast<double>(static_cast<float>(p)) * 16777216.0));
}

// What a kept probability is multiplied by (0 when everything is dropped, not inf).
KILN_HOST_DEVICE inline double keep_scale(double p) { return p < 1.0 ? 1.0 / (1.0 - p) : 0.0; }

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
      if ((r.v[w] >> 8) >= threshold) bits |= uint64_t{1} << t;
    w = 0;
    ++c;
  }
  return bits;
}

}  // namespace kiln::attention
