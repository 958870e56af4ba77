// Index arithmetic for kernels that walk strided dims from a flat index (host and device).
#pragma once

#include <cstdint>

#include "backend/cuda/host_device.h"

namespace kiln::backend::cuda {

// i % size, leaving i / size in i (i >= 0, size > 0); 32-bit division when both fit, which is
// several times cheaper than the 64-bit routine.
KILN_HOST_DEVICE KILN_CUDA_INLINE int64_t take_index(int64_t& i, int64_t size) {
  if (((i | size) >> 32) == 0) {
    const uint32_t a = static_cast<uint32_t>(i), b = static_cast<uint32_t>(size), q = a / b;
    i = q;
    return a - q * b;
  }
  const int64_t q = i / size, r = i - q * size;
  i = q;
  return r;
}

}  // namespace kiln::backend::cuda
