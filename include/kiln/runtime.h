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
  size_t limit = 0;      // 0: no limit
  uint64_t os_allocations = 0;  // times the allocator went to the OS or driver
  bool caching = true;          // false under KILN_ALLOCATOR=system (every block from the OS)
};
MemoryStats memory_stats(Device device = Device::cpu());
void reset_peak_memory_stats(Device device = Device::cpu());
// Allocations beyond the limit throw kiln::Error (after freeing the cache once).
void set_memory_limit(Device device, size_t bytes);
void empty_cache(Device device = Device::cpu());

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
};
BuildInfo build_info();

namespace cuda {
bool is_available();
int device_count();
void synchronize(int device = -1);
}  // namespace cuda

}  // namespace kiln
