// The CPU runtime: 64-byte aligned memory through the caching allocator; copies are memcpy.
#include <cstdlib>
#include <cstring>

#include "backend/caching_allocator.h"
#include "core/device_runtime.h"

namespace kiln::backend::cpu {
namespace {

class CpuRuntime final : public DeviceRuntime {
 public:
  int device_count() const override { return 1; }
  std::string device_name(int) const override { return "cpu"; }
  void* allocate(size_t nbytes, int) override { return cache_.allocate(nbytes); }
  void deallocate(void* p, size_t nbytes, int) override { cache_.deallocate(p, nbytes); }
  MemoryStats stats(int) const override { return cache_.stats(); }
  void reset_peak(int) override { cache_.reset_peak(); }
  void set_limit(int, size_t bytes) override { cache_.set_limit(bytes); }
  void empty_cache(int) override { cache_.empty_cache(); }
  void copy_to_host(void* dst, const void* src, size_t n, int) override { std::memcpy(dst, src, n); }
  void copy_from_host(void* dst, const void* src, size_t n, int) override { std::memcpy(dst, src, n); }
  void copy_on_device(void* dst, const void* src, size_t n, int) override { std::memcpy(dst, src, n); }
  void synchronize(int) override {}

 private:
  // Class sizes are multiples of 64, as aligned_alloc requires.
  CachingAllocator cache_{"cpu", [](size_t n) { return std::aligned_alloc(64, n); }, [](void* p) { std::free(p); }};
};

// Never destroyed: tensors freed during static destruction still find their runtime.
[[maybe_unused]] CpuRuntime* const g_runtime = [] {
  auto* r = new CpuRuntime();
  register_runtime(DeviceType::CPU, r);
  return r;
}();

}  // namespace
}  // namespace kiln::backend::cpu
