// dropout's rule, shared by the CPU and CUDA dropout kernels and by fused attention's dropout:
// which elements are kept (from the Philox stream) and what a kept element becomes.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/philox.h"

namespace kiln::dropout_math {

// Element n is kept when the top 24 bits of its Philox word (word n of the reserved counters,
// four to a counter) are at least this: a float32 uniform u = k / 2^24 kept when u >= float(p),
// the rule of rand() >= p, so the same generator state drops the same elements on every device.
KILN_HOST_DEVICE inline uint32_t keep_threshold(double p) {
  return static_cast<uint32_t>(std::ceil(static_cast<double>(static_cast<float>(p)) * 16777216.0));
}

KILN_HOST_DEVICE inline bool kept(uint32_t word, uint32_t threshold) { return (word >> 8) >= threshold; }

// What a kept element is multiplied by (0 when everything is dropped, not inf).
KILN_HOST_DEVICE inline double keep_scale(double p) { return p < 1.0 ? 1.0 / (1.0 - p) : 0.0; }

// x times the mask (1 or 0) times the scale, in C (float for the 16-bit types and float32,
// double for float64, with the scale rounded once to C), as PyTorch's dropout: a dropped element
// is x * 0, so a NaN or inf stays NaN (a hidden NaN would escape GradScaler's check) and a
// negative one is -0. The mask is chosen in C and always multiplied: a multiply under the
// condition is a branch to g++, which kept the CPU loops scalar.
template <class T, class C>
KILN_HOST_DEVICE inline T apply(T x, bool keep, C scale) {
  return static_cast<T>(static_cast<C>(x) * (keep ? C(1) : C(0)) * scale);
}

}  // namespace kiln::dropout_math
