// The size-class caching allocator behind every device runtime.
#include "backend/caching_allocator.h"

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
  const size_t cls = size_class(nbytes);
  std::lock_guard<std::mutex> lock(mutex_);
  void* p = nullptr;
  auto it = free_.find(cls);
  if (it != free_.end() && !it->second.empty()) {
    p = it->second.back();
    it->second.pop_back();
  } else {
    if (limit_ && reserved_ + cls > limit_) release_cache_locked();
    KILN_CHECK(!limit_ || reserved_ + cls <= limit_, "allocate", "cannot allocate ", nbytes, " bytes on ",
               device_name_, ": the memory limit is ", limit_, " bytes and ", reserved_, " are reserved");
    p = raw_alloc_(cls);
    if (!p) {  // out of memory: give the cache back and try once more
      release_cache_locked();
      p = raw_alloc_(cls);
    }
    KILN_CHECK(p != nullptr, "allocate", "out of memory allocating ", nbytes, " bytes on ", device_name_, " (",
               allocated_, " bytes in use)");
    reserved_ += cls;
    ++os_allocations_;
    if (mode_ == Mode::System && raw_fill_) raw_fill_(p, 0xFF, cls);
  }
  allocated_ += cls;
  if (allocated_ > peak_) peak_ = allocated_;
  return p;
}

void CachingAllocator::deallocate(void* p, size_t nbytes) {
  if (!p) return;
  const size_t cls = size_class(nbytes);
  std::lock_guard<std::mutex> lock(mutex_);
  allocated_ -= cls;
  if (mode_ == Mode::System) {
    raw_free_(p);
    reserved_ -= cls;
    return;
  }
  free_[cls].push_back(p);
}

MemoryStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return {allocated_, reserved_, peak_, limit_, os_allocations_, mode_ == Mode::Caching};
}

void CachingAllocator::reset_peak() {
  std::lock_guard<std::mutex> lock(mutex_);
  peak_ = allocated_;
}

void CachingAllocator::set_limit(size_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  limit_ = bytes;
}

void CachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mutex_);
  release_cache_locked();
}

void CachingAllocator::release_cache_locked() {
  for (auto& [cls, list] : free_) {
    for (void* p : list) raw_free_(p);
    reserved_ -= cls * list.size();
    list.clear();
  }
}

}  // namespace kiln::backend
