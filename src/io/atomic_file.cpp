// AtomicFile: write to a temporary in the target's directory, fsync, rename over the target, fsync
// the directory — so a failed or interrupted save never destroys the previous file.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>

#include "kiln/error.h"
#include "kiln/io.h"

namespace kiln::io {

namespace {

std::string directory_of(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// How the temporaries of a file named `base` start: ".BASE.tmp.". A long name (up to 255 bytes is
// valid) is cut to 150 bytes and a hash of the whole (FNV-1a) so that the temporary's name, about
// 25 bytes longer, is still a valid one.
std::string temp_prefix(const std::string& base) {
  if (base.size() <= 200) return "." + base + ".tmp.";
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : base) h = (h ^ c) * 1099511628211ull;
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return "." + base.substr(0, 150) + "~" + hex + ".tmp.";
}

// A name no other writer (thread or process) picks: pid, a per-process counter and a random
// number. O_EXCL makes a collision an EEXIST we retry rather than a shared file.
std::string temp_name(const std::string& path) {
  static std::atomic<uint64_t> counter{0};
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  size_t slash = path.rfind('/');
  std::string dir = slash == std::string::npos ? "" : path.substr(0, slash + 1);
  std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  return dir + temp_prefix(base) + std::to_string(::getpid()) + "." + std::to_string(counter.fetch_add(1)) + "." +
         std::to_string(rng() % 1000000);
}

// Removes temporaries that earlier writers of `path` left behind when they were killed mid-save
// (temp_prefix + "PID.*" whose process is gone): each can be as large as the file itself.
void remove_stale_temporaries(const std::string& path) {
  namespace fs = std::filesystem;
  const fs::path target(path);
  const std::string prefix = temp_prefix(target.filename().string());
  std::error_code ec;
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind(prefix, 0) != 0) continue;
    const long pid = std::strtol(name.c_str() + prefix.size(), nullptr, 10);
    // A live writer (this process or another) may still be saving: keep its file.
    if (pid <= 0 || pid == ::getpid() || ::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM) continue;
    fs::remove(it->path(), ec);
  }
}

// The file a save to `path` replaces: `path` itself, or, where it is a symbolic link, the file the
// link names (followed through further links, relative ones from their own directory), so the
// link is kept and its target updated, as Python's open(path, "w") does. The target need not
// exist yet (a dangling link gets its file).
std::string resolve_links(const std::string& path, const char* where) {
  std::string p = path;
  for (int hops = 0;; ++hops) {
    struct stat st {};
    if (::lstat(p.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) return p;
    KILN_CHECK(hops < 40, where, path, ": too many levels of symbolic links");
    std::string target(static_cast<size_t>(st.st_size > 0 ? st.st_size : 255) + 1, '\0');
    ssize_t n = ::readlink(p.c_str(), target.data(), target.size());
    KILN_CHECK(n >= 0, where, path, ": cannot read the symbolic link ", p, ": ", std::strerror(errno));
    KILN_CHECK(static_cast<size_t>(n) < target.size(), where, path, ": the symbolic link ", p, " changed while read");
    target.resize(static_cast<size_t>(n));
    KILN_CHECK(!target.empty() && target.back() != '/', where, path, ": the symbolic link ", p, " names \"", target,
               "\", which is not a file path");
    p = target[0] == '/' || p.find('/') == std::string::npos ? target : directory_of(p) + "/" + target;
  }
}

}  // namespace

AtomicFile::AtomicFile(const std::string& path, const char* where) : path_(path), where_(where) {
  KILN_CHECK(!path.empty() && path.back() != '/', where_, "\"", path, "\" is not a file path");
  target_ = resolve_links(path, where_);
  // A device, FIFO or socket (a link to /dev/null to throw checkpoints away) is never replaced
  // by a regular file: as root, renaming over /dev/null would break the machine.
  struct stat old {};
  const bool replaces = ::stat(target_.c_str(), &old) == 0;
  KILN_CHECK(!replaces || S_ISREG(old.st_mode), where_, path_,
             target_ == path_ ? "" : " (a link to " + target_ + ")", ": is not a regular file; not replaced");
  remove_stale_temporaries(target_);
  for (int attempt = 0; attempt < 100; ++attempt) {
    temp_path_ = temp_name(target_);
    // Mode 0666 filtered by the umask: a new file gets the permissions any new file would.
    fd_ = ::open(temp_path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd_ >= 0) break;
    if (errno != EEXIST) break;
  }
  if (fd_ < 0) {
    int err = errno;
    KILN_FAIL(where_, path_, ": cannot create a temporary file ", temp_path_, " in its directory: ",
              std::strerror(err));
  }
  // A file being replaced keeps its permissions (a private checkpoint stays private), and its
  // group and owner where this process may set them; set now, before any data is written.
  if (replaces) {
    struct stat now {};
    if (::fstat(fd_, &now) == 0 && (now.st_uid != old.st_uid || now.st_gid != old.st_gid))
      (void)!::fchown(fd_, old.st_uid, old.st_gid);  // not permitted (another user's file): keep ours
    if (::fchmod(fd_, old.st_mode & 07777) != 0)
      fail("cannot give the temporary file the permissions of the file it replaces", errno);
  }
}

AtomicFile::~AtomicFile() {
  if (!committed_) discard();
}

void AtomicFile::discard() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!temp_path_.empty()) ::unlink(temp_path_.c_str());
}

void AtomicFile::fail(const std::string& what, int err) {
  discard();
  KILN_FAIL(where_, path_, ": ", what, ": ", std::strerror(err));
}

void AtomicFile::write(const void* data, size_t nbytes) {
  KILN_CHECK(fd_ >= 0 && !committed_, where_, path_, ": write after commit or failure");
  const char* p = static_cast<const char*>(data);
  while (nbytes > 0) {
    ssize_t n = ::write(fd_, p, nbytes);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("write failed", errno);
    }
    p += n;
    nbytes -= static_cast<size_t>(n);
  }
}

void AtomicFile::commit() {
  KILN_CHECK(fd_ >= 0 && !committed_, where_, path_, ": commit after commit or failure");
  if (::fsync(fd_) != 0) fail("fsync failed", errno);
  int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) fail("close failed", errno);
  if (::rename(temp_path_.c_str(), target_.c_str()) != 0) fail("cannot rename the temporary file over it", errno);
  committed_ = true;
  // The rename is durable only once the directory entry is on disk. Some file systems cannot
  // fsync a directory (EINVAL); the file itself is complete by then.
  int dir = ::open(directory_of(target_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {
    int rc = ::fsync(dir);
    int err = errno;
    ::close(dir);
    KILN_CHECK(rc == 0 || err == EINVAL, where_, path_, ": fsync of its directory failed: ", std::strerror(err));
  }
}

void write_file_atomically(const std::string& path, const std::function<void(AtomicFile&)>& writer,
                           const char* where) {
  AtomicFile file(path, where);
  writer(file);  // on an exception, ~AtomicFile removes the temporary
  file.commit();
}

}  // namespace kiln::io
