// The CPU runtime: a size-class caching allocator (64-byte aligned) with stats and a limit.
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/device_runtime.h"
#include "kiln/error.h"

namespace kiln::backend::cpu {
namespace {

// Size classes 2^k * {1, 1.25, 1.5, 1.75}: at most 25% waste, few distinct classes, so a
// training step that frees and reallocates the same shapes is served from the cache.
size_t size_class(size_t n) {
  if (n <= 256) return (n + 63) & ~size_t{63};
  size_t p = size_t{1} << (63 - __builtin_clzll(n));  // largest power of two <= n
  size_t q = p / 4;
  return (n + q - 1) / q * q;
}

class CpuRuntime final : public DeviceRuntime {
 public:
  int device_count() const override { return 1; }
  std::string device_name(int) const override { return "cpu"; }

  void* allocate(size_t nbytes, int) override {
    if (nbytes == 0) return nullptr;
    size_t cls = size_class(nbytes);
    std::unique_lock<std::mutex> lock(mutex_);
    auto it = free_.find(cls);
    void* p = nullptr;
    if (it != free_.end() && !it->second.empty()) {
      p = it->second.back();
      it->second.pop_back();
      cached_ -= cls;
    } else {
      if (limit_ && reserved_ + cls > limit_) release_cache();
      KILN_CHECK(!limit_ || reserved_ + cls <= limit_, "allocate", "cannot allocate ", nbytes,
                 " bytes on the cpu: the memory limit is ", limit_, " bytes and ", reserved_,
                 " are in use");
      p = std::aligned_alloc(64, cls);
      KILN_CHECK(p != nullptr, "allocate", "out of memory allocating ", nbytes, " bytes on the cpu");
      reserved_ += cls;
      ++os_allocations_;
    }
    allocated_ += cls;
    if (allocated_ > peak_) peak_ = allocated_;
    return p;
  }

  void deallocate(void* p, size_t nbytes, int) override {
    if (!p) return;
    size_t cls = size_class(nbytes);
    std::lock_guard<std::mutex> lock(mutex_);
    allocated_ -= cls;
    cached_ += cls;
    free_[cls].push_back(p);
  }

  MemoryStats stats(int) const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return {allocated_, reserved_, peak_, limit_, os_allocations_};
  }
  void reset_peak(int) override {
    std::lock_guard<std::mutex> lock(mutex_);
    peak_ = allocated_;
  }
  void set_limit(int, size_t bytes) override {
    std::lock_guard<std::mutex> lock(mutex_);
    limit_ = bytes;
  }
  void empty_cache(int) override {
    std::lock_guard<std::mutex> lock(mutex_);
    release_cache();
  }
  void copy_to_host(void* dst, const void* src, size_t n, int) override { std::memcpy(dst, src, n); }
  void copy_from_host(void* dst, const void* src, size_t n, int) override { std::memcpy(dst, src, n); }
  void copy_on_device(void* dst, const void* src, size_t n, int) override { std::memcpy(dst, src, n); }
  void synchronize(int) override {}

 private:
  void release_cache() {
    for (auto& [cls, list] : free_) {
      for (void* p : list) std::free(p);
      reserved_ -= cls * list.size();
      list.clear();
    }
    cached_ = 0;
  }

  mutable std::mutex mutex_;
  std::unordered_map<size_t, std::vector<void*>> free_;
  size_t allocated_ = 0, reserved_ = 0, cached_ = 0, peak_ = 0, limit_ = 0;
  uint64_t os_allocations_ = 0;
};

// Never destroyed: tensors freed during static destruction still find their runtime.
CpuRuntime* const g_runtime = [] {
  auto* r = new CpuRuntime();
  register_runtime(DeviceType::CPU, r);
  return r;
}();

}  // namespace
}  // namespace kiln::backend::cpu
