// Philox4x32-10 and the number transforms built on it; shared by the CPU and CUDA kernels.
#pragma once

#include <cmath>
#include <cstdint>

#include "kiln/dtype.h"

namespace kiln::philox {

struct U32x4 {
  uint32_t v[4];
};

KILN_HOST_DEVICE inline uint32_t mulhilo(uint32_t a, uint32_t b, uint32_t* hi) {
  uint64_t p = static_cast<uint64_t>(a) * b;
  *hi = static_cast<uint32_t>(p >> 32);
  return static_cast<uint32_t>(p);
}

// Ten rounds of Philox4x32 on counter (ctr, 0) with key seed; deterministic everywhere.
KILN_HOST_DEVICE inline U32x4 philox(uint64_t seed, uint64_t ctr) {
  uint32_t c0 = static_cast<uint32_t>(ctr), c1 = static_cast<uint32_t>(ctr >> 32), c2 = 0, c3 = 0;
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  for (int r = 0; r < 10; ++r) {
    uint32_t hi0, hi1;
    uint32_t lo0 = mulhilo(0xD2511F53u, c0, &hi0);
    uint32_t lo1 = mulhilo(0xCD9E8D57u, c2, &hi1);
    uint32_t n0 = hi1 ^ c1 ^ k0, n1 = lo1, n2 = hi0 ^ c3 ^ k1, n3 = lo0;
    c0 = n0; c1 = n1; c2 = n2; c3 = n3;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return {{c0, c1, c2, c3}};
}

// Element i of a draw that started at counter `offset` uses word i % 4 of counter offset + i / 4
// (the kernels compute each counter once and use its four words).

// Uniform in [0, 1) with 24 random bits (exact in float32).
KILN_HOST_DEVICE inline double uniform01(uint32_t w) { return (w >> 8) * (1.0 / 16777216.0); }

// Uniform in [0, 1) with `bits` (1 to 24) random bits: with no more bits than a float type's
// significand holds, rounding to that type cannot reach 1.
KILN_HOST_DEVICE inline double uniform01(uint32_t w, int bits) {
  return static_cast<double>(w >> (32 - bits)) / static_cast<double>(1u << bits);
}

// Two standard normals by Box-Muller from a pair of words: z0 = r cos(theta), z1 = r sin(theta).
KILN_HOST_DEVICE inline void box_muller(uint32_t w1, uint32_t w2, double* z0, double* z1) {
  double u1 = ((w1 >> 8) + 1.0) * (1.0 / 16777217.0);  // (0, 1]
  double u2 = uniform01(w2);
  double radius = std::sqrt(-2.0 * std::log(u1));
  double theta = 6.283185307179586 * u2;
  *z0 = radius * std::cos(theta);
  *z1 = radius * std::sin(theta);
}

}  // namespace kiln::philox
