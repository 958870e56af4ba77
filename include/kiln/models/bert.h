// BERT (Devlin et al. 2018) with Hugging Face's configuration fields and module names, so that
// state_dict names equal transformers' BertModel / BertForMaskedLM / BertForSequenceClassification
// and a model.safetensors saved by Hugging Face loads unchanged.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kiln/nn.h"

namespace kiln::models {

// Hugging Face's BertConfig fields, in this order (designated initialisers follow it); the defaults
// are bert-base-uncased. hidden_act: "gelu" / "gelu_python" (erf), "gelu_new" / "gelu_pytorch_tanh"
// / "gelu_python_tanh" (tanh form) or "relu". pad_token_id is the word-embedding row kept at zero
// and without gradient (HF's padding_idx); initializer_range is the std of the normal
// initialisation.
struct BertConfig {
  int64_t vocab_size = 30522;
  int64_t hidden_size = 768;
  int64_t num_hidden_layers = 12;
  int64_t num_attention_heads = 12;
  int64_t intermediate_size = 3072;
  std::string hidden_act = "gelu";
  int64_t max_position_embeddings = 512;
  int64_t type_vocab_size = 2;
  double layer_norm_eps = 1e-12;
  double hidden_dropout_prob = 0.1;
  double attention_probs_dropout_prob = 0.1;
  double initializer_range = 0.02;
  std::optional<int64_t> pad_token_id = 0;  // none: no padding row
  // The sequence classifier's dropout; none: hidden_dropout_prob (HF's classifier_dropout).
  std::optional<double> classifier_dropout = std::nullopt;
  // The masked-LM decoder is the word embeddings. false is refused where it matters, by
  // BertForMaskedLM (Kiln's ties them); the encoder and the classifier do not use it.
  bool tie_word_embeddings = true;
  // In training, each encoder layer is checkpointed (kiln::utils::checkpoint): its activations
  // are computed again in backward instead of kept, for about a third more compute per step and
  // the memory of all but one layer's activations (HF's gradient_checkpointing_enable()). Also
  // BertEncoder's own switch, which a built model can turn on or off.
  bool gradient_checkpointing = false;

  // The sizes of Turc et al.'s compact BERTs (google/bert_uncased_L-*) and of BERT-base;
  // every other field keeps its default.
  static BertConfig tiny();   // 2 layers, hidden 128, 2 heads, intermediate 512
  static BertConfig mini();   // 4, 256, 4, 1024
  static BertConfig small();  // 4, 512, 8, 2048
  static BertConfig base();   // 12, 768, 12, 3072
  // One of the four by name: "bert-tiny" or "tiny", ... An unknown name is a kiln::Error listing them.
  static BertConfig preset(const std::string& name);
  // A Hugging Face config.json (a file, or a directory holding one). Unknown fields are ignored,
  // except those asking for a model Kiln does not build (is_decoder or add_cross_attention true,
  // a position_embedding_type other than "absolute"): a kiln::Error.
  static BertConfig from_pretrained(const std::string& dir_or_file);

  // Throws kiln::Error "[BertConfig] ..." naming the field when a value cannot work
  // (non-positive sizes, hidden_size not divisible by num_attention_heads, unknown hidden_act, ...).
  void validate() const;
};

// word + position + token-type embeddings, then LayerNorm and dropout.
class BertEmbeddingsImpl : public nn::Module {
 public:
  explicit BertEmbeddingsImpl(const BertConfig& config);
  // input_ids [B, S] integers; token_type_ids [B, S] or undefined (all type 0).
  Tensor forward(const Tensor& input_ids, const Tensor& token_type_ids = {});

  nn::Embedding word_embeddings{nullptr}, position_embeddings{nullptr}, token_type_embeddings{nullptr};
  nn::LayerNorm LayerNorm{nullptr};
  nn::Dropout dropout{nullptr};
};
KILN_MODULE(BertEmbeddings);

// Multi-head self-attention with separate query/key/value projections (HF's BertSelfAttention).
class BertSelfAttentionImpl : public nn::Module {
 public:
  explicit BertSelfAttentionImpl(const BertConfig& config);
  // mask: bool [B, 1, 1, S], true = attend (or undefined).
  Tensor forward(const Tensor& hidden, const Tensor& mask);

  int64_t num_heads, head_dim;
  double dropout_p;
  nn::Linear query{nullptr}, key{nullptr}, value{nullptr};
};
KILN_MODULE(BertSelfAttention);

// dense, dropout, then LayerNorm(. + residual): after attention (BertSelfOutput) and after the
// feed-forward block (BertOutput) alike.
class BertResidualOutputImpl : public nn::Module {
 public:
  BertResidualOutputImpl(int64_t in_features, const BertConfig& config);
  Tensor forward(const Tensor& hidden, const Tensor& residual);

