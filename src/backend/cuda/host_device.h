// Code the CUDA kernels call that is plain C++ too. KILN_HOST_DEVICE (kiln/dtype.h) makes a
// function __host__ __device__ under nvcc and an ordinary one under a host compiler, so the CPU
// unit tests (tests/test_cuda_host_math.cpp) run the very functions the kernels run: the folds,
// the index arithmetic and the launch-shape choices. KILN_CUDA_INLINE keeps nvcc's
// __forceinline__ on the small ones.
#pragma once

#include "kiln/dtype.h"

#if defined(__CUDACC__)
#define KILN_CUDA_INLINE __forceinline__
#else
#define KILN_CUDA_INLINE inline
#endif
