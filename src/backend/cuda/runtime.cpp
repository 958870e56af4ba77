// The CUDA runtime: a caching allocator per device, copies, synchronization, device names.
#include <memory>
#include <mutex>
#include <vector>

#include "backend/caching_allocator.h"
#include "backend/cuda/check.h"
#include "core/device_runtime.h"

namespace kiln::backend::cuda {
namespace {

// Makes `index` the current device for the calling thread while alive.
class DeviceGuard {
 public:
  explicit DeviceGuard(int index) {
    KILN_CUDA_CHECK(cudaGetDevice(&prev_));
    if (prev_ != index) KILN_CUDA_CHECK(cudaSetDevice(index));
    changed_ = prev_ != index;
  }
  ~DeviceGuard() {
    if (changed_) cudaSetDevice(prev_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int prev_ = 0;
  bool changed_ = false;
};

class CudaRuntime final : public DeviceRuntime {
 public:
  CudaRuntime() {
    // No driver or no device is not an error: CUDA is simply not available.
    if (cudaGetDeviceCount(&count_) != cudaSuccess) {
      cudaGetLastError();
      count_ = 0;
    }
    for (int i = 0; i < count_; ++i) {
      caches_.push_back(std::make_unique<CachingAllocator>(
          "cuda:" + std::to_string(i),
          [i](size_t n) -> void* {
            DeviceGuard g(i);
            void* p = nullptr;
            if (cudaMalloc(&p, n) != cudaSuccess) {
              cudaGetLastError();  // clear the sticky out-of-memory error; the cache retries
              return nullptr;
            }
            return p;
          },
          [i](void* p) {
            DeviceGuard g(i);
            cudaFree(p);
          },
          [i](void* p, int byte, size_t n) {
            DeviceGuard g(i);
            cudaMemset(p, byte, n);
          }));
    }
  }

  int device_count() const override { return count_; }
  std::string device_name(int index) const override {
    cudaDeviceProp prop{};
    KILN_CUDA_CHECK(cudaGetDeviceProperties(&prop, index));
    return prop.name;
  }
  void* allocate(size_t nbytes, int index) override { return caches_.at(index)->allocate(nbytes); }
  void deallocate(void* p, size_t nbytes, int index) override { caches_.at(index)->deallocate(p, nbytes); }
  MemoryStats stats(int index) const override { return caches_.at(index)->stats(); }
  void reset_peak(int index) override { caches_.at(index)->reset_peak(); }
  void set_limit(int index, size_t bytes) override { caches_.at(index)->set_limit(bytes); }
  void empty_cache(int index) override {
    synchronize(index);
    caches_.at(index)->empty_cache();
  }
  // Copies are synchronous until kernels run on streams (the CUDA backend's own issue).
  void copy_to_host(void* dst, const void* src, size_t n, int index) override {
    DeviceGuard g(index);
    KILN_CUDA_CHECK(cudaMemcpy(dst, src, n, cudaMemcpyDeviceToHost));
  }
  void copy_from_host(void* dst, const void* src, size_t n, int index) override {
    DeviceGuard g(index);
    KILN_CUDA_CHECK(cudaMemcpy(dst, src, n, cudaMemcpyHostToDevice));
  }
  void copy_on_device(void* dst, const void* src, size_t n, int index) override {
    DeviceGuard g(index);
    KILN_CUDA_CHECK(cudaMemcpy(dst, src, n, cudaMemcpyDeviceToDevice));
  }
  void synchronize(int index) override {
    DeviceGuard g(index);
    KILN_CUDA_CHECK(cudaDeviceSynchronize());
  }
  size_t total_memory(int index) const override {
    cudaDeviceProp prop{};
    KILN_CUDA_CHECK(cudaGetDeviceProperties(&prop, index));
    return prop.totalGlobalMem;
  }

 private:
  int count_ = 0;
  std::vector<std::unique_ptr<CachingAllocator>> caches_;
};

// Never destroyed, like the CPU runtime: tensors freed at exit still find it.
[[maybe_unused]] CudaRuntime* const g_runtime = [] {
  auto* r = new CudaRuntime();
  register_runtime(DeviceType::CUDA, r);
  return r;
}();

}  // namespace
}  // namespace kiln::backend::cuda
