// What every CUDA kernel file needs: the stream of a call, launch sizes and checks, and
// loads and stores that widen 16-bit floats to the type the math runs in.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "backend/cuda/check.h"
#include "backend/dispatch.h"
#include "backend/visit_dtype.h"

namespace kiln::backend::cuda {

inline cudaStream_t stream_of(const KernelArgs& a) { return static_cast<cudaStream_t>(a.stream); }

inline constexpr int kThreads = 256;

// Blocks for a grid-stride loop over n items: enough to fill the device, never more than needed.
inline unsigned blocks_for(int64_t n, int threads = kThreads) {
  const int64_t b = (n + threads - 1) / threads;
  return static_cast<unsigned>(std::clamp<int64_t>(b, 1, int64_t{1} << 20));
}

// A launch's own errors (a bad configuration) right away, naming the kernel; a fault inside it
// surfaces at the next synchronizing call, as CUDA reports them.
#define KILN_CUDA_LAUNCHED(name)                                                                   \
  do {                                                                                             \
    cudaError_t kiln_launch_status = cudaGetLastError();                                           \
    if (kiln_launch_status != cudaSuccess) [[unlikely]]                                            \
      KILN_FAIL("cuda", "launch of ", name, " failed: ", cudaGetErrorName(kiln_launch_status), " (", \
                cudaGetErrorString(kiln_launch_status), ")");                                     \
  } while (0)

// The grid-stride loop over [0, n).
#define KILN_GRID_STRIDE(i, n)                                                             \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(blockDim.x) * gridDim.x)

}  // namespace kiln::backend::cuda
