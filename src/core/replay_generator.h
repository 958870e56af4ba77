// A thread's own Philox state for replaying draws (activation checkpointing's recomputation).
#pragma once

#include "kiln/random.h"

namespace kiln::detail {

// While alive, this thread's draws (reserve_counters) come from `state`, which they advance, and
// not from the global generator: a region runs again with the random numbers of its first run
// (the same dropout masks), and other threads drawing meanwhile neither disturb it nor are
// disturbed. Nests.
class ReplayGenerator {
 public:
  explicit ReplayGenerator(const GeneratorState& state);
  ~ReplayGenerator();
  ReplayGenerator(const ReplayGenerator&) = delete;
  ReplayGenerator& operator=(const ReplayGenerator&) = delete;

 private:
  GeneratorState state_;
  GeneratorState* prev_;
};

// Where this thread's next draw comes from: its ReplayGenerator's state while one is alive, else
// the global generator's (get_rng_state()).
GeneratorState thread_generator_state();

}  // namespace kiln::detail
