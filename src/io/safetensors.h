// Internal safetensors entry points: parse and serialize from/to memory (the fuzzer and the
// file functions in kiln/io.h share them).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
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

// Parses and validates a safetensors file's layout: every length, offset, dtype and shape is
// checked against the file's size before use. `head` holds the file's first head_size bytes: at
// least the 8-byte length and the header it gives, where the file has them (a short head is an
// error). Errors: "[where] <origin>: ...".
SafetensorsHeader parse_safetensors_header(const uint8_t* head, size_t head_size, uint64_t file_size,
                                           const char* where, const std::string& origin);
// The same for a whole file in memory.
SafetensorsHeader parse_safetensors_header(const uint8_t* data, size_t size, const char* where,
                                           const std::string& origin);

// Reads n bytes at `offset` into the data section into dst (a file, or a buffer in memory).
using ReadData = std::function<void(uint64_t offset, void* dst, size_t n)>;
// Reads each tensor `h` describes into a new CPU tensor, in the file's order; BOOL data must
// hold only 0 and 1 (any other byte is undefined behaviour once read as bool). `seen`, when
// given, is shown the whole data section in order, a tensor at a time (a checkpoint's checksums).
std::map<std::string, Tensor> read_tensors(const SafetensorsHeader& h, const ReadData& read, const char* where,
                                           const std::string& origin,
                                           const std::function<void(const void*, size_t)>& seen = {});

// parse_safetensors_header and read_tensors of a whole file in memory.
SafetensorsFile parse_safetensors(const uint8_t* data, size_t size, const char* where,
                                  const std::string& origin);

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
