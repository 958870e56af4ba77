// The CUDA backend's per-device library handles and workspaces.
#include "backend/cuda/context.h"

#include <array>
#include <map>
#include <mutex>
#include <shared_mutex>

#include "backend/cuda/state.h"

namespace kiln::backend::cuda {
namespace {

// 32 MiB: what cuBLASLt's heuristics want for Hopper's largest kernels (PyTorch uses the same).
constexpr size_t kWorkspaceBytes = size_t{32} << 20;

struct Context {
  std::once_flag once;
  cublasLtHandle_t handle = nullptr;
  std::shared_mutex leases;  // shared while a workspace is in use, unique to release them
  std::mutex mutex;          // the map
  std::map<cudaStream_t, void*> workspaces;
};
// Never destroyed: a matmul from a thread still running at exit finds it.
std::array<Context, kMaxDevices>& g_contexts = *new std::array<Context, kMaxDevices>;

}  // namespace

cublasLtHandle_t blaslt_handle(int device) {
  Context& c = g_contexts[static_cast<size_t>(device)];
  std::call_once(c.once, [&] {
    DeviceGuard g(device);
    KILN_CUBLAS_CHECK(cublasLtCreate(&c.handle));
  });
  return c.handle;
}

BlasltWorkspace blaslt_workspace(int device, cudaStream_t stream) {
  Context& c = g_contexts[static_cast<size_t>(device)];
  BlasltWorkspace ws{nullptr, kWorkspaceBytes, std::shared_lock<std::shared_mutex>(c.leases)};
  std::lock_guard<std::mutex> lock(c.mutex);
  void*& w = c.workspaces[stream];
  if (!w) w = allocator(device).allocate(kWorkspaceBytes, stream);
  ws.ptr = w;
  return ws;
}

void release_blaslt_workspaces(int device) {
  Context& c = g_contexts[static_cast<size_t>(device)];
  std::unique_lock<std::shared_mutex> no_leases(c.leases);
  std::lock_guard<std::mutex> lock(c.mutex);
  for (auto& [stream, w] : c.workspaces) allocator(device).deallocate(w);
  c.workspaces.clear();
}

}  // namespace kiln::backend::cuda
