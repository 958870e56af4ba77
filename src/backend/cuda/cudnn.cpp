// With cuDNN: the handle pool and the error message of KILN_CUDNN_CHECK (the switches of
// kiln::cudnn are in backend/cudnn_flags.cpp, in every build).
#if defined(KILN_HAVE_CUDNN)
#include <array>
#include <mutex>
#include <vector>

#include "backend/cuda/cudnn.h"
#include "backend/cuda/state.h"

namespace kiln::backend::cuda {
namespace {

// Free handles per device. Never destroyed (a handle given back during static destruction still
// finds its pool; at exit the CUDA runtime may already be gone, so handles are not destroyed).
struct HandlePool {
  std::mutex mutex;
  std::vector<cudnnHandle_t> free;
};
std::array<HandlePool, kMaxDevices>& g_pools = *new std::array<HandlePool, kMaxDevices>;

}  // namespace

std::string cudnn_message(const char* call, cudnnStatus_t status) {
  char detail[512] = {};
  cudnnGetLastErrorString(detail, sizeof(detail));
  detail[sizeof(detail) - 1] = '\0';
  std::string m = std::string(call) + " failed: " + cudnnGetErrorString(status);
  if (detail[0] != '\0') m += std::string(" (") + detail + ")";
  return m;
}

void cudnn_fail(const char* call, cudnnStatus_t status) {
  throw_failure("[cudnn] " + cudnn_message(call, status),
                status == CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED ||
                    status == CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED);
}

bool cudnn_accepts(cudnnStatus_t status, const char* call) {
  if (status == CUDNN_STATUS_SUCCESS) return true;
  if (!cudnn_unsupported(status) && CUDNN_STATUS_CATEGORY(status) != CUDNN_STATUS_BAD_PARAM) cudnn_fail(call, status);
  return false;
}

bool cudnn_engine_accepts(cudnnStatus_t status, const char* call) {
  return CUDNN_STATUS_CATEGORY(status) == CUDNN_STATUS_INTERNAL_ERROR ? false : cudnn_accepts(status, call);
}

CudnnHandle::CudnnHandle(int device, cudaStream_t stream) : device_(device) {
  HandlePool& pool = g_pools[static_cast<size_t>(device)];
  {
    std::lock_guard<std::mutex> lock(pool.mutex);
    if (!pool.free.empty()) {
      handle_ = pool.free.back();
      pool.free.pop_back();
    }
  }
  if (!handle_) {
    DeviceGuard guard(device);  // a handle belongs to the device current when it is made
    KILN_CUDNN_CHECK(cudnnCreate(&handle_));
  }
  const cudnnStatus_t st = cudnnSetStream(handle_, stream);
  if (st != CUDNN_STATUS_SUCCESS) {
    {
      std::lock_guard<std::mutex> lock(pool.mutex);
      pool.free.push_back(handle_);
    }
    cudnn_fail("cudnnSetStream(handle_, stream)", st);
  }
}

CudnnHandle::~CudnnHandle() {
  HandlePool& pool = g_pools[static_cast<size_t>(device_)];
  std::lock_guard<std::mutex> lock(pool.mutex);
  pool.free.push_back(handle_);
}

}  // namespace kiln::backend::cuda

#endif  // KILN_HAVE_CUDNN
