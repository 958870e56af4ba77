// Internal safetensors entry points: parse and serialize from/to memory (the fuzzer and the
// file functions in kiln/io.h share them).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "kiln/io.h"

namespace kiln::io::detail {

// The reference implementation's cap on the JSON header (100 MB).
inline constexpr uint64_t kMaxHeaderBytes = 100'000'000;

// One tensor's entry in the header, checked against the buffer it came from.
struct TensorRecord {
  std::string name;
  ScalarType dtype = kFloat32;
  Shape shape;
  uint64_t begin = 0;  // byte offsets into the data section
  uint64_t end = 0;
};

struct SafetensorsHeader {
  std::vector<TensorRecord> tensors;  // in header order
  std::map<std::string, std::string> metadata;
  size_t data_start = 0;  // where the data section begins in the buffer
};

// Parses and validates a whole safetensors buffer's layout: every length, offset, dtype and
// shape is checked against `size` before use, and BOOL data holds only 0 and 1. Errors:
// "[where] <origin>: ...".
SafetensorsHeader parse_safetensors_header(const uint8_t* data, size_t size, const char* where,
                                           const std::string& origin);

// parse_safetensors_header, then copies each tensor into a new CPU tensor.
SafetensorsFile parse_safetensors(const uint8_t* data, size_t size, const char* where,
                                  const std::string& origin);

// zlib's CRC-32 (Python's zlib.crc32) of n more bytes, and as 8 lower-case hex digits.
uint32_t crc32_update(uint32_t crc, const void* data, size_t n);
std::string crc32_hex(uint32_t crc);

// The safetensors name of a kiln dtype ("F32", "BOOL", ...).
const char* safetensors_dtype_name(ScalarType t);

}  // namespace kiln::io::detail
