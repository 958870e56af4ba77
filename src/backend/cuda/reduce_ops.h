// The binary operations the warp, block and group reductions (device/block_reduce.cuh) combine
// with, host and device.
#pragma once

#include "backend/cuda/host_device.h"

namespace kiln::backend::cuda {

struct SumOp {
  template <class T>
  KILN_HOST_DEVICE KILN_CUDA_INLINE T operator()(T a, T b) const { return a + b; }
};
// NaN wins, as in the CPU's amax.
struct MaxOp {
  template <class T>
  KILN_HOST_DEVICE KILN_CUDA_INLINE T operator()(T a, T b) const { return (a != a || a > b) ? a : b; }
};
struct MinOp {
  template <class T>
  KILN_HOST_DEVICE KILN_CUDA_INLINE T operator()(T a, T b) const { return (a != a || a < b) ? a : b; }
};

}  // namespace kiln::backend::cuda
