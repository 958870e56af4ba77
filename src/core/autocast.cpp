// The thread-local autocast mode behind AutocastGuard (the casting policy is src/ops/autocast_policy.h).
#include "kiln/autocast.h"

#include <algorithm>

#include "kiln/error.h"

namespace kiln {
namespace {

// Per thread and device type, as in PyTorch: worker threads start with autocast off.
thread_local AutocastGuard::Mode t_mode[kNumDeviceTypes];

using Mode = AutocastGuard::Mode;
Mode& mode(DeviceType t) { return t_mode[static_cast<int>(t)]; }

// Only an enabled guard's dtype matters: a disabled one takes any (AutocastGuard(amp ? kBFloat16 :
// kFloat32, amp), as torch.autocast(dtype=torch.float32, enabled=False)) and keeps the dtype there was.
Mode set(const Mode& was, ScalarType dtype, bool enabled) {
  if (!enabled) return {false, was.dtype};
  KILN_CHECK(dtype == kBFloat16 || dtype == kFloat16, "AutocastGuard", "autocast runs in bfloat16 or float16, got ",
             dtype);
  return {true, dtype};
}

}  // namespace

bool autocast_enabled(DeviceType device_type) { return mode(device_type).enabled; }
bool autocast_enabled() {
  return std::any_of(std::begin(t_mode), std::end(t_mode), [](const AutocastGuard::Mode& m) { return m.enabled; });
}
ScalarType autocast_dtype(DeviceType device_type) { return mode(device_type).dtype; }

AutocastGuard::AutocastGuard(ScalarType dtype, bool enabled) {
  Mode next[kNumDeviceTypes];
  for (int t = 0; t < kNumDeviceTypes; ++t) next[t] = set(t_mode[t], dtype, enabled);  // may throw: nothing set yet
  std::copy(std::begin(t_mode), std::end(t_mode), prev_);
  std::copy(std::begin(next), std::end(next), t_mode);
}

AutocastGuard::AutocastGuard(DeviceType device_type, ScalarType dtype, bool enabled)
    : device_type_(static_cast<int>(device_type)) {
  const Mode next = set(mode(device_type), dtype, enabled);
  prev_[device_type_] = mode(device_type);
  mode(device_type) = next;
}

// A guard for one device type restores that type alone, as torch.autocast's exit: guards of two
// types released out of order (held in members) left the other type's autocast on.
AutocastGuard::~AutocastGuard() {
  if (device_type_ >= 0) t_mode[device_type_] = prev_[device_type_];
  else std::copy(std::begin(prev_), std::end(prev_), t_mode);
}

}  // namespace kiln
