// Whole-file reads for vocabularies and corpora, checked at every step.
#include "text/read_file.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>

#include "kiln/error.h"

namespace kiln::text::detail {

std::string read_file(const std::string& path, const char* where, size_t max_bytes) {
  std::error_code ec;
  auto status = std::filesystem::status(path, ec);
  KILN_CHECK(!ec && std::filesystem::exists(status), where, path, ": does not exist");
  KILN_CHECK(!std::filesystem::is_directory(status), where, path, ": is a directory, not a file");
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  KILN_CHECK(f != nullptr, where, path, ": cannot be opened: ", std::strerror(errno));
  std::string data;
  char buf[1 << 16];
  // Read to the end rather than trusting the size a stat gives (pipes, files that grow).
  while (true) {
    size_t n = std::fread(buf, 1, sizeof buf, f.get());
    if (n > 0) {
      KILN_CHECK(data.size() + n <= max_bytes, where, path, ": is larger than ", max_bytes, " bytes");
      data.append(buf, n);
    }
    if (n < sizeof buf) {
      KILN_CHECK(!std::ferror(f.get()), where, path, ": read error: ", std::strerror(errno));
      break;
    }
  }
  return data;
}

}  // namespace kiln::text::detail
