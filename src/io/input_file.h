// InputFile: a regular file opened for reading, closed when it goes out of scope.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace kiln::io {

// Read with pread, not mapped: a file that shrinks while it is read (another program rewriting
// it in place, as Python's save_file and cp do) or whose read fails (a network file system, a
// bad sector) is a kiln::Error naming it, where a mapping would kill the process with SIGBUS.
class InputFile {
 public:
  // Errors are kiln::Error "[where] <path>: ..." (a missing file, a directory, a FIFO).
  InputFile(const std::string& path, const char* where);
  ~InputFile();
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  uint64_t size() const { return size_; }  // when it was opened
  const std::string& path() const { return path_; }
  // n bytes at `offset` into dst; fewer (the file shrank) or a failed read is a kiln::Error
  // "[where] <path>: the file changed or could not be read while it was read (...)".
  void read(uint64_t offset, void* dst, size_t n) const;
  // The whole file; one over max_bytes is a kiln::Error saying so.
  std::string read_all(uint64_t max_bytes, const char* what = "file") const;

 private:
  int fd_ = -1;
  uint64_t size_ = 0;
  std::string path_;
  const char* where_;
};

}  // namespace kiln::io
