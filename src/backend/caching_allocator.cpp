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

std::string format_bytes(size_t n) {
  const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024 && u < 5) v /= 1024, ++u;
  char buf[32];
  if (u == 0) std::snprintf(buf, sizeof buf, "%zu bytes", n);
  else std::snprintf(buf, sizeof buf, v < 10 ? "%.2f %s" : v < 100 ? "%.1f %s" : "%.0f %s", v, units[u]);
  return buf;
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
    if (limit_ && reserved_ + cls > limit_) {
      ++retries_;
      release_cache_locked();
    }
    if (limit_ && reserved_ + cls > limit_) out_of_memory_locked(nbytes, false);
    p = raw_alloc_(cls);
    if (!p) {  // out of memory: give the cache back and try once more
      ++retries_;
      release_cache_locked();
      p = raw_alloc_(cls);
    }
    if (!p) out_of_memory_locked(nbytes, true);
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

void CachingAllocator::out_of_memory_locked(size_t nbytes, bool system_refused) {
  ++ooms_;
  // "[cpu] out of memory: ..." / "[cuda] out of memory on cuda:0: ..."
  const size_t colon = device_name_.find(':');
  const std::string kind = device_name_.substr(0, colon);
  const std::string on = colon == std::string::npos ? "" : " on " + device_name_;
  const std::string usage = format_bytes(allocated_) + " in use, " + format_bytes(reserved_) + " reserved";
  if (system_refused)
    throw OutOfMemoryError(detail::cat("[", kind, "] out of memory", on, ": asked ", format_bytes(nbytes), ", which the ",
                                       kind == "cpu" ? "system" : "driver", " refused; ", usage,
                                       limit_ ? ", limit " + format_bytes(limit_) : std::string()));
  throw OutOfMemoryError(detail::cat("[", kind, "] out of memory", on, ": asked ", format_bytes(nbytes), ", limit ",
                                     format_bytes(limit_), ", ", usage));
}

MemoryStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  MemoryStats m;
  m.allocated = allocated_;
  m.reserved = reserved_;
  m.peak = peak_;
  m.limit = limit_;
  m.os_allocations = os_allocations_;
  m.allocation_retries = retries_;
  m.out_of_memory = ooms_;
  m.caching = mode_ == Mode::Caching;
  return m;
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
