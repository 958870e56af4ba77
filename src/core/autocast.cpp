// The thread-local autocast mode behind AutocastGuard (the casting policy is src/ops/autocast_policy.h).
#include "kiln/autocast.h"

#include <algorithm>

#include "kiln/error.h"

namespace kiln {
namespace {

// Per thread and device type, as in PyTorch: worker threads start with autocast off.
thread_local AutocastGuard::Mode t_mode[kNumDeviceTypes];

AutocastGuard::Mode& mode(DeviceType t) { return t_mode[static_cast<int>(t)]; }

void check_dtype(ScalarType dtype) {
  KILN_CHECK(dtype == kBFloat16 || dtype == kFloat16, "AutocastGuard", "autocast runs in bfloat16 or float16, got ",
             dtype);
}

}  // namespace

bool autocast_enabled(DeviceType device_type) { return mode(device_type).enabled; }
bool autocast_enabled() {
  return std::any_of(std::begin(t_mode), std::end(t_mode), [](const AutocastGuard::Mode& m) { return m.enabled; });
}
ScalarType autocast_dtype(DeviceType device_type) { return mode(device_type).dtype; }

AutocastGuard::AutocastGuard(ScalarType dtype, bool enabled) {
  check_dtype(dtype);
  std::copy(std::begin(t_mode), std::end(t_mode), prev_);
  std::fill(std::begin(t_mode), std::end(t_mode), Mode{enabled, dtype});
}

AutocastGuard::AutocastGuard(DeviceType device_type, ScalarType dtype, bool enabled) {
  check_dtype(dtype);
  std::copy(std::begin(t_mode), std::end(t_mode), prev_);
  mode(device_type) = {enabled, dtype};
}

AutocastGuard::~AutocastGuard() { std::copy(std::begin(prev_), std::end(prev_), t_mode); }

}  // namespace kiln
