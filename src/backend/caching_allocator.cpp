// The size-class caching allocator behind every device runtime.
#include "backend/caching_allocator.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>

#include "kiln/error.h"

namespace kiln::backend {

CachingAllocator::Mode CachingAllocator::mode_from_env() {
  const char* v = std::getenv("KILN_ALLOCATOR");
#ifdef KILN_SANITIZE
  const Mode fallback = Mode::System;
#else
  const Mode fallback = Mode::Caching;
#endif
  if (!v || !*v) return fallback;
  if (std::strcmp(v, "caching") == 0) return Mode::Caching;
  if (std::strcmp(v, "system") == 0) return Mode::System;
  // Read while the runtimes are built at start-up, where an exception could only terminate.
  std::cerr << "kiln: warning: [allocator] KILN_ALLOCATOR must be 'caching' or 'system', got '" << v
            << "'; using the default\n";
  return fallback;
}

size_t CachingAllocator::size_class(size_t n) {
  if (n <= 256) return (n + 63) & ~size_t{63};
  size_t p = size_t{1} << (63 - __builtin_clzll(n));  // largest power of two <= n
  size_t q = p / 4;
  return (n + q - 1) / q * q;
}

void* CachingAllocator::allocate(size_t nbytes) {
  if (nbytes == 0) return nullptr;
  if (nbytes > AllocatorCounts::kLargestRequest) {  // before size_class, which would wrap around to 0
    std::lock_guard<std::mutex> lock(mutex_);
    n_.out_of_memory(device_name_, nbytes, AllocatorCounts::Refusal::TooLarge);
  }
  const size_t cls = size_class(nbytes);
  std::lock_guard<std::mutex> lock(mutex_);
  void* p = nullptr;
  auto it = free_.find(cls);
  if (it != free_.end() && !it->second.empty()) {
    p = it->second.back();
    it->second.pop_back();
  } else {
    if (n_.over_limit(cls)) {
      ++n_.retries;
      release_cache_locked();
    }
    if (n_.over_limit(cls)) n_.out_of_memory(device_name_, nbytes, AllocatorCounts::Refusal::Limit);
    p = raw_alloc_(cls);
    if (!p) {  // out of memory: give the cache back and try once more
      ++n_.retries;
      release_cache_locked();
      p = raw_alloc_(cls);
    }
    if (!p) n_.out_of_memory(device_name_, nbytes, AllocatorCounts::Refusal::Refused);
    n_.reserve(cls);
    if (mode_ == Mode::System && raw_fill_) raw_fill_(p, 0xFF, cls);
  }
  n_.hand_out(cls);
  return p;
}

void CachingAllocator::deallocate(void* p, size_t nbytes) {
  if (!p) return;
  const size_t cls = size_class(nbytes);
  std::lock_guard<std::mutex> lock(mutex_);
  n_.allocated -= cls;
  if (mode_ == Mode::System) {
    raw_free_(p);
    n_.reserved -= cls;
    return;
  }
  free_[cls].push_back(p);
}

void AllocatorCounts::out_of_memory(const std::string& device_name, size_t asked, Refusal why) {
  ++ooms;
  // "[cpu] out of memory: ..." / "[cuda] out of memory on cuda:0: ..."
  const size_t colon = device_name.find(':');
  const std::string kind = device_name.substr(0, colon);
  const std::string on = colon == std::string::npos ? "" : " on " + device_name;
  const std::string usage = format_bytes(allocated) + " in use, " + format_bytes(reserved) + " reserved";
  if (why != Refusal::Limit)
    throw OutOfMemoryError(detail::cat("[", kind, "] out of memory", on, ": asked ", format_bytes(asked),
                                       why == Refusal::TooLarge ? ", more than any " + kind + " device has" :
                                       kind == "cpu" ? ", which the system refused" : ", which the driver refused",
                                       "; ", usage, limit ? ", limit " + format_bytes(limit) : std::string()));
  throw OutOfMemoryError(detail::cat("[", kind, "] out of memory", on, ": asked ", format_bytes(asked), ", limit ",
                                     format_bytes(limit), ", ", usage));
}

MemoryStats AllocatorCounts::stats(bool caching) const {
  MemoryStats m;
  m.allocated = allocated;
  m.reserved = reserved;
  m.peak = peak;
  m.peak_reserved = peak_reserved;
  m.limit = limit;
  m.os_allocations = os_allocations;
  m.allocation_retries = retries;
  m.out_of_memory = ooms;
  m.caching = caching;
  return m;
}

MemoryStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return n_.stats(mode_ == Mode::Caching);
}

void CachingAllocator::reset_peak() {
  std::lock_guard<std::mutex> lock(mutex_);
  n_.reset_peaks();
}

void CachingAllocator::set_limit(size_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  n_.limit = bytes;
}

void CachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mutex_);
  release_cache_locked();
}

void CachingAllocator::release_cache_locked() {
  for (auto& [cls, list] : free_) {
    for (void* p : list) raw_free_(p);
    n_.reserved -= cls * list.size();
    list.clear();
  }
}

}  // namespace kiln::backend
