// kiln::cudnn's switches (include/kiln/cudnn.h), in every build: without cuDNN they are kept and
// change nothing, so code that sets them runs unchanged.
#include <atomic>

#include "kiln/cudnn.h"

namespace kiln::cudnn {
namespace {
std::atomic<bool> g_allow_tf32{true};  // torch.backends.cudnn.allow_tf32's default
std::atomic<bool> g_benchmark{false};
std::atomic<bool> g_deterministic{true};  // Kiln's default; torch.backends.cudnn.deterministic's is false
}  // namespace

void set_allow_tf32(bool allow) { g_allow_tf32.store(allow); }
bool allow_tf32() { return g_allow_tf32.load(); }
void set_benchmark(bool enabled) { g_benchmark.store(enabled); }
bool benchmark() { return g_benchmark.load(); }
void set_deterministic(bool enabled) { g_deterministic.store(enabled); }
bool deterministic() { return g_deterministic.load(); }

}  // namespace kiln::cudnn
