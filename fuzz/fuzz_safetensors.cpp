// libFuzzer target: arbitrary bytes through the safetensors parser. Any kiln::Error is an
// accepted rejection; a crash, sanitizer report, hang or other exception is a bug.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    kiln::io::SafetensorsFile f = kiln::io::detail::parse_safetensors(data, size, "fuzz", "input");
    // Touch every tensor's bytes so a wrong offset or length shows up under the sanitizer.
    for (const auto& [name, t] : f.tensors) {
      const auto* p = static_cast<const volatile uint8_t*>(t.data_ptr());
      for (size_t i = 0; i < t.nbytes(); ++i) (void)p[i];
    }
  } catch (const kiln::Error&) {
  }
  return 0;
}