  nn::Linear dense{nullptr};
  nn::LayerNorm LayerNorm{nullptr};
  nn::Dropout dropout{nullptr};
};
KILN_MODULE(BertResidualOutput);

class BertAttentionImpl : public nn::Module {
 public:
  explicit BertAttentionImpl(const BertConfig& config);
  Tensor forward(const Tensor& hidden, const Tensor& mask);

  BertSelfAttention self{nullptr};
  BertResidualOutput output{nullptr};
};
KILN_MODULE(BertAttention);

// dense with the activation fused into the matmul.
class BertIntermediateImpl : public nn::Module {
 public:
  explicit BertIntermediateImpl(const BertConfig& config);
  Tensor forward(const Tensor& hidden);

  Activation activation;
  nn::Linear dense{nullptr};
};
KILN_MODULE(BertIntermediate);

class BertLayerImpl : public nn::Module {
 public:
  explicit BertLayerImpl(const BertConfig& config);
  Tensor forward(const Tensor& hidden, const Tensor& mask);

  BertAttention attention{nullptr};
  BertIntermediate intermediate{nullptr};
  BertResidualOutput output{nullptr};
};
KILN_MODULE(BertLayer);

class BertEncoderImpl : public nn::Module {
 public:
  explicit BertEncoderImpl(const BertConfig& config);
  Tensor forward(const Tensor& hidden, const Tensor& mask);

  nn::ModuleList layer{nullptr};  // BertLayers "0" .. "N-1"
  bool gradient_checkpointing = false;  // BertConfig::gradient_checkpointing
};
KILN_MODULE(BertEncoder);

// tanh(dense(hidden state of the first token, [CLS])).
class BertPoolerImpl : public nn::Module {
 public:
  explicit BertPoolerImpl(const BertConfig& config);
  Tensor forward(const Tensor& sequence_output);

  nn::Linear dense{nullptr};
};
KILN_MODULE(BertPooler);

// embeddings, encoder.layer.0 .. N-1, and (add_pooling_layer) pooler. forward gives the
// sequence output [B, S, hidden]; pooled(sequence_output) gives the pooler's [B, hidden].
class BertModelImpl : public nn::Module {
 public:
  explicit BertModelImpl(const BertConfig& config, bool add_pooling_layer = true);
  // input_ids [B, S] integers in [0, vocab_size), S <= max_position_embeddings; attention_mask
  // [B, S] (1 or true = token, 0 or false = padding; any dtype) or undefined; token_type_ids
  // [B, S] in [0, type_vocab_size) or undefined. Bad input is a kiln::Error "[BertModel] ...".
  Tensor forward(const Tensor& input_ids, const Tensor& attention_mask = {}, const Tensor& token_type_ids = {});
  Tensor pooled(const Tensor& sequence_output);

  BertConfig config;
  BertEmbeddings embeddings{nullptr};
  BertEncoder encoder{nullptr};
  BertPooler pooler{nullptr};  // empty without the pooling layer
};

class BertModel : public nn::ModuleHolder<BertModelImpl> {
 public:
  using nn::ModuleHolder<BertModelImpl>::ModuleHolder;
  Tensor operator()(const Tensor& input_ids, const Tensor& attention_mask = {}, const Tensor& token_type_ids = {}) const {
    return get()->forward(input_ids, attention_mask, token_type_ids);
  }
};

// LayerNorm(activation(dense(hidden))).
class BertPredictionHeadTransformImpl : public nn::Module {
 public:
  explicit BertPredictionHeadTransformImpl(const BertConfig& config);
  Tensor forward(const Tensor& hidden);

  Activation activation;
  nn::Linear dense{nullptr};
  nn::LayerNorm LayerNorm{nullptr};
};
KILN_MODULE(BertPredictionHeadTransform);

// transform, then the decoder: the word-embedding matrix (tied, so not a parameter of its own)
// plus bias -> [B, S, vocab_size].
class BertLMPredictionHeadImpl : public nn::Module {
 public:
  BertLMPredictionHeadImpl(const BertConfig& config, Tensor word_embeddings_weight);
  Tensor forward(const Tensor& hidden);

  Tensor bias;
  BertPredictionHeadTransform transform{nullptr};
  Tensor decoder_weight;  // the same tensor as bert.embeddings.word_embeddings.weight
};
KILN_MODULE(BertLMPredictionHead);

class BertOnlyMLMHeadImpl : public nn::Module {
 public:
  BertOnlyMLMHeadImpl(const BertConfig& config, Tensor word_embeddings_weight);
  Tensor forward(const Tensor& hidden) { return predictions(hidden); }

