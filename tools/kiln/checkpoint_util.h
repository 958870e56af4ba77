// Helpers shared by the trainers' checkpoints: prefixed tensor maps and checked metadata entries.
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

// A metadata entry; missing is a kiln::Error "[kiln train] checkpoint PATH has no 'KEY' entry".
const std::string& meta(const io::SafetensorsFile& f, const std::string& key, const std::string& path);
// A number in the metadata: the whole string must parse.
int64_t meta_int(const io::SafetensorsFile& f, const std::string& key, const std::string& path);
double meta_double(const io::SafetensorsFile& f, const std::string& key, const std::string& path);
// The "format" entry must equal `format`.
void check_format(const io::SafetensorsFile& f, const std::string& format, const std::string& path);

// The evaluation of a trainer (Trainer or MlmTrainer) restored from the checkpoint `path`, on
// `data` and `device` (empty: the checkpoint's data, the best device).
template <class TrainerT, class OptionsT = typename std::remove_cvref_t<decltype(std::declval<TrainerT>().options())>>
auto evaluate_restored(const std::string& path, const std::string& data, const std::string& device) {
  KILN_CHECK(std::filesystem::is_regular_file(path), "kiln eval", "no checkpoint file at '", path, "'");
  OptionsT o;
  o.resume = true;
  o.resume_from = path;
  o.data = data;
  o.device = device;
  return TrainerT(o).evaluate();
}

}  // namespace kiln::train
