// HostRuntime: a device runtime whose memory is 64-byte aligned host memory (the CPU's runtime).
#pragma once

#include <cstdlib>
#include <cstring>
#include <string>

#include "backend/caching_allocator.h"
#include "core/device_runtime.h"

namespace kiln::backend::cpu {

// Host memory: physical memory, or the cgroup's limit (a container's) when that is lower.
size_t host_memory_bytes();
// The CPU's default limit: KILN_MEMORY_LIMIT when set (a bad value is warned about), else 90% of
// host_memory_bytes(), so an oversized batch is an error rather than the kernel's OOM killer.
size_t default_host_limit();

class HostRuntime : public DeviceRuntime {
 public:
  explicit HostRuntime(std::string name)
      : name_(name), cache_(std::move(name), [](size_t n) { return std::aligned_alloc(64, n); },
                            [](void* p) { std::free(p); },
                            [](void* p, int byte, size_t n) { std::memset(p, byte, n); }) {}  // class sizes are multiples of 64
  int device_count() const override { return 1; }
  std::string device_name(int) const override { return name_; }
  void* allocate(size_t nbytes, int) override { return cache_.allocate(nbytes); }
  void deallocate(void* p, size_t nbytes, int) override { cache_.deallocate(p, nbytes); }
  MemoryStats stats(int) const override { return cache_.stats(); }
  void reset_peak(int) override { cache_.reset_peak(); }
  void set_limit(int, size_t bytes) override { cache_.set_limit(bytes); }
  void empty_cache(int) override { cache_.empty_cache(); }
  void copy_to_host(void* dst, const void* src, size_t n, int) override { std::memcpy(dst, src, n); }
  void copy_from_host(void* dst, const void* src, size_t n, int, bool) override { std::memcpy(dst, src, n); }
  void copy_on_device(void* dst, const void* src, size_t n, int) override { std::memcpy(dst, src, n); }
  void synchronize(int) override {}
  size_t total_memory(int) const override;

 private:
  std::string name_;
  CachingAllocator cache_;
};

}  // namespace kiln::backend::cpu
