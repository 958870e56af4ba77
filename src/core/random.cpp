// The global Philox generator state.
#include <mutex>

#include "kiln/random.h"

namespace kiln {
namespace {
std::mutex g_mutex;
GeneratorState g_state{67280421310721ull, 0};  // PyTorch's default seed
}  // namespace

void manual_seed(uint64_t seed) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_state = {seed, 0};
}

GeneratorState get_rng_state() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_state;
}

void set_rng_state(const GeneratorState& state) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_state = state;
}

namespace detail {
GeneratorState reserve_counters(uint64_t counters) {
  std::lock_guard<std::mutex> lock(g_mutex);
  GeneratorState s = g_state;
  g_state.offset += counters;
  return s;
}
}  // namespace detail

}  // namespace kiln
