// exp, log and sqrt overloaded for float and double in device code, so a template in compute_t<T>
// calls the single-precision function for float (never a double one by promotion). sqrt and the
// division operator are correctly rounded (nvcc's default -prec-sqrt/-prec-div, no fast math).
#pragma once

#include <cuda_runtime.h>

namespace kiln::backend::cuda {

__device__ __forceinline__ float dev_exp(float x) { return expf(x); }
__device__ __forceinline__ double dev_exp(double x) { return exp(x); }
__device__ __forceinline__ float dev_log(float x) { return logf(x); }
__device__ __forceinline__ double dev_log(double x) { return log(x); }
__device__ __forceinline__ float dev_sqrt(float x) { return sqrtf(x); }
__device__ __forceinline__ double dev_sqrt(double x) { return sqrt(x); }

}  // namespace kiln::backend::cuda
