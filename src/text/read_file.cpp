// Whole-file reads for vocabularies and corpora, checked at every step.
#include "text/read_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "kiln/error.h"

namespace kiln::text::detail {

namespace {

struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

std::string read_file(const std::string& path, const char* where, size_t max_bytes) {
  // O_NONBLOCK: the open does not wait on a FIFO before it is known to be one. Devices are
  // refused (/dev/zero would be read up to max_bytes); a pipe (--data <(zcat corpus.gz), or
  // /dev/stdin piped) is read to its end, opened again to wait for its writer as any reader of a
  // FIFO does. One open then fstat, so what is checked is what is read.
  Fd f{::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC)};
  if (f.fd < 0) {
    int err = errno;
    KILN_CHECK(err != ENOENT, where, path, ": does not exist");
    KILN_FAIL(where, path, ": cannot be opened: ", std::strerror(err));
  }
  struct stat st {};
  KILN_CHECK(::fstat(f.fd, &st) == 0, where, path, ": cannot stat: ", std::strerror(errno));
  KILN_CHECK(!S_ISDIR(st.st_mode), where, path, ": is a directory, not a file");
  KILN_CHECK(S_ISREG(st.st_mode) || S_ISFIFO(st.st_mode), where, path, ": not a regular file or a pipe");
  if (S_ISFIFO(st.st_mode)) {
    Fd blocking{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
    KILN_CHECK(blocking.fd >= 0, where, path, ": cannot be opened: ", std::strerror(errno));
    std::swap(f.fd, blocking.fd);
  }
  KILN_CHECK(static_cast<uint64_t>(st.st_size) <= max_bytes, where, path, ": is larger than ", max_bytes, " bytes");
  std::string data;
  data.reserve(static_cast<size_t>(st.st_size));
  char buf[1 << 16];
  // Read to the end rather than trusting the size fstat gave (a file that grows meanwhile).
  for (;;) {
    ssize_t n = ::read(f.fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      KILN_FAIL(where, path, ": read error: ", std::strerror(errno));
    }
    if (n == 0) break;
    KILN_CHECK(data.size() + static_cast<size_t>(n) <= max_bytes, where, path, ": is larger than ", max_bytes,
               " bytes");
    data.append(buf, static_cast<size_t>(n));
  }
  return data;
}

}  // namespace kiln::text::detail
