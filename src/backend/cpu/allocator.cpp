// Registers the CPU runtime: host memory through the caching allocator, with a default limit
// below the machine's memory; copies are memcpy.
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iostream>

#include "backend/cpu/host_runtime.h"
#include "kiln/error.h"

namespace kiln::backend::cpu {

size_t host_memory_bytes() {
  size_t total = static_cast<size_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<size_t>(sysconf(_SC_PAGESIZE));
  // cgroup v2, then v1: a container's limit is what the OOM killer enforces.
  for (const char* path : {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}) {
    std::ifstream in(path);
    unsigned long long v = 0;
    if (in >> v && v > 0) total = std::min<size_t>(total, static_cast<size_t>(v));  // "max" does not parse
  }
  return total;
}

size_t default_host_limit() {
  const size_t total = host_memory_bytes();
  if (const char* v = std::getenv("KILN_MEMORY_LIMIT"); v && *v) {
    try {
      return parse_memory_limit(v, total, "KILN_MEMORY_LIMIT");
    } catch (const Error& e) {  // read at start-up, where an exception could only terminate
      std::cerr << "kiln: warning: " << e.what() << "; using the default\n";
    }
  }
  return total / 10 * 9;
}

size_t HostRuntime::total_memory(int) const { return host_memory_bytes(); }

namespace {

// Never destroyed: tensors freed during static destruction still find their runtime.
[[maybe_unused]] HostRuntime* const g_runtime = [] {
  auto* r = new HostRuntime("cpu");
  r->set_limit(0, default_host_limit());
  register_runtime(DeviceType::CPU, r);
  return r;
}();

}  // namespace
}  // namespace kiln::backend::cpu
