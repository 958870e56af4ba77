// KILN_CUDA_CHECK: every CUDA runtime call is checked and a failure names the call.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "kiln/error.h"

namespace kiln::backend::cuda {

// A CUDA, cuBLAS or cuDNN failure, `msg` already worded: an OutOfMemoryError where the library ran
// out of memory (caught as one, as the allocator's), a kiln::Error otherwise.
[[noreturn]] inline void throw_failure(const std::string& msg, bool out_of_memory) {
  if (out_of_memory) throw OutOfMemoryError(msg);
  throw Error(msg);
}

// Throws "[cuda] <what> failed: cudaErrorX (its text)": a kiln::OutOfMemoryError where the driver
// ran out of memory (a kernel's local memory at its launch, a library's own allocation), so that
// it is caught as one, as the allocator's; a kiln::Error otherwise. `launch`: the call was a
// kernel launch, and an error that a faulting kernel leaves behind is said to be an earlier one's.
// The thread's last error is cleared first: left set, the next launch's check would report this
// failure again, for a kernel that was queued and runs (a retried op applied twice).
[[noreturn]] inline void raise_cuda_error(cudaError_t status, const std::string& what, bool launch = false) {
  cudaGetLastError();
  const bool earlier = launch && (status == cudaErrorIllegalAddress || status == cudaErrorLaunchFailure ||
                                  status == cudaErrorMisalignedAddress || status == cudaErrorIllegalInstruction ||
                                  status == cudaErrorHardwareStackError || status == cudaErrorAssert);
  std::string msg = "[cuda] " + what + " failed: " + cudaGetErrorName(status) + " (" + cudaGetErrorString(status) + ")";
  if (earlier) msg += ": a fault of an earlier kernel, reported at this launch";
  throw_failure(msg, status == cudaErrorMemoryAllocation);
}

}  // namespace kiln::backend::cuda

#define KILN_CUDA_CHECK(expr)                                                   \
  do {                                                                          \
    cudaError_t kiln_cuda_status = (expr);                                      \
    if (kiln_cuda_status != cudaSuccess) [[unlikely]]                           \
      ::kiln::backend::cuda::raise_cuda_error(kiln_cuda_status, #expr);         \
  } while (0)
