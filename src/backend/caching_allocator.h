// A size-class caching allocator with stats and a limit, shared by every device's runtime.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "kiln/runtime.h"

namespace kiln::backend {

// What an allocator counts, under its own lock: bytes handed out (and their peak), bytes held
// from the OS or the driver, the limit (0: none), and the events memory_stats reports.
struct AllocatorCounts {
  size_t allocated = 0, reserved = 0, peak = 0, peak_reserved = 0, limit = 0;
  uint64_t os_allocations = 0, retries = 0, ooms = 0;

  void hand_out(size_t n) {
    allocated += n;
    if (allocated > peak) peak = allocated;
  }
  // A block newly taken from the OS or the driver.
  void reserve(size_t n) {
    reserved += n;
    ++os_allocations;
    if (reserved > peak_reserved) peak_reserved = reserved;
  }
  void reset_peaks() {
    peak = allocated;
    peak_reserved = reserved;
  }
  bool over_limit(size_t more) const { return limit && (more > limit || reserved > limit - more); }
  MemoryStats stats(bool caching) const;
  // Why an allocation failed: past the limit, refused by the system or driver, or larger than a
  // quarter of the address space (never asked for: no device has it, and rounding could wrap).
  enum class Refusal { Limit, Refused, TooLarge };
  static constexpr size_t kLargestRequest = std::numeric_limits<size_t>::max() / 4;
  // Counts it and throws "[cpu] out of memory: asked 5.61 GiB, limit 21.6 GiB, 205 MiB in use,
  // ..." or "[cuda] out of memory on cuda:0: asked ..., which the driver refused; ...".
  [[noreturn]] void out_of_memory(const std::string& device_name, size_t asked, Refusal why);
};

// Blocks come from raw_alloc and go back through raw_free only on empty_cache() or when the
// limit needs room. Sizes round up to 2^k * {1, 1.25, 1.5, 1.75}: at most 25% waste and few
// distinct classes, so a training step that frees and reallocates the same shapes is served
// from the cache without going to the OS or the driver.
//
// KILN_ALLOCATOR=system (the default in sanitizer builds) turns the cache off: every block comes
// from raw_alloc and goes straight back to raw_free, so AddressSanitizer sees every access past
// a tensor's end or after its free, and every new block is filled with 0xFF bytes (NaN in every
// floating dtype) so that a kernel reading memory nobody wrote gives NaN, not yesterday's values.
class CachingAllocator {
 public:
  using RawAlloc = std::function<void*(size_t)>;  // returns nullptr when out of memory
  using RawFree = std::function<void(void*)>;
  using RawFill = std::function<void(void*, int byte, size_t)>;

  enum class Mode { Caching, System };
  // KILN_ALLOCATOR's choice (caching or system); a bad value is warned about and ignored.
  static Mode mode_from_env();

  CachingAllocator(std::string device_name, RawAlloc raw_alloc, RawFree raw_free, RawFill raw_fill,
                   Mode mode = mode_from_env())
      : device_name_(std::move(device_name)), raw_alloc_(std::move(raw_alloc)), raw_free_(std::move(raw_free)),
        raw_fill_(std::move(raw_fill)), mode_(mode) {}

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
  Mode mode() const { return mode_; }

 private:
  void release_cache_locked();

  const std::string device_name_;
  RawAlloc raw_alloc_;
  RawFree raw_free_;
  RawFill raw_fill_;
  const Mode mode_;
  mutable std::mutex mutex_;
  std::unordered_map<size_t, std::vector<void*>> free_;
  AllocatorCounts n_;
};

}  // namespace kiln::backend
