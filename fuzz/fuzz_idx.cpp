// libFuzzer target: parse_idx on arbitrary bytes must return a tensor or throw kiln::Error.
#include <cstddef>
#include <cstdint>

#include "kiln/data/idx.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    kiln::Tensor t = kiln::data::parse_idx(data, size, "fuzz");
    (void)t.numel();
  } catch (const kiln::Error&) {
  }
  return 0;
}
