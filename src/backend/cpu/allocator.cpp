// Registers the CPU runtime: host memory through the caching allocator; copies are memcpy.
#include "backend/cpu/host_runtime.h"

namespace kiln::backend::cpu {
namespace {

// Never destroyed: tensors freed during static destruction still find their runtime.
[[maybe_unused]] HostRuntime* const g_runtime = [] {
  auto* r = new HostRuntime("cpu");
  register_runtime(DeviceType::CPU, r);
  return r;
}();

}  // namespace
}  // namespace kiln::backend::cpu
