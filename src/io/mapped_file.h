// MappedFile: a read-only memory mapping of a whole file, unmapped when it goes out of scope.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace kiln::io {

class MappedFile {
 public:
  // Errors are kiln::Error "[where] <path>: ..." (missing file, a directory, mmap failure).
  MappedFile(const std::string& path, const char* where);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace kiln::io
