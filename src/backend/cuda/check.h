// KILN_CUDA_CHECK: every CUDA runtime call is checked and a failure names the call.
#pragma once

#include <cuda_runtime.h>

#include "kiln/error.h"

#define KILN_CUDA_CHECK(expr)                                                                     \
  do {                                                                                            \
    cudaError_t kiln_cuda_status = (expr);                                                        \
    if (kiln_cuda_status != cudaSuccess) [[unlikely]]                                             \
      KILN_FAIL("cuda", #expr, " failed: ", cudaGetErrorName(kiln_cuda_status), " (",             \
                cudaGetErrorString(kiln_cuda_status), ")");                                      \
  } while (0)
