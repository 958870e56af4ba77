// kiln::train's checkpoint helpers: prefixed tensor maps, checked metadata entries, exact
// numbers, and the checkpoint directory's check before training.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "kiln/io.h"
#include "kiln/tensor.h"

namespace kiln::train {

// Every key of m with `prefix` put in front.
std::map<std::string, Tensor> prefixed(const std::map<std::string, Tensor>& m, const std::string& prefix);
// The entries of m whose key starts with `prefix`, with it taken off.
std::map<std::string, Tensor> with_prefix(const std::map<std::string, Tensor>& m, const std::string& prefix);

// A checkpoint's metadata, read with checks: a missing or malformed entry is a kiln::Error
// "[where] checkpoint PATH has no 'KEY' entry" naming the command (kiln train, kiln eval).
class CheckpointMeta {
 public:
  CheckpointMeta(const io::SafetensorsFile& file, std::string path, std::string where)
      : file_(file), path_(std::move(path)), where_(std::move(where)) {}
  const std::string& text(const std::string& key) const;
  // The whole string must parse, in the C locale whatever the program's (as exact_number writes).
  int64_t integer(const std::string& key) const;
  uint64_t unsigned_integer(const std::string& key) const;  // seeds: all 64 bits
  double number(const std::string& key) const;                // subnormals too
  bool has(const std::string& key) const { return file_.metadata.count(key) > 0; }
  // The "format" entry must equal `format`.
  void check_format(const std::string& format) const;
  const std::string& path() const { return path_; }

 private:
  const io::SafetensorsFile& file_;
  std::string path_, where_;
};

// A double as the shortest text that reads back to the same value ("0.0001", not "0.000100").
std::string exact_number(double v);

// Creates `dir` if needed and makes sure a file can be written there, before any training time
// is spent: else a kiln::Error "[where] cannot write checkpoints to DIR: ...".
void check_checkpoint_dir(const std::string& dir, const char* where);

}  // namespace kiln::train
