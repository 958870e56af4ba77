// kiln::models BERT against Hugging Face transformers (tests/fixtures/bert, made by
// tests/fixtures/make_bert_fixture.py): state_dict names, logits, MLM loss and gradients from
// formula weights; files written by save_pretrained (and old-style ones) load and give HF's
// logits; HF's initialisation; input and config checks; a training step lowers the loss.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "fixture_weights.h"
#include "kiln/io.h"
#include "kiln/models.h"
#include "kiln/optim.h"
#include "fixture_util.h"
#include "test_util.h"

namespace kiln::test {
namespace {

using models::BertConfig;

const std::map<std::string, Tensor>& fx() {
  static const auto e = io::load_safetensors(fixture_path("bert/expected.safetensors"));
  return e;
}

const Tensor& want(const std::string& key) { return test::fixture_tensor("bert/expected.safetensors", key); }

// The fixture's BERT-tiny shape with a 512-token vocabulary (field order is HF's).
BertConfig fixture_config() {
  return {.vocab_size = 512, .hidden_size = 128, .num_hidden_layers = 2, .num_attention_heads = 2,
          .intermediate_size = 512, .hidden_act = "gelu", .max_position_embeddings = 64, .type_vocab_size = 2,
          .layer_norm_eps = 1e-12, .hidden_dropout_prob = 0.1, .attention_probs_dropout_prob = 0.1};
}

std::vector<std::string> describe(const nn::Module& m) {
  std::vector<std::string> out;
  for (auto& [n, t] : m.ordered_state_dict()) {
    std::string s;
    for (int64_t d : t.shape()) {
      if (!s.empty()) s += 'x';
      s += std::to_string(d);
    }
    out.push_back(n + " " + s);
  }
  return out;
}

std::vector<std::string> fixture_keys(const std::string& which) {
  std::ifstream in(fixture_path("bert/keys.txt"));
  EXPECT_TRUE(in.good());
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream ss(line);
    std::string model, name, shape;
    ss >> model >> name >> shape;
    if (model == which) out.push_back(name + " " + shape);
  }
  return out;
}

Tensor param(const nn::Module& m, const std::string& name) {
  for (auto& [n, t] : m.named_parameters())
    if (n == name) return t;
  throw std::runtime_error("no parameter " + name);
}

// ---- configuration

TEST(BertConfig, PresetsAndValidation) {
  BertConfig base;
  EXPECT_EQ(base.vocab_size, 30522);
  EXPECT_EQ(base.hidden_act, "gelu");
  EXPECT_EQ(base.layer_norm_eps, 1e-12);
  auto sizes = [](const BertConfig& c) {
    return std::vector<int64_t>{c.num_hidden_layers, c.hidden_size, c.num_attention_heads, c.intermediate_size};
  };
  EXPECT_EQ(sizes(BertConfig::tiny()), (std::vector<int64_t>{2, 128, 2, 512}));
  EXPECT_EQ(sizes(BertConfig::mini()), (std::vector<int64_t>{4, 256, 4, 1024}));
  EXPECT_EQ(sizes(BertConfig::small()), (std::vector<int64_t>{4, 512, 8, 2048}));
  EXPECT_EQ(sizes(BertConfig::base()), (std::vector<int64_t>{12, 768, 12, 3072}));
  EXPECT_EQ(BertConfig::tiny().vocab_size, 30522);

  expect_error([] { models::bert_model({.hidden_size = 100, .num_attention_heads = 3}); },
               "[BertConfig] hidden_size 100 is not a multiple of num_attention_heads 3");
  expect_error([] { models::bert_for_masked_lm({.vocab_size = 0}); }, "[BertConfig] vocab_size must be positive, got 0");
  expect_error([] { BertConfig{.hidden_act = "swish"}.validate(); }, "hidden_act must be \"gelu\", \"gelu_python\"");
  // Hugging Face's other names of the same two GELUs.
  EXPECT_NO_THROW((BertConfig{.hidden_act = "gelu_python"}.validate()));
  EXPECT_NO_THROW((BertConfig{.hidden_act = "gelu_python_tanh"}.validate()));
  expect_error([] { BertConfig{.hidden_dropout_prob = 1.0}.validate(); }, "hidden_dropout_prob must be in [0, 1), got 1");
  expect_error([] { BertConfig{.vocab_size = 10, .pad_token_id = 10}.validate(); },
               "pad_token_id must be in [0, vocab_size 10), got 10");
}

// ---- names

TEST(BertModels, StateDictNamesAndShapesEqualTransformers) {
  auto mlm = models::bert_for_masked_lm(fixture_config());
  EXPECT_EQ(describe(*mlm), fixture_keys("mlm"));
  auto cls = models::bert_for_sequence_classification(fixture_config(), 3);
  EXPECT_EQ(describe(*cls), fixture_keys("cls"));
  auto base = models::bert_model(fixture_config());
  EXPECT_EQ(describe(*base), fixture_keys("base"));
}

TEST(BertModels, DecoderIsTiedAndListedOnce) {
  auto mlm = models::bert_for_masked_lm(BertConfig::tiny());
  EXPECT_TRUE(mlm->cls->predictions->decoder_weight.is_same(mlm->bert->embeddings->word_embeddings->weight));
  EXPECT_EQ(mlm->parameters().size(), mlm->state_dict().size());
  mlm->to(kFloat64);  // conversion keeps the tie (same tensor behind both handles)
  EXPECT_EQ(mlm->cls->predictions->decoder_weight.dtype(), kFloat64);
  EXPECT_TRUE(mlm->cls->predictions->decoder_weight.is_same(mlm->bert->embeddings->word_embeddings->weight));
}

TEST(BertModels, InitialisedAsHuggingFace) {
  manual_seed(11);
  auto mlm = models::bert_for_masked_lm(BertConfig::tiny());
  auto sd = mlm->state_dict();
  auto stats = [](const Tensor& t) {
    std::vector<double> v = values(t);
    double m = 0, s = 0;
    for (double x : v) m += x / v.size();
    for (double x : v) s += (x - m) * (x - m) / v.size();
    return std::pair{m, std::sqrt(s)};
  };
  for (auto name : {"bert.encoder.layer.0.attention.self.query.weight", "bert.encoder.layer.1.output.dense.weight",
                    "bert.embeddings.position_embeddings.weight", "cls.predictions.transform.dense.weight"}) {
    auto [m, s] = stats(sd[name]);
    EXPECT_NEAR(m, 0.0, 0.002) << name;
    EXPECT_NEAR(s, 0.02, 0.002) << name;
  }
  for (auto name : {"bert.encoder.layer.0.attention.self.query.bias", "cls.predictions.bias",
                    "bert.embeddings.LayerNorm.bias"})
    EXPECT_EQ(stats(sd[name]), (std::pair{0.0, 0.0})) << name;
  EXPECT_EQ(stats(sd["bert.encoder.layer.1.attention.output.LayerNorm.weight"]), (std::pair{1.0, 0.0}));
  std::vector<double> row0 = values(sd["bert.embeddings.word_embeddings.weight"].select(0, 0));
  EXPECT_EQ(row0, std::vector<double>(128, 0.0));  // pad_token_id 0
}

// ---- numbers against transformers, from formula weights

TEST(BertModels, MaskedLMLogitsEqualTransformers) {
  auto mlm = models::bert_for_masked_lm(fixture_config());
  mlm->load_state_dict(formula_state_dict(mlm->state_dict()));
  mlm->eval();
  NoGradGuard no_grad;
  expect_rel(mlm(want("input_ids"), want("attention_mask"), want("token_type_ids")), want("mlm.logits"), 1e-4,
             "logits with mask and token types");
  expect_rel(mlm(want("input_ids")), want("mlm.logits_plain"), 1e-4, "logits without mask and token types");
  // int32 ids and a bool mask are the same input.
  expect_rel(mlm(want("input_ids").to(kInt32), want("attention_mask").to(kBool), want("token_type_ids")),
             want("mlm.logits"), 1e-4, "int32 ids, bool mask");
}

TEST(BertModels, MaskedLMLossAndGradientsEqualTransformers) {
  auto mlm = models::bert_for_masked_lm(fixture_config());
  mlm->load_state_dict(formula_state_dict(mlm->state_dict()));
  mlm->eval();
  Tensor logits = mlm(want("input_ids"), want("attention_mask"), want("token_type_ids"));
  Tensor loss = models::BertForMaskedLMImpl::loss(logits, want("labels"));
  expect_rel(loss.reshape({1}), want("mlm.loss"), 1e-5, "loss");
  loss.backward();
  for (auto& [key, ref] : fx()) {
    if (!key.starts_with("mlm.grad.")) continue;
    const std::string name = key.substr(9);
    Tensor g = param(*mlm, name).grad();
    if (name == "bert.embeddings.word_embeddings.weight") g = g.narrow(0, 0, ref.size(0));
    expect_rel(g, ref, 1e-4, name);
  }
}

TEST(BertModels, MaskedLMLossOnLabelledPositionsOnlyIsTheSameLoss) {
  auto mlm = models::bert_for_masked_lm(fixture_config());
  mlm->load_state_dict(formula_state_dict(mlm->state_dict()));
  mlm->eval();
  Tensor loss = mlm->masked_lm_loss(want("input_ids"), want("labels"), want("attention_mask"), want("token_type_ids"));
  expect_rel(loss.reshape({1}), want("mlm.loss"), 1e-5, "loss");
  loss.backward();
  for (auto& [key, ref] : fx()) {
    if (!key.starts_with("mlm.grad.")) continue;
    const std::string name = key.substr(9);
    Tensor g = param(*mlm, name).grad();
    if (name == "bert.embeddings.word_embeddings.weight") g = g.narrow(0, 0, ref.size(0));
    expect_rel(g, ref, 1e-4, name);
  }
  expect_error([&] { mlm->masked_lm_loss(want("input_ids"), zeros({2, 15}, kInt64)); },
               "[BertForMaskedLM::masked_lm_loss] labels must be integer like input_ids [2, 16], got int64 [2, 15]");
}

TEST(BertModels, SequenceClassificationLogitsEqualTransformers) {
  auto seq = models::bert_for_sequence_classification(fixture_config(), 3);
  seq->load_state_dict(formula_state_dict(seq->state_dict()));
  seq->eval();
  NoGradGuard no_grad;
  expect_rel(seq(want("input_ids"), want("attention_mask"), want("token_type_ids")), want("cls.logits"), 1e-4, "logits");
  // The pooled output is tanh of the pooler's dense layer on [CLS].
  Tensor seq_out = seq->bert(want("input_ids"), want("attention_mask"), want("token_type_ids"));
  Tensor pooled = seq->bert->pooled(seq_out);
  EXPECT_EQ(pooled.shape(), (Shape{2, 128}));
  expect_rel(seq->classifier(pooled), want("cls.logits"), 1e-4, "classifier(pooled)");
}

// ---- files written by Hugging Face

const std::map<std::string, Tensor>& tiny_expected() {
  static const auto e = io::load_safetensors(fixture_path("bert/hf_tiny_expected.safetensors"));
  return e;
}

Tensor tiny_logits(models::BertForMaskedLM& m) {
  m->eval();
  NoGradGuard no_grad;
  return m(tiny_expected().at("input_ids"), tiny_expected().at("attention_mask"));
}

TEST(BertPretrained, SavePretrainedDirectoryLoadsAndGivesTransformersLogits) {
  const std::string dir = fixture_path("bert/hf_tiny");
  BertConfig c = BertConfig::from_pretrained(dir);
  EXPECT_EQ(c.vocab_size, 100);
  EXPECT_EQ(c.hidden_size, 32);
  EXPECT_EQ(c.num_hidden_layers, 2);
  EXPECT_EQ(c.intermediate_size, 64);
  EXPECT_EQ(c.max_position_embeddings, 64);
  EXPECT_EQ(c.pad_token_id, 0);
  auto m = models::bert_for_masked_lm(c);
  models::load_pretrained(*m, dir);
  expect_rel(tiny_logits(m), tiny_expected().at("logits"), 1e-4, "logits");
  // The file's tensors are now the model's, bit for bit.
  auto file = io::load_safetensors(dir + "/model.safetensors");
  auto sd = m->state_dict();
  ASSERT_EQ(sd.size(), file.size());
  for (auto& [k, t] : file) EXPECT_EQ(values(sd.at(k)), values(t)) << k;
}

TEST(BertPretrained, OldStyleFileWithGammaBetaAndTiedDecoderKeysLoads) {
  auto m = models::bert_for_masked_lm(BertConfig::from_pretrained(fixture_path("bert/hf_tiny/config.json")));
  auto file = io::load_safetensors(fixture_path("bert/hf_tiny_old.safetensors"));
  ASSERT_TRUE(file.count("cls.predictions.decoder.weight"));
  ASSERT_TRUE(file.count("bert.embeddings.LayerNorm.gamma"));
  models::load_pretrained(*m, fixture_path("bert/hf_tiny_old.safetensors"));
  expect_rel(tiny_logits(m), tiny_expected().at("logits"), 1e-4, "logits");
}

TEST(BertPretrained, BaseModelAndPreTrainingCheckpointsCrossLoad) {
  const std::string dir = fixture_path("bert/hf_tiny");
  BertConfig c = BertConfig::from_pretrained(dir);
  auto file = io::load_safetensors(dir + "/model.safetensors");
  // A headed file into BertModel (cls.* dropped; this one has no pooler, so build none).
  auto base = models::bert_model(c, false);
  EXPECT_TRUE(models::load_hf_state_dict(*base, file).empty());
  EXPECT_EQ(values(base->embeddings->LayerNorm->weight), values(file.at("bert.embeddings.LayerNorm.weight")));
  // Fine-tuning from an MLM checkpoint: the classifier and the pooler (which BertForMaskedLM
  // lacks) keep their initialisation and are reported, as HF's "newly initialized" weights.
  auto seq = models::bert_for_sequence_classification(c, 4);
  std::vector<double> classifier_before = values(seq->classifier->weight);
  auto fresh = models::load_pretrained(*seq, dir);
  EXPECT_EQ(fresh, (std::vector<std::string>{"bert.pooler.dense.weight", "bert.pooler.dense.bias", "classifier.weight",
                                             "classifier.bias"}));
  EXPECT_EQ(values(seq->classifier->weight), classifier_before);
  EXPECT_EQ(values(seq->bert->encoder->layer->ptr<models::BertLayerImpl>(1)->output->dense->bias),
            values(file.at("bert.encoder.layer.1.output.dense.bias")));
  // A base-model file (no "bert." prefix) loads into BertForMaskedLM with a fresh MLM head, as
  // Hugging Face's (continued pre-training of an encoder); its decoder is the loaded embeddings.
  std::map<std::string, Tensor> base_file;
  for (auto& [k, t] : base->state_dict()) base_file[k] = t;
  auto mlm = models::bert_for_masked_lm(c);
  const std::vector<double> transform_before = values(mlm->cls->predictions->transform->dense->weight);
  EXPECT_EQ(models::load_hf_state_dict(*mlm, base_file),
            (std::vector<std::string>{"cls.predictions.bias", "cls.predictions.transform.dense.weight",
                                      "cls.predictions.transform.dense.bias", "cls.predictions.transform.LayerNorm.weight",
                                      "cls.predictions.transform.LayerNorm.bias"}));
  EXPECT_EQ(values(mlm->cls->predictions->transform->dense->weight), transform_before);
  EXPECT_EQ(values(mlm->bert->embeddings->word_embeddings->weight), values(base_file.at("embeddings.word_embeddings.weight")));
  // A file with part of the head is still an error.
  std::map<std::string, Tensor> part = base_file;
  part["cls.predictions.bias"] = file.at("cls.predictions.bias");
  expect_error([&] { models::load_hf_state_dict(*mlm, part); }, "missing keys: cls.predictions.transform");
  // With the head's keys it loads; a pre-training checkpoint's pooler and next-sentence head are dropped.
  for (auto& [k, t] : file)
    if (k.starts_with("cls.")) base_file[k] = t;
  base_file["pooler.dense.weight"] = zeros({32, 32});
  base_file["pooler.dense.bias"] = zeros({32});
  base_file["cls.seq_relationship.weight"] = zeros({2, 32});
  base_file["cls.seq_relationship.bias"] = zeros({2});
  models::load_hf_state_dict(*mlm, base_file);
  expect_rel(tiny_logits(mlm), tiny_expected().at("logits"), 1e-4, "logits after cross-load");
  // float16 files load into a float32 model.
  std::map<std::string, Tensor> half;
  for (auto& [k, t] : file) half[k] = t.to(kFloat16);
  models::load_hf_state_dict(*mlm, half);
  expect_rel(tiny_logits(mlm), tiny_expected().at("logits"), 2e-2, "logits from float16 weights");
}

// The encoder of a fine-tuned model (BertForSequenceClassification, BertForTokenClassification,
// BertForQuestionAnswering files) loads into bert_model, its task head dropped, as Hugging Face's
// BertModel.from_pretrained loads it; they were refused as unexpected keys.
TEST(BertPretrained, TheEncoderOfAFineTunedModelLoads) {
  const std::string dir = fixture_path("bert/hf_tiny");
  BertConfig c = BertConfig::from_pretrained(dir);
  const auto file = io::load_safetensors(dir + "/model.safetensors");
  for (const char* head : {"classifier", "qa_outputs"}) {
    std::map<std::string, Tensor> tuned;
    for (const auto& [k, t] : file)
      if (!k.starts_with("cls.")) tuned[k] = t;
    tuned[std::string(head) + ".weight"] = zeros({2, 32});
    tuned[std::string(head) + ".bias"] = zeros({2});
    auto base = models::bert_model(c, false);
    EXPECT_TRUE(models::load_hf_state_dict(*base, tuned).empty()) << head;
    EXPECT_EQ(values(base->encoder->layer->ptr<models::BertLayerImpl>(1)->output->dense->bias),
              values(file.at("bert.encoder.layer.1.output.dense.bias")))
        << head;
    // Its own head, where the model has one, loads (and a shape that differs is an error).
    if (std::string(head) == "classifier") {
      auto seq = models::bert_for_sequence_classification(c, 2);
      tuned["bert.pooler.dense.weight"] = zeros({32, 32});
      tuned["bert.pooler.dense.bias"] = zeros({32});
      tuned["classifier.bias"] = full({2}, 0.5);
      EXPECT_TRUE(models::load_hf_state_dict(*seq, tuned).empty());
      EXPECT_EQ(values(seq->classifier->bias), (std::vector<double>{0.5, 0.5}));
      auto three = models::bert_for_sequence_classification(c, 3);
      expect_error([&] { models::load_hf_state_dict(*three, tuned); }, "shape mismatch for classifier.weight");
    }
  }
}

TEST(BertPretrained, BadFilesAreClearErrorsAndChangeNothing) {
  const std::string dir = fixture_path("bert/hf_tiny");
  auto m = models::bert_for_masked_lm(BertConfig::from_pretrained(dir));
  auto file = io::load_safetensors(dir + "/model.safetensors");
  std::vector<double> before = values(m->bert->embeddings->word_embeddings->weight);

  auto extra = file;
  extra["bert.encoder.layer.0.attention.self.rotary.weight"] = zeros({2});
  expect_error([&] { models::load_hf_state_dict(*m, extra); },
               "[load_state_dict] unexpected keys: bert.encoder.layer.0.attention.self.rotary.weight");
  auto missing = file;
  missing.erase("bert.encoder.layer.1.output.dense.bias");
  expect_error([&] { models::load_hf_state_dict(*m, missing); }, "missing keys: bert.encoder.layer.1.output.dense.bias");
  auto untied = file;
  untied["cls.predictions.decoder.weight"] = zeros({100, 32});
  expect_error([&] { models::load_hf_state_dict(*m, untied); },
               "[load_hf_state_dict] cls.predictions.decoder.weight differs from bert.embeddings.word_embeddings.weight");
  auto wrong_shape = file;
  wrong_shape["bert.embeddings.position_embeddings.weight"] = zeros({32, 32});
  expect_error([&] { models::load_hf_state_dict(*m, wrong_shape); },
               "shape mismatch for bert.embeddings.position_embeddings.weight");
  EXPECT_EQ(values(m->bert->embeddings->word_embeddings->weight), before);

  expect_error([&] { models::load_pretrained(*m, fixture_path("bert")); }, "no model.safetensors");
  // A file whose keys do not fit is named.
  const std::string bad_keys = (std::filesystem::temp_directory_path() /
                                ("kiln_bert_keys_" + std::to_string(::getpid()) + ".safetensors")).string();
  io::save_safetensors(bad_keys, extra);
  expect_error([&] { models::load_pretrained(*m, bad_keys); },
               "[load_pretrained] " + bad_keys + ": unexpected keys: bert.encoder.layer.0.attention.self.rotary.weight");
  std::filesystem::remove(bad_keys);
  expect_error([] { BertConfig::from_pretrained(fixture_path("bert/hf_tiny/model.safetensors")); },
               "[BertConfig::from_pretrained]");
  // A config of another model type is refused.
  const std::string tmp = (std::filesystem::temp_directory_path() / "kiln_bert_config_test.json").string();
  {
    std::ofstream out(tmp);
    out << R"({"model_type": "roberta", "vocab_size": 10})";
  }
  expect_error([&] { BertConfig::from_pretrained(tmp); }, "model_type must be \"bert\", got \"roberta\"");
  {
    std::ofstream out(tmp);
    out << R"({"model_type": "bert", "hidden_size": "big"})";
  }
  expect_error([&] { BertConfig::from_pretrained(tmp); }, "\"hidden_size\" must be an integer, got \"big\"");
  std::filesystem::remove(tmp);
}

// A config.json of this test's own (ctest runs the tests at once, each a process).
// The file is removed when the test program ends.
std::string write_config(const std::string& json) {
  struct RemovedAtExit {
    std::string path = (std::filesystem::temp_directory_path() /
                        ("kiln_bert_config_" + std::to_string(::getpid()) + ".json")).string();
    ~RemovedAtExit() { std::filesystem::remove(path); }
  };
  static const RemovedAtExit file;
  std::ofstream(file.path) << json;
  return file.path;
}

TEST(BertPretrained, ConfigNumbersReadTheSameInAnyLocale) {
  const std::string path = write_config(
      R"({"model_type": "bert", "hidden_dropout_prob": 0.25, "initializer_range": 0.03, "layer_norm_eps": 1.5e-7})");
  CommaDecimalLocale locale;
  if (!locale.active()) GTEST_SKIP() << "no comma-decimal locale here (de_DE, or localedef with Debian's locales)";
  const BertConfig c = BertConfig::from_pretrained(path);
  EXPECT_EQ(c.hidden_dropout_prob, 0.25);  // strtod read "0" under de_DE
  EXPECT_EQ(c.initializer_range, 0.03);
  EXPECT_EQ(c.layer_norm_eps, 1.5e-7);
}

TEST(BertPretrained, ConfigFieldsThatChangeTheModelAreUsedOrRefused) {
  BertConfig c = BertConfig::from_pretrained(
      write_config(R"({"model_type": "bert", "hidden_size": 16, "num_attention_heads": 2, "classifier_dropout": 0.3,
                      "is_decoder": false, "position_embedding_type": "absolute", "tie_word_embeddings": true})"));
  EXPECT_EQ(c.classifier_dropout, 0.3);
  c.vocab_size = 20, c.num_hidden_layers = 1, c.intermediate_size = 8, c.max_position_embeddings = 8;
  models::BertForSequenceClassification clf(c, 2);
  EXPECT_EQ(clf->dropout->p, 0.3);
  EXPECT_FALSE(BertConfig::from_pretrained(write_config(R"({"classifier_dropout": null})")).classifier_dropout);
  expect_error([] { BertConfig{.classifier_dropout = 1.0}.validate(); }, "classifier_dropout must be in [0, 1), got 1");

  expect_error([] { BertConfig::from_pretrained(write_config(R"({"is_decoder": true})")); },
               "\"is_decoder\": true (a causal or cross-attending BERT) is not supported");
  expect_error([] { BertConfig::from_pretrained(write_config(R"({"add_cross_attention": true})")); },
               "\"add_cross_attention\": true");
  // A string is not a bool (Python would read "false" as true).
  expect_error([] { BertConfig::from_pretrained(write_config(R"({"is_decoder": "true"})")); },
               "\"is_decoder\" must be true or false, got");
  expect_error([] { BertConfig::from_pretrained(write_config(R"({"position_embedding_type": "relative_key"})")); },
               "\"position_embedding_type\" \"relative_key\" is not supported");
  // tie_word_embeddings false matters to the masked-LM model alone: the others build.
  const BertConfig untied = BertConfig::from_pretrained(write_config(R"({"tie_word_embeddings": false, "hidden_size": 16,
      "num_attention_heads": 2, "num_hidden_layers": 1, "intermediate_size": 8, "vocab_size": 20})"));
  EXPECT_FALSE(untied.tie_word_embeddings);
  EXPECT_NO_THROW(models::bert_for_sequence_classification(untied, 3));
  EXPECT_NO_THROW(models::bert_model(untied));
  expect_error([&] { models::bert_for_masked_lm(untied); }, "[BertForMaskedLM] tie_word_embeddings = false is not supported");
  expect_error([] { BertConfig::from_pretrained(write_config(R"({"layer_norm_eps": 1e999})")); },
               "\"layer_norm_eps\" is out of range: 1e999");
}

TEST(BertModels, AModuleInTheEncoderListThatIsNotABertLayerIsAnError) {
  auto m = models::bert_for_masked_lm({.vocab_size = 20, .hidden_size = 8, .num_hidden_layers = 1,
                                       .num_attention_heads = 2, .intermediate_size = 16,
                                       .max_position_embeddings = 8});
  m->bert->encoder->layer->push_back(nn::Linear(8, 8));
  expect_error([&] { m(tensor({{1, 2, 3}}, kInt64)); }, "[ModuleList::ptr] module 1 is a");
}

// ---- input checks

TEST(BertModels, BadInputIsAClearError) {
  auto m = models::bert_for_masked_lm({.vocab_size = 50, .hidden_size = 16, .num_hidden_layers = 1,
                                       .num_attention_heads = 2, .intermediate_size = 32,
                                       .max_position_embeddings = 8});
  Tensor ids = tensor({{1, 2, 3}, {4, 5, 6}}, kInt64);
  expect_error([&] { m(tensor({{1, 2, 50}}, kInt64)); },
               "[BertModel] input_ids must be in [0, vocab_size 50), got values in [1, 50]");
  expect_error([&] { m(tensor({{-1, 2}}, kInt64)); }, "input_ids must be in [0, vocab_size 50), got values in [-1, 2]");
  expect_error([&] { m(zeros({1, 9}, kInt64)); }, "[BertModel] sequence length 9 is longer than max_position_embeddings 8");
  expect_error([&] { m(ids, ones({2, 4}, kInt64)); }, "[BertModel] attention_mask must be [2, 3] like input_ids, got [2, 4]");
  expect_error([&] { m(ids, {}, full({2, 3}, 2, kInt64)); }, "token_type_ids must be in [0, type_vocab_size 2), got values in [2, 2]");
  expect_error([&] { m(ids.to(kFloat32)); }, "[BertModel] input_ids must be integer [batch, sequence], got float32 [2, 3]");
  expect_error([&] { m(tensor({1, 2}, kInt64)); }, "input_ids must be integer [batch, sequence], got int64 [2]");
  Tensor logits = m(ids);
  expect_error([&] { models::BertForMaskedLMImpl::loss(logits, zeros({2, 4}, kInt64)); },
               "[BertForMaskedLM::loss] expected logits [B, S, V] and labels [B, S], got [2, 3, 50] and [2, 4]");
}

// ---- training

TEST(BertModels, TrainingStepsLowerTheMaskedLMLoss) {
  manual_seed(5);
  auto m = models::bert_for_masked_lm({.vocab_size = 40, .hidden_size = 32, .num_hidden_layers = 2,
                                       .num_attention_heads = 4, .intermediate_size = 64,
                                       .max_position_embeddings = 16});
  m->train();
  Tensor ids = randint(1, 40, {4, 12});
  Tensor mask = ones({4, 12}, kInt64);
  {
    NoGradGuard g;
    mask.narrow(1, 9, 3).select(0, 3).zero_();
  }
  Tensor labels = where(randn({4, 12}) > 0.0, ids, full({4, 12}, -100, kInt64));
  optim::SGD opt(m->parameters(), {.lr = 0.1, .momentum = 0.9});
  std::vector<double> before = values(m->bert->embeddings->word_embeddings->weight);
  double first = 0, last = 0;
  for (int step = 0; step < 15; ++step) {
    opt.zero_grad();
    Tensor loss = models::BertForMaskedLMImpl::loss(m(ids, mask), labels);
    loss.backward();
    opt.step();
    (step == 0 ? first : last) = loss.item<double>();
  }
  EXPECT_LT(last, 0.5 * first) << "first " << first << ", last " << last;
  // The decoder trains the tied embedding matrix: words never in the input moved too.
  EXPECT_NE(values(m->bert->embeddings->word_embeddings->weight), before);
  EXPECT_TRUE(m->cls->predictions->decoder_weight.is_same(m->bert->embeddings->word_embeddings->weight));
}

}  // namespace
}  // namespace kiln::test
