// Per-device library state of the CUDA backend: the cuBLASLt handle and its workspaces, and the
// checks that name a failing library call.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <shared_mutex>
#include <string>
#include <utility>

#include "backend/cuda/check.h"

namespace kiln::backend::cuda {

// "[cublas] <call> failed: CUBLAS_STATUS_X (its text)", through throw_failure.
[[noreturn]] inline void cublas_fail(const char* call, cublasStatus_t status) {
  throw_failure(std::string("[cublas] ") + call + " failed: " + cublasLtGetStatusName(status) + " (" +
                    cublasLtGetStatusString(status) + ")",
                status == CUBLAS_STATUS_ALLOC_FAILED);
}

}  // namespace kiln::backend::cuda

#define KILN_CUBLAS_CHECK(expr)                                                \
  do {                                                                         \
    cublasStatus_t kiln_cublas_status = (expr);                                \
    if (kiln_cublas_status != CUBLAS_STATUS_SUCCESS) [[unlikely]]              \
      ::kiln::backend::cuda::cublas_fail(#expr, kiln_cublas_status);           \
  } while (0)

namespace kiln::backend::cuda {

// The device's cuBLASLt handle, created on first use (handles are thread-safe to share).
cublasLtHandle_t blaslt_handle(int device);

// cuBLASLt's workspace for work queued on `stream` of `device`: one buffer per stream (two
// streams must not share one), from the device's allocator, kept until empty_cache. The lease
// keeps release_blaslt_workspaces from freeing it before the call that uses it is queued.
struct BlasltWorkspace {
  void* ptr = nullptr;
  size_t bytes = 0;
  std::shared_lock<std::shared_mutex> lease;
};
BlasltWorkspace blaslt_workspace(int device, cudaStream_t stream);

// Gives `device`'s workspaces back to its allocator (in stream order: work already queued with
// them finishes first), as torch.cuda.empty_cache does with cuBLAS's; the next matmul on a
// stream takes a new one.
void release_blaslt_workspaces(int device);

}  // namespace kiln::backend::cuda
