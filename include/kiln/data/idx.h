// The IDX file reader (the MNIST format), gzip-compressed or raw.
#pragma once

#include <string>

#include "kiln/tensor.h"

namespace kiln::data {

// Reads an IDX file into a CPU tensor of the file's shape. A file starting with the gzip magic
// bytes (1f 8b) is decompressed with zlib; any other file is read as raw IDX.
//
// Element types: 0x08 unsigned byte -> uint8, 0x0C int32 -> int32, 0x0D float32 -> float32,
// 0x0E float64 -> float64. Kiln has no int8 or int16, so 0x09 (int8) and 0x0B (int16) widen to
// int32 (every value is kept exactly). The file is untrusted: a wrong magic number, an unknown
// type code, a size that overflows, missing or extra bytes, or a corrupt gzip stream all throw
// kiln::Error "[read_idx] <path>: ...".
Tensor read_idx(const std::string& path);

// The same, for an IDX image already in memory (gzip or raw); `name` appears in error messages.
Tensor parse_idx(const void* bytes, size_t size, const std::string& name = "<memory>");

}  // namespace kiln::data
