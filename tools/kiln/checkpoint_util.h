// Helpers shared by the trainers' checkpoints: prefixed tensor maps, checked metadata entries,
// exact numbers, and the checkpoint directory's check before training.
#pragma once

#include <map>
#include <string>

#include <filesystem>

#include "kiln/error.h"
#include "kiln/io.h"

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
  int64_t integer(const std::string& key) const;  // the whole string must parse
  double number(const std::string& key) const;
  // The "format" entry must equal `format`.
  void check_format(const std::string& format) const;

 private:
  const io::SafetensorsFile& file_;
  std::string path_, where_;
};

// A double as the shortest text that reads back to the same value ("0.0001", not "0.000100").
std::string exact_number(double v);

// Creates `dir` if needed and makes sure a file can be written there, before any training time
// is spent: else a kiln::Error "[where] cannot write checkpoints to DIR: ...".
void check_checkpoint_dir(const std::string& dir, const char* where);

// The evaluation of a trainer (Trainer or MlmTrainer) restored from the checkpoint `path`, on
// `data` and `device` (empty: the checkpoint's data, the best device); errors name kiln eval.
template <class TrainerT, class OptionsT = typename std::remove_cvref_t<decltype(std::declval<TrainerT>().options())>>
auto evaluate_restored(const std::string& path, const std::string& data, const std::string& device, bool verify) {
  KILN_CHECK(std::filesystem::is_regular_file(path), "kiln eval", "no checkpoint file at '", path, "'");
  OptionsT o;
  o.command = "kiln eval";
  o.resume = true;
  o.resume_from = path;
  o.verify_checkpoint = verify;
  o.data = data;
  o.device = device;
  return TrainerT(o).evaluate();
}

}  // namespace kiln::train
