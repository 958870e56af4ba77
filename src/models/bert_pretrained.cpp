// Reading Hugging Face's BERT files: config.json into BertConfig, and a state dict (with the
// renames old and new checkpoints need) into a Kiln BERT.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>
#include <string_view>

#include "core/parse_number.h"
#include "io/input_file.h"
#include "io/json.h"
#include "kiln/io.h"
#include "kiln/models/bert.h"
#include "models/bert_util.h"

namespace kiln::models {
namespace {

namespace fs = std::filesystem;

// `dir_or_file`, or `dir_or_file/name` when it is a directory.
std::string file_in(const std::string& dir_or_file, const char* name) {
  std::error_code ec;
  return fs::is_directory(dir_or_file, ec) ? (fs::path(dir_or_file) / name).string() : dir_or_file;
}

void set_int(const io::json::Value& v, const std::string& path, const std::string& key, int64_t& out) {
  KILN_CHECK(v.kind == io::json::Value::Kind::Number && v.is_integer, "BertConfig::from_pretrained", path, ": \"",
             key, "\" must be an integer, got ", v.describe());
  out = v.integer;
}

void set_double(const io::json::Value& v, const std::string& path, const std::string& key, double& out) {
  KILN_CHECK(v.kind == io::json::Value::Kind::Number, "BertConfig::from_pretrained", path, ": \"", key,
             "\" must be a number, got ", v.describe());
  const std::optional<double> d = kiln::detail::parse_number<double>(v.text);
  KILN_CHECK(d && std::isfinite(*d), "BertConfig::from_pretrained", path, ": \"", key, "\" is out of range: ", v.text);
  out = *d;
}

bool starts_with_any(const std::string& key, std::initializer_list<std::string_view> prefixes) {
  for (auto p : prefixes)
    if (key.starts_with(p)) return true;
  return false;
}

// A key of one of the heads of Hugging Face's BERT classes, outside "bert.": pre-training (cls.),
// sequence and token classification (classifier.), question answering (qa_outputs.).
bool task_head(const std::string& key) { return starts_with_any(key, {"cls.", "classifier.", "qa_outputs."}); }

}  // namespace

BertConfig BertConfig::from_pretrained(const std::string& dir_or_file) {
  const char* where = "BertConfig::from_pretrained";
  const std::string path = file_in(dir_or_file, "config.json");
  const std::string text = io::InputFile(path, where).read_all(1u << 20, "config.json");
  io::json::Value root = io::json::parse(text, where, path + ": ");
  KILN_CHECK(root.kind == io::json::Value::Kind::Object, where, path, ": expected a JSON object, got ",
             root.describe());
  BertConfig c;
  for (const auto& [key, v] : root.members) {
    if (key == "model_type") {
      KILN_CHECK(v.kind == io::json::Value::Kind::String && v.text == "bert", where, path,
                 ": model_type must be \"bert\", got ", v.describe());
    } else if (key == "vocab_size") {
      set_int(v, path, key, c.vocab_size);
    } else if (key == "hidden_size") {
      set_int(v, path, key, c.hidden_size);
    } else if (key == "num_hidden_layers") {
      set_int(v, path, key, c.num_hidden_layers);
    } else if (key == "num_attention_heads") {
      set_int(v, path, key, c.num_attention_heads);
    } else if (key == "intermediate_size") {
      set_int(v, path, key, c.intermediate_size);
    } else if (key == "hidden_act") {
      KILN_CHECK(v.kind == io::json::Value::Kind::String, where, path, ": \"hidden_act\" must be a string, got ",
                 v.describe());
      c.hidden_act = v.text;
    } else if (key == "max_position_embeddings") {
      set_int(v, path, key, c.max_position_embeddings);
    } else if (key == "type_vocab_size") {
      set_int(v, path, key, c.type_vocab_size);
    } else if (key == "layer_norm_eps") {
      set_double(v, path, key, c.layer_norm_eps);
    } else if (key == "hidden_dropout_prob") {
      set_double(v, path, key, c.hidden_dropout_prob);
    } else if (key == "attention_probs_dropout_prob") {
      set_double(v, path, key, c.attention_probs_dropout_prob);
    } else if (key == "initializer_range") {
      set_double(v, path, key, c.initializer_range);
    } else if (key == "classifier_dropout") {
      if (v.kind != io::json::Value::Kind::Null) {
        double p = 0;
        set_double(v, path, key, p);
        c.classifier_dropout = p;
      }
    } else if (key == "is_decoder" || key == "add_cross_attention") {
      KILN_CHECK(v.kind == io::json::Value::Kind::Bool, where, path, ": \"", key, "\" must be true or false, got ",
                 v.describe());
      KILN_CHECK(!v.boolean, where, path, ": \"", key,
                 "\": true (a causal or cross-attending BERT) is not supported; Kiln builds the bidirectional encoder");
    } else if (key == "position_embedding_type") {
      KILN_CHECK(v.kind == io::json::Value::Kind::String && v.text == "absolute", where, path,
                 ": \"position_embedding_type\" ", v.describe(), " is not supported (only \"absolute\")");
    } else if (key == "tie_word_embeddings") {
      KILN_CHECK(v.kind == io::json::Value::Kind::Bool, where, path, ": \"", key, "\" must be true or false, got ",
                 v.describe());
      c.tie_word_embeddings = v.boolean;  // refused by BertForMaskedLM alone, as it matters there alone
    } else if (key == "pad_token_id") {
      if (v.kind == io::json::Value::Kind::Null) {
        c.pad_token_id.reset();
      } else {
        int64_t id = 0;
        set_int(v, path, key, id);
        c.pad_token_id = id;
      }
    }
  }
  c.validate();
  return c;
}

std::vector<std::string> load_hf_state_dict(nn::Module& model, std::map<std::string, Tensor> state) {
  const char* where = "load_hf_state_dict";
  const auto own = model.state_dict();
  bool headed = false;  // the model's names start with "bert." (it has a head)
  for (const auto& [k, t] : own) headed = headed || k.starts_with("bert.");

  // TensorFlow-era LayerNorm names.
  std::map<std::string, Tensor> renamed;
  for (auto& [k, t] : state) {
    std::string key = k;
    if (key.ends_with(".gamma")) key = key.substr(0, key.size() - 6) + ".weight";
    else if (key.ends_with(".beta")) key = key.substr(0, key.size() - 5) + ".bias";
    KILN_CHECK(renamed.emplace(key, t).second, where, "both \"", key, "\" and its old name \"", k, "\" are present");
  }
  state = std::move(renamed);

  // A base-model file into a headed model, or a headed file into a base model.
  bool file_headed = false, file_base = false;
  for (const auto& [k, t] : state) {
    file_headed = file_headed || k.starts_with("bert.");
    file_base = file_base || k.starts_with("embeddings.");
  }
  if (headed != file_headed && (file_headed || file_base)) {
    std::map<std::string, Tensor> moved;
    for (auto& [k, t] : state) {
      std::string key = k;
      if (headed && !task_head(k)) key = "bert." + k;
      if (!headed && k.starts_with("bert.")) key = k.substr(5);
      KILN_CHECK(moved.emplace(key, t).second, where, "\"", key, "\" appears with and without the \"bert.\" prefix");
    }
    state = std::move(moved);
  }

  // The tied decoder: its weight is the word embeddings; its bias is cls.predictions.bias.
  if (auto it = state.find("cls.predictions.decoder.weight"); it != state.end()) {
    auto emb = state.find("bert.embeddings.word_embeddings.weight");
    if (emb != state.end() && own.count("cls.predictions.bias") && it->second.defined() && emb->second.defined()) {
      KILN_CHECK(it->second.shape() == emb->second.shape() && !any(ne(it->second, emb->second)).item<bool>(), where,
                 "cls.predictions.decoder.weight differs from bert.embeddings.word_embeddings.weight; Kiln's "
                 "BertForMaskedLM ties them (tie_word_embeddings = false is not supported)");
    }
    state.erase(it);
  }
  if (auto it = state.find("cls.predictions.decoder.bias"); it != state.end()) {
    if (!state.count("cls.predictions.bias")) state["cls.predictions.bias"] = it->second;
    state.erase("cls.predictions.decoder.bias");
  }

  // Non-persistent buffers that older files saved, and the parts of BERT's checkpoints (task
  // heads, pooler) this architecture lacks: the encoder of a fine-tuned model loads, as Hugging
  // Face's BertModel.from_pretrained loads it (with a warning that they went unused).
  for (auto it = state.begin(); it != state.end();) {
    const std::string& k = it->first;
    bool buffer = k.ends_with("embeddings.position_ids") || k.ends_with("embeddings.token_type_ids");
    bool other_part = !own.count(k) && (task_head(k) || starts_with_any(k, {"bert.pooler.", "pooler."}));
    it = buffer || other_part ? state.erase(it) : std::next(it);
  }

  // Half-precision files load into a float32 model (and the other way round): load_state_dict casts.
  // A fresh task head (and a pooler an MLM checkpoint lacks) keeps its initialisation.
  // So does an MLM head a file without one lacks (a BertModel's, a fine-tuned classifier's), as
  // Hugging Face's BertForMaskedLM.from_pretrained starts it fresh; its decoder is the embeddings.
  std::vector<std::string> newly_initialized;
  const bool file_has_mlm_head =
      std::any_of(state.begin(), state.end(), [](const auto& e) { return e.first.starts_with("cls.predictions."); });
  for (const auto& [k, t] : model.ordered_state_dict()) {
    if (!state.count(k) && (starts_with_any(k, {"classifier.", "bert.pooler.", "pooler."}) ||
                            (!file_has_mlm_head && k.starts_with("cls.predictions.")))) {
      newly_initialized.push_back(k);
      state[k] = t.clone();
    }
  }
  model.load_state_dict(state, true);
  return newly_initialized;
}

std::vector<std::string> load_pretrained(nn::Module& model, const std::string& dir_or_file) {
  const std::string path = file_in(dir_or_file, "model.safetensors");
  std::error_code ec;
  if (!fs::exists(path, ec) && fs::is_directory(dir_or_file, ec)) {
    bool sharded = fs::exists(fs::path(dir_or_file) / "model.safetensors.index.json", ec);
    KILN_FAIL("load_pretrained", dir_or_file, ": no model.safetensors",
              sharded ? " (sharded checkpoints are not supported)" : " (only safetensors files are read)");
  }
  std::map<std::string, Tensor> state = io::load_safetensors(path);
  return kiln::detail::naming("load_pretrained", path, [&] { return load_hf_state_dict(model, std::move(state)); });
}

}  // namespace kiln::models
