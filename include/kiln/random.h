// The Philox random generator: the same seed gives the same numbers on every device.
#pragma once

#include <cstdint>

namespace kiln {

// Counter-based Philox4x32-10. A draw of n numbers takes counters [offset, offset + ceil(n/4))
// and advances offset, so results depend only on (seed, offset), not on the device or threads.
struct GeneratorState {
  uint64_t seed = 0;
  uint64_t offset = 0;
};

void manual_seed(uint64_t seed);
GeneratorState get_rng_state();
void set_rng_state(const GeneratorState& state);

namespace detail {
// Reserves `counters` Philox counters from the global generator and returns the first.
GeneratorState reserve_counters(uint64_t counters);
}  // namespace detail

}  // namespace kiln
