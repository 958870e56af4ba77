// The thread-local autocast mode behind AutocastGuard (the casting policy is src/ops/autocast_policy.h).
#include "kiln/autocast.h"

#include "kiln/error.h"

namespace kiln {
namespace {

// Per thread, as in PyTorch: worker threads start with autocast off.
thread_local bool t_enabled = false;
thread_local ScalarType t_dtype = kBFloat16;

}  // namespace

bool autocast_enabled() { return t_enabled; }
ScalarType autocast_dtype() { return t_dtype; }

AutocastGuard::AutocastGuard(ScalarType dtype, bool enabled) : prev_enabled_(t_enabled), prev_dtype_(t_dtype) {
  KILN_CHECK(dtype == kBFloat16 || dtype == kFloat16, "AutocastGuard",
             "autocast runs in bfloat16 or float16, got ", dtype);
  t_enabled = enabled;
  t_dtype = dtype;
}

AutocastGuard::~AutocastGuard() {
  t_enabled = prev_enabled_;
  t_dtype = prev_dtype_;
}

}  // namespace kiln
