// A size-class caching allocator with stats and a limit, shared by every device's runtime.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "kiln/runtime.h"

namespace kiln::backend {

// Blocks come from raw_alloc and go back through raw_free only on empty_cache() or when the
// limit needs room. Sizes round up to 2^k * {1, 1.25, 1.5, 1.75}: at most 25% waste and few
// distinct classes, so a training step that frees and reallocates the same shapes is served
// from the cache without going to the OS or the driver.
class CachingAllocator {
 public:
  using RawAlloc = std::function<void*(size_t)>;  // returns nullptr when out of memory
  using RawFree = std::function<void(void*)>;

  CachingAllocator(std::string device_name, RawAlloc raw_alloc, RawFree raw_free)
      : device_name_(std::move(device_name)), raw_alloc_(std::move(raw_alloc)), raw_free_(std::move(raw_free)) {}

  ~CachingAllocator() { empty_cache(); }
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  static size_t size_class(size_t n);

  void* allocate(size_t nbytes);
  void deallocate(void* p, size_t nbytes);
  MemoryStats stats() const;
  void reset_peak();
  void set_limit(size_t bytes);
  void empty_cache();

 private:
  void release_cache_locked();

  const std::string device_name_;
  RawAlloc raw_alloc_;
  RawFree raw_free_;
  mutable std::mutex mutex_;
  std::unordered_map<size_t, std::vector<void*>> free_;
  size_t allocated_ = 0, reserved_ = 0, peak_ = 0, limit_ = 0;
  uint64_t os_allocations_ = 0;
};

}  // namespace kiln::backend
