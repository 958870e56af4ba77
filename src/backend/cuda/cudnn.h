// cuDNN in the CUDA backend: KILN_CUDNN_CHECK, which names a failing call, handles leased per
// call from a per-device pool and set to the call's stream, and move-only descriptors.
#pragma once

#include <cuda_runtime.h>
#include <cudnn.h>

#include <string>
#include <utility>

#include "kiln/error.h"

namespace kiln::backend::cuda {

// "<call> failed: <status> (<cuDNN's message for this thread's last error>)".
std::string cudnn_message(const char* call, cudnnStatus_t status);
// Throws "[cudnn] " + cudnn_message(call, status): an OutOfMemoryError where cuDNN could not
// allocate (host or device memory), caught as one; a kiln::Error otherwise.
[[noreturn]] void cudnn_fail(const char* call, cudnnStatus_t status);

// A refusal of this case (cuDNN 9's NOT_SUPPORTED family: shape, layout, data type, an engine's
// prerequisite...), after which another layout or algorithm may work, but not a broken setup
// (driver or runtime too old, a GPU the library was not built for, a missing sub-library),
// which no other choice mends: that is an error, reported as such.
inline bool cudnn_unsupported(cudnnStatus_t s) {
  switch (s) {
    case CUDNN_STATUS_NOT_SUPPORTED_INCOMPATIBLE_CUDA_DRIVER:
    case CUDNN_STATUS_NOT_SUPPORTED_INCOMPATIBLE_CUDART:
    case CUDNN_STATUS_NOT_SUPPORTED_ARCH_MISMATCH:
    case CUDNN_STATUS_NOT_SUPPORTED_SUBLIBRARY_UNAVAILABLE:
      return false;
    default:
      return CUDNN_STATUS_CATEGORY(s) == CUDNN_STATUS_NOT_SUPPORTED;
  }
}

// A call's status: true on success; false for a refusal of this case (cudnn_unsupported, or a
// BAD_PARAM, which cuDNN gives for layout/math/algorithm or engine combinations it does not take:
// the caller tries another); anything else throws naming the call.
bool cudnn_accepts(cudnnStatus_t status, const char* call);
// cudnn_accepts for the steps that build one engine of the graph API (its numerical notes, its
// execution plan, its workspace size): there an internal error (a runtime-compiled kernel that
// fails to compile, an allocation inside cuDNN) refuses that engine only and the next is tried,
// as PyTorch and cudnn-frontend do.
bool cudnn_engine_accepts(cudnnStatus_t status, const char* call);

}  // namespace kiln::backend::cuda

#define KILN_CUDNN_CHECK(expr)                                                                    \
  do {                                                                                            \
    const cudnnStatus_t kiln_cudnn_status = (expr);                                               \
    if (kiln_cudnn_status != CUDNN_STATUS_SUCCESS) [[unlikely]]                                   \
      ::kiln::backend::cuda::cudnn_fail(#expr, kiln_cudnn_status);                               \
  } while (0)

namespace kiln::backend::cuda {

// A cuDNN handle of `device`, set to `stream`, for the caller alone while alive. A handle must
// not be used by two threads at once and cudnnSetStream changes it for every user, so each call
// leases one from the device's pool (created on demand: as many as calls run at once) and gives
// it back when done. Pooled handles live as long as the process.
class CudnnHandle {
 public:
  CudnnHandle(int device, cudaStream_t stream);
  ~CudnnHandle();
  CudnnHandle(const CudnnHandle&) = delete;
  CudnnHandle& operator=(const CudnnHandle&) = delete;

  cudnnHandle_t get() const { return handle_; }

 private:
  int device_;
  cudnnHandle_t handle_ = nullptr;
};

// A cuDNN descriptor, created with its owner and destroyed with it; movable, not copyable.
#define KILN_CUDNN_DESCRIPTOR(Name, Handle, Create, Destroy)                                      \
  class Name {                                                                                    \
   public:                                                                                        \
    Name() { KILN_CUDNN_CHECK(Create(&h_)); }                                                     \
    ~Name() {                                                                                     \
      if (h_) Destroy(h_);                                                                        \
    }                                                                                             \
    Name(Name&& o) noexcept : h_(std::exchange(o.h_, nullptr)) {}                                 \
    Name& operator=(Name&& o) noexcept {                                                          \
      if (this != &o) {                                                                           \
        if (h_) Destroy(h_);                                                                      \
        h_ = std::exchange(o.h_, nullptr);                                                        \
      }                                                                                           \
      return *this;                                                                               \
    }                                                                                             \
    Name(const Name&) = delete;                                                                   \
    Name& operator=(const Name&) = delete;                                                        \
    Handle get() const { return h_; }                                                             \
                                                                                                  \
   private:                                                                                       \
    Handle h_ = nullptr;                                                                          \
  }

KILN_CUDNN_DESCRIPTOR(TensorDescriptor, cudnnTensorDescriptor_t, cudnnCreateTensorDescriptor,
                      cudnnDestroyTensorDescriptor);
KILN_CUDNN_DESCRIPTOR(FilterDescriptor, cudnnFilterDescriptor_t, cudnnCreateFilterDescriptor,
                      cudnnDestroyFilterDescriptor);
KILN_CUDNN_DESCRIPTOR(ConvolutionDescriptor, cudnnConvolutionDescriptor_t, cudnnCreateConvolutionDescriptor,
                      cudnnDestroyConvolutionDescriptor);

#undef KILN_CUDNN_DESCRIPTOR

}  // namespace kiln::backend::cuda
