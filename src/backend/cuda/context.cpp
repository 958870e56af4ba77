// The CUDA backend's per-device library handles and workspaces.
#include "backend/cuda/context.h"

#include <array>
#include <map>
#include <mutex>

#include "backend/cuda/state.h"

namespace kiln::backend::cuda {
namespace {

// 32 MiB: what cuBLASLt's heuristics want for Hopper's largest kernels (PyTorch uses the same).
constexpr size_t kWorkspaceBytes = size_t{32} << 20;

struct Context {
  std::once_flag once;
  cublasLtHandle_t handle = nullptr;
  std::mutex mutex;
  std::map<cudaStream_t, void*> workspaces;
};
std::array<Context, kMaxDevices> g_contexts;

}  // namespace

cublasLtHandle_t blaslt_handle(int device) {
  Context& c = g_contexts[static_cast<size_t>(device)];
  std::call_once(c.once, [&] {
    DeviceGuard g(device);
    KILN_CUBLAS_CHECK(cublasLtCreate(&c.handle));
  });
  return c.handle;
}

std::pair<void*, size_t> blaslt_workspace(int device, cudaStream_t stream) {
  Context& c = g_contexts[static_cast<size_t>(device)];
  std::lock_guard<std::mutex> lock(c.mutex);
  void*& w = c.workspaces[stream];
  if (!w) w = allocator(device).allocate(kWorkspaceBytes, stream);
  return {w, kWorkspaceBytes};
}

}  // namespace kiln::backend::cuda
