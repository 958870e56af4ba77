// Threads, memory statistics, fallback counts and build information.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "kiln/device.h"

namespace kiln {

// The CPU thread pool (OpenMP; oneDNN shares it). Defaults to the number of cores.
void set_num_threads(int n);
int get_num_threads();

struct MemoryStats {
  size_t allocated = 0;  // bytes in live tensors
  size_t reserved = 0;   // bytes held by the caching allocator (live + cached)
  size_t peak = 0;       // high-water mark of allocated since the last reset
  size_t peak_reserved = 0;  // high-water mark of reserved since the last reset
  size_t limit = 0;      // 0: no limit
  uint64_t os_allocations = 0;  // times the allocator went to the OS or driver
  uint64_t allocation_retries = 0;  // times the cache was freed to make room
  uint64_t out_of_memory = 0;   // allocations that failed with the out-of-memory error
  bool caching = true;          // false under KILN_ALLOCATOR=system (every block from the OS)
};
MemoryStats memory_stats(Device device = Device::cpu());
void reset_peak_memory_stats(Device device = Device::cpu());
// Allocations that would take the reserved bytes past the limit throw kiln::Error
// "[cpu] out of memory: asked 5.61 GiB, limit 21.6 GiB, 205 MiB in use, 317 MiB reserved"
// (after freeing the cache once). 0: no limit. The CPU's default is 90% of its memory (the
// physical memory, or the cgroup's limit when lower), or KILN_MEMORY_LIMIT when set; so a
// batch too large for the machine is this error rather than the kernel's out-of-memory killer.
void set_memory_limit(Device device, size_t bytes);
void empty_cache(Device device = Device::cpu());
// The device's memory in bytes: the CPU's physical memory (or its cgroup limit when lower), a
// GPU's global memory.
size_t total_memory(Device device = Device::cpu());
// A byte count as text: "512 bytes", "1.50 GiB", "21.6 GiB".
std::string format_bytes(size_t n);
// A limit as text: "20G", "512M", "1.5GiB", "4096" (bytes; K/M/G/T are powers of 1024), "80%"
// (of `total`) or "0" (no limit). Anything else is a kiln::Error naming `where`.
size_t parse_memory_limit(const std::string& text, size_t total, const char* where = "memory limit");

// How often each op ran on the CPU because the tensor's device had no kernel for it.
std::map<std::string, uint64_t> fallback_counts();
// Of these op kinds (kiln::profiler's names: "Conv2d", "Add", ...), those that have no kernel of
// their own on `device` and would run through the CPU fallback there. Unknown names are kept.
std::vector<std::string> ops_without_kernel(const std::vector<std::string>& ops, DeviceType device);

struct BuildInfo {
  std::string version;
  bool onednn = false;
  std::string onednn_version;
  bool cuda = false;
  std::string cpu_features;  // instruction sets this CPU offers that kernels use
  std::string cpu_model;     // as /proc/cpuinfo names it, e.g. "Intel(R) Xeon(R) Processor (family 6, model 207)"
};
BuildInfo build_info();

namespace cuda {
bool is_available();
int device_count();
// Waits for the work queued on `device` (-1: the calling thread's current device).
void synchronize(int device = -1);
}  // namespace cuda

}  // namespace kiln
