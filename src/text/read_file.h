// Reads a whole (untrusted) file into memory for the text readers, with kiln::Error on failure.
#pragma once

#include <string>

namespace kiln::text::detail {

// Errors "[where] <path>: does not exist / is a directory / cannot be read / is larger than
// <max_bytes> bytes".
std::string read_file(const std::string& path, const char* where, size_t max_bytes = size_t{1} << 32);

}  // namespace kiln::text::detail
