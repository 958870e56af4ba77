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
// The most memory the parsed header may take while it is checked (json::ParseLimits): 24 times
// its text, and at least 256 MiB. A real header of many tensors takes some 16 times its text as
// a tree; a hostile one of tiny values (`[0,0,...]`) took 65 times before the bounds.
inline constexpr size_t kMinHeaderTreeBytes = size_t{256} << 20;
inline constexpr size_t kHeaderTreeBytesPerByte = 24;

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
// Copies each tensor `h` describes out of `data` (the buffer `h` was parsed from) into a new CPU tensor.
std::map<std::string, Tensor> copy_tensors(const SafetensorsHeader& h, const uint8_t* data);

// The header's JSON as the Python library writes it (compact, "__metadata__" first when there
// is any, then the tensors in the order given), without the padding.
std::string header_json(const std::map<std::string, std::string>& metadata, const std::vector<TensorRecord>& tensors);

// The checksum entry's value while the checksum is computed (kChecksumKey in kiln/io.h).
inline constexpr const char* kZeroChecksum = "00000000";

// zlib's CRC-32 (Python's zlib.crc32) of n more bytes, and as 8 lower-case hex digits.
uint32_t crc32_update(uint32_t crc, const void* data, size_t n);
std::string crc32_hex(uint32_t crc);

// The safetensors name of a kiln dtype ("F32", "BOOL", ...).
const char* safetensors_dtype_name(ScalarType t);

}  // namespace kiln::io::detail
