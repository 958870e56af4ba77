// InputFile: open and fstat a file, then pread it.
#include "io/input_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "kiln/error.h"

namespace kiln::io {

InputFile::InputFile(const std::string& path, const char* where) : path_(path), where_(where) {
  // O_NONBLOCK: a FIFO given as the file would otherwise block the open until a writer comes;
  // it is then refused below as not a regular file (regular files ignore the flag).
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  KILN_CHECK(fd_ >= 0, where, path, ": cannot open: ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd_, &st) != 0) {
    const int err = errno;
    ::close(fd_);
    KILN_FAIL(where, path, ": cannot stat: ", std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd_);
    KILN_FAIL(where, path, ": not a regular file");
  }
  size_ = static_cast<uint64_t>(st.st_size);
}

InputFile::~InputFile() { ::close(fd_); }

void InputFile::read(uint64_t offset, void* dst, size_t n) const {
  auto* out = static_cast<char*>(dst);
  size_t done = 0;
  while (done < n) {
    // At most 1 GiB a call: Linux reads at most about 2 GiB in one.
    const size_t chunk = std::min<size_t>(n - done, size_t{1} << 30);
    const ssize_t got = ::pread(fd_, out + done, chunk, static_cast<off_t>(offset + done));
    if (got < 0 && errno == EINTR) continue;
    KILN_CHECK(got > 0, where_, path_, ": the file changed or could not be read while it was read (",
               got < 0 ? std::strerror(errno) : "it ended early", ": read ", done, " of ", n, " bytes at offset ",
               offset, "; it had ", size_, " bytes when opened)");
    done += static_cast<size_t>(got);
  }
}

std::string InputFile::read_all(uint64_t max_bytes, const char* what) const {
  KILN_CHECK(size_ <= max_bytes, where_, path_, ": ", size_, " bytes is too large for a ", what, " (at most ",
             max_bytes, ")");
  std::string s(static_cast<size_t>(size_), '\0');
  read(0, s.data(), s.size());
  return s;
}

}  // namespace kiln::io
