// exp, log and sqrt overloaded for float and double (host and device), so a template in
// compute_t<T> calls the single-precision function for float (never a double one by promotion).
// In device code sqrt and the division operator are correctly rounded (nvcc's default
// -prec-sqrt/-prec-div, no fast math).
#pragma once

#include <cmath>

#include "backend/cuda/host_device.h"

namespace kiln::backend::cuda {

KILN_HOST_DEVICE KILN_CUDA_INLINE float dev_exp(float x) { return ::expf(x); }
KILN_HOST_DEVICE KILN_CUDA_INLINE double dev_exp(double x) { return ::exp(x); }
KILN_HOST_DEVICE KILN_CUDA_INLINE float dev_log(float x) { return ::logf(x); }
KILN_HOST_DEVICE KILN_CUDA_INLINE double dev_log(double x) { return ::log(x); }
KILN_HOST_DEVICE KILN_CUDA_INLINE float dev_sqrt(float x) { return ::sqrtf(x); }
KILN_HOST_DEVICE KILN_CUDA_INLINE double dev_sqrt(double x) { return ::sqrt(x); }

}  // namespace kiln::backend::cuda
