// Reads a whole (untrusted) file into memory for the text readers, with kiln::Error on failure.
#pragma once

#include <string>

namespace kiln::text::detail {

// Errors "[where] <path>: does not exist / is a directory, not a file / not a regular file or a
// pipe / cannot be opened / is larger than <max_bytes> bytes". Regular files and pipes are read
// (a named FIFO waits for its writer, as any reader's does); a device is refused at once, never
// read without end.
std::string read_file(const std::string& path, const char* where, size_t max_bytes = size_t{1} << 32);

}  // namespace kiln::text::detail
