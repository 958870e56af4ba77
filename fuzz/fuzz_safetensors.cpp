// libFuzzer target: arbitrary bytes through the safetensors header parser and layout checks.
// A kiln::Error is an accepted rejection; a crash, sanitizer report, hang, other exception or
// an accepted layout that breaks the checks' promises is a bug.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    auto h = kiln::io::detail::parse_safetensors_header(data, size, "fuzz", "input");
    // What load_safetensors does next: copy each tensor's bytes. Under ASan a wrong offset or
    // length is an out-of-bounds read of the fuzzer's buffer.
    uint64_t total = 0;
    for (const auto& r : h.tensors) {
      int64_t numel = 1;
      for (int64_t d : r.shape) numel *= d;  // checked not to overflow
      if (r.end - r.begin != static_cast<uint64_t>(numel) * kiln::element_size(r.dtype)) std::abort();
      std::vector<uint8_t> copy(r.end - r.begin);
      if (!copy.empty()) std::memcpy(copy.data(), data + h.data_start + r.begin, copy.size());
      total += copy.size();
    }
    if (h.data_start + total != size) std::abort();  // tensors tile the data section exactly
  } catch (const kiln::Error&) {
  }
  return 0;
}
