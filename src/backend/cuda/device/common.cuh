// What every CUDA kernel file needs: the stream of a call, launch sizes (launch_shape.h) and
// checks, and the type the math runs in (visit_dtype.h).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "backend/cuda/check.h"
#include "backend/cuda/launch_shape.h"
#include "backend/dispatch.h"
#include "backend/visit_dtype.h"

namespace kiln::backend::cuda {

inline cudaStream_t stream_of(const KernelArgs& a) { return static_cast<cudaStream_t>(a.stream); }

// A launch's own errors (a bad configuration, no memory for its local arrays) right away, naming
// the kernel; a fault inside it surfaces at the next synchronizing call, as CUDA reports them.
#define KILN_CUDA_LAUNCHED(name)                                                                        \
  do {                                                                                                  \
    cudaError_t kiln_launch_status = cudaGetLastError();                                                \
    if (kiln_launch_status != cudaSuccess) [[unlikely]]                                                 \
      ::kiln::backend::cuda::raise_cuda_error(kiln_launch_status, std::string("launch of ") + (name), true); \
  } while (0)

// The grid-stride loop over [0, n).
#define KILN_GRID_STRIDE(i, n)                                                             \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(blockDim.x) * gridDim.x)

}  // namespace kiln::backend::cuda
