// kiln::train's checkpoint helpers: see checkpoint.h.
#include "kiln/train/checkpoint.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <system_error>

#include "core/parse_number.h"
#include "kiln/error.h"

namespace kiln::train {

std::map<std::string, Tensor> prefixed(const std::map<std::string, Tensor>& m, const std::string& prefix) {
  std::map<std::string, Tensor> out;
  for (const auto& [k, v] : m) out[prefix + k] = v;
  return out;
}

std::map<std::string, Tensor> with_prefix(const std::map<std::string, Tensor>& m, const std::string& prefix) {
  std::map<std::string, Tensor> out;
  for (const auto& [k, v] : m)
    if (k.rfind(prefix, 0) == 0) out[k.substr(prefix.size())] = v;
  return out;
}

const std::string& CheckpointMeta::text(const std::string& key) const {
  auto it = file_.metadata.find(key);
  KILN_CHECK(it != file_.metadata.end(), where_.c_str(), "checkpoint ", path_, " has no '", key,
             "' entry: not a checkpoint written by kiln train");
  return it->second;
}

int64_t CheckpointMeta::integer(const std::string& key) const {
  const std::optional<int64_t> v = detail::parse_number<int64_t>(text(key));
  KILN_CHECK(v, where_.c_str(), "checkpoint ", path_, ": entry '", key, "' is not an integer: '", text(key), "'");
  return *v;
}

uint64_t CheckpointMeta::unsigned_integer(const std::string& key) const {
  const std::optional<uint64_t> v = detail::parse_number<uint64_t>(text(key));
  KILN_CHECK(v, where_.c_str(), "checkpoint ", path_, ": entry '", key, "' is not an unsigned integer: '", text(key),
             "'");
  return *v;
}

double CheckpointMeta::number(const std::string& key) const {
  const std::optional<double> v = detail::parse_number<double>(text(key));
  KILN_CHECK(v, where_.c_str(), "checkpoint ", path_, ": entry '", key, "' is not a number: '", text(key), "'");
  return *v;
}

void CheckpointMeta::check_format(const std::string& format) const {
  const std::string& got = text("format");
  KILN_CHECK(got == format, where_.c_str(), "checkpoint ", path_, " has format '", got, "', expected '", format, "'");
}

std::string exact_number(double v) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return ec == std::errc() ? std::string(buf, end) : std::to_string(v);
}

void check_checkpoint_dir(const std::string& dir, const char* where) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(dir, ec);
  KILN_CHECK(!ec, where, "cannot write checkpoints to ", dir, ": ", ec.message());
  KILN_CHECK(fs::is_directory(dir, ec), where, "cannot write checkpoints to ", dir, ": it is not a directory");
  // Writable in fact (a read-only mount passes the permission bits): create and remove a file.
  const std::string probe = (fs::path(dir) / (".kiln-write-check." + std::to_string(::getpid()))).string();
  bool written = false;
  {
    std::ofstream f(probe);
    written = f.good() && (f << "x").flush().good();  // flushed: a full disk fails here
    f.close();
    written = written && !f.fail();
  }
  fs::remove(probe, ec);  // whether or not it was written
  KILN_CHECK(written, where, "cannot write checkpoints to ", dir, ": files cannot be created there");
}

}  // namespace kiln::train