  BertLMPredictionHead predictions{nullptr};
};
KILN_MODULE(BertOnlyMLMHead);

// bert (no pooler, as HF's BertForMaskedLM) and cls.predictions. Its state_dict holds exactly
// the keys Hugging Face's save_pretrained writes: the tied cls.predictions.decoder.weight and
// cls.predictions.decoder.bias (aliases of bert.embeddings.word_embeddings.weight and
// cls.predictions.bias, which torch's state_dict lists twice) are not separate entries, and
// parameters() lists each tensor once. load_hf_state_dict accepts files with or without them.
class BertForMaskedLMImpl : public nn::Module {
 public:
  explicit BertForMaskedLMImpl(const BertConfig& config);
  // -> logits [B, S, vocab_size]; arguments as BertModel::forward.
  Tensor forward(const Tensor& input_ids, const Tensor& attention_mask = {}, const Tensor& token_type_ids = {});
  // Mean cross-entropy of logits [B, S, V] against labels [B, S]; label -100 is ignored (HF's MLM loss).
  static Tensor loss(const Tensor& logits, const Tensor& labels);
  // The same loss without the logits of unlabelled positions: only the labelled hidden states go
  // through cls (MLM labels ~15% of tokens, so the [., V] decoder matmul and softmax shrink ~7x).
  // Equal to loss(forward(...), labels) up to float rounding. The labelled positions are found on
  // the host: labels on the CPU (on any device; a GPU's are read back, waiting for it) save a wait.
  Tensor masked_lm_loss(const Tensor& input_ids, const Tensor& labels, const Tensor& attention_mask = {},
                        const Tensor& token_type_ids = {});

  BertModel bert{nullptr};
  BertOnlyMLMHead cls{nullptr};
};

class BertForMaskedLM : public nn::ModuleHolder<BertForMaskedLMImpl> {
 public:
  using nn::ModuleHolder<BertForMaskedLMImpl>::ModuleHolder;
  Tensor operator()(const Tensor& input_ids, const Tensor& attention_mask = {}, const Tensor& token_type_ids = {}) const {
    return get()->forward(input_ids, attention_mask, token_type_ids);
  }
};

// bert (with pooler), dropout, classifier: logits [B, num_labels] from the pooled [CLS] state.
class BertForSequenceClassificationImpl : public nn::Module {
 public:
  BertForSequenceClassificationImpl(const BertConfig& config, int64_t num_labels);
  Tensor forward(const Tensor& input_ids, const Tensor& attention_mask = {}, const Tensor& token_type_ids = {});

  int64_t num_labels;
  BertModel bert{nullptr};
  nn::Dropout dropout{nullptr};
  nn::Linear classifier{nullptr};
};

class BertForSequenceClassification : public nn::ModuleHolder<BertForSequenceClassificationImpl> {
 public:
  using nn::ModuleHolder<BertForSequenceClassificationImpl>::ModuleHolder;
  Tensor operator()(const Tensor& input_ids, const Tensor& attention_mask = {}, const Tensor& token_type_ids = {}) const {
    return get()->forward(input_ids, attention_mask, token_type_ids);
  }
};

// Freshly initialised as Hugging Face does (Linear and Embedding weights N(0, initializer_range),
// biases zero, LayerNorm 1 and 0, the padding row zero). The config is validated first.
BertModel bert_model(const BertConfig& config, bool add_pooling_layer = true);
BertForMaskedLM bert_for_masked_lm(const BertConfig& config);
BertForSequenceClassification bert_for_sequence_classification(const BertConfig& config, int64_t num_labels);

// Loads a Hugging Face BERT state dict into `model` (any of the three above) through the strict
// Module::load_state_dict, after these changes, and only these:
//  - old TensorFlow-era names: "*.gamma" -> "*.weight", "*.beta" -> "*.bias";
//  - the tied cls.predictions.decoder.weight is dropped (after checking it equals the word
//    embeddings); cls.predictions.decoder.bias is dropped, or becomes cls.predictions.bias when
//    that is absent;
//  - the non-persistent buffers embeddings.position_ids / token_type_ids (older files saved them)
//    are dropped;
//  - a base-model file ("embeddings.*") loads into a model with a head ("bert.embeddings.*") and a
//    headed file into bert_model;
//  - keys under cls.* (the MLM and next-sentence heads of BERT's pre-training checkpoints),
//    classifier.* and qa_outputs.* (a fine-tuned model's task head) and bert.pooler.* that the
//    model does not have are dropped, as Hugging Face drops them (with a warning) when loading
//    bert-base-uncased into BertForMaskedLM, or a fine-tuned model's file into BertModel;
//  - a task head the file lacks (classifier.*, and the pooler: an MLM checkpoint has none) keeps
//    its fresh initialisation, as Hugging Face's from_pretrained does for fine-tuning; those keys
//    are returned (HF's "newly initialized" list) so the caller can say so.
// Floating-point tensors are converted to the model's dtype. Any other unknown or missing key,
// or a wrong shape, is a kiln::Error from load_state_dict and leaves the model unchanged.
std::vector<std::string> load_hf_state_dict(nn::Module& model, std::map<std::string, Tensor> state);
// The same from a model.safetensors file, or a directory holding one (save_pretrained's output);
// errors name the file.
std::vector<std::string> load_pretrained(nn::Module& model, const std::string& dir_or_file);

}  // namespace kiln::models
