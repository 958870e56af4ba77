// The global Philox generator state.
#include <mutex>

#include "core/replay_generator.h"
#include "kiln/random.h"

namespace kiln {
namespace {
std::mutex g_mutex;
GeneratorState g_state{67280421310721ull, 0};  // PyTorch's default seed
thread_local GeneratorState* t_replay = nullptr;  // a ReplayGenerator's state on this thread
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
  if (t_replay) {
    const GeneratorState s = *t_replay;
    t_replay->offset += counters;
    return s;
  }
  std::lock_guard<std::mutex> lock(g_mutex);
  GeneratorState s = g_state;
  g_state.offset += counters;
  return s;
}

GeneratorState thread_generator_state() { return t_replay ? *t_replay : get_rng_state(); }

ReplayGenerator::ReplayGenerator(const GeneratorState& state) : state_(state), prev_(t_replay) { t_replay = &state_; }
ReplayGenerator::~ReplayGenerator() { t_replay = prev_; }
}  // namespace detail

}  // namespace kiln
