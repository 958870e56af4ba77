// Helpers shared by the trainers' checkpoints.
#include "tools/kiln/checkpoint_util.h"

#include <type_traits>

#include "kiln/error.h"

namespace kiln::train {
namespace {

template <class T>
T meta_number(const io::SafetensorsFile& f, const std::string& key, const std::string& path) {
  const std::string& s = meta(f, key, path);
  try {
    size_t used = 0;
    T v;
    if constexpr (std::is_integral_v<T>) v = std::stoll(s, &used);
    else v = std::stod(s, &used);
    if (used == s.size()) return v;
  } catch (const std::exception&) {
  }
  KILN_FAIL("kiln train", "checkpoint ", path, ": entry '", key, "' is not a number: '", s, "'");
}

}  // namespace

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

const std::string& meta(const io::SafetensorsFile& f, const std::string& key, const std::string& path) {
  auto it = f.metadata.find(key);
  KILN_CHECK(it != f.metadata.end(), "kiln train", "checkpoint ", path, " has no '", key,
             "' entry: not a checkpoint written by kiln train");
  return it->second;
}

int64_t meta_int(const io::SafetensorsFile& f, const std::string& key, const std::string& path) {
  return meta_number<int64_t>(f, key, path);
}

double meta_double(const io::SafetensorsFile& f, const std::string& key, const std::string& path) {
  return meta_number<double>(f, key, path);
}

void check_format(const io::SafetensorsFile& f, const std::string& format, const std::string& path) {
  const std::string& got = meta(f, "format", path);
  KILN_CHECK(got == format, "kiln train", "checkpoint ", path, " has format '", got, "', expected '", format, "'");
}

}  // namespace kiln::train
