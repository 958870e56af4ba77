// Reads a whole (untrusted) file into memory for the text readers, with kiln::Error on failure.
#pragma once

#include <string>

namespace kiln::text::detail {

// Errors "[where] <path>: does not exist / is a directory, not a file / not a regular file /
// cannot be opened / is larger than <max_bytes> bytes". Only regular files are read: a FIFO or a
// device is refused at once, never waited on or read without end.
std::string read_file(const std::string& path, const char* where, size_t max_bytes = size_t{1} << 32);

}  // namespace kiln::text::detail
