// BERT's encoder (Devlin et al., "BERT: Pre-training of Deep Bidirectional Transformers for
// Language Understanding", 2018), module for module as Hugging Face's modeling_bert builds it.
#include "kiln/models/bert.h"

#include "kiln/autograd.h"
#include "kiln/utils/checkpoint.h"
#include "models/bert_util.h"

namespace kiln::models {

// ---- configuration

BertConfig BertConfig::tiny() { return {.hidden_size = 128, .num_hidden_layers = 2, .num_attention_heads = 2, .intermediate_size = 512}; }
BertConfig BertConfig::mini() { return {.hidden_size = 256, .num_hidden_layers = 4, .num_attention_heads = 4, .intermediate_size = 1024}; }
BertConfig BertConfig::small() { return {.hidden_size = 512, .num_hidden_layers = 4, .num_attention_heads = 8, .intermediate_size = 2048}; }
BertConfig BertConfig::base() { return {}; }

BertConfig BertConfig::preset(const std::string& name) {
  const std::string n = name.rfind("bert-", 0) == 0 ? name.substr(5) : name;
  if (n == "tiny") return tiny();
  if (n == "mini") return mini();
  if (n == "small") return small();
  if (n == "base") return base();
  KILN_FAIL("BertConfig", "unknown BERT preset '", name, "' (bert-tiny, bert-mini, bert-small or bert-base)");
}

void BertConfig::validate() const {
  const char* where = "BertConfig";
  auto positive = [&](int64_t v, const char* name) { KILN_CHECK(v > 0, where, name, " must be positive, got ", v); };
  positive(vocab_size, "vocab_size");
  positive(hidden_size, "hidden_size");
  positive(num_hidden_layers, "num_hidden_layers");
  positive(num_attention_heads, "num_attention_heads");
  positive(intermediate_size, "intermediate_size");
  positive(max_position_embeddings, "max_position_embeddings");
  positive(type_vocab_size, "type_vocab_size");
  KILN_CHECK(hidden_size % num_attention_heads == 0, where, "hidden_size ", hidden_size,
             " is not a multiple of num_attention_heads ", num_attention_heads);
  detail::bert_activation(hidden_act);
  KILN_CHECK(layer_norm_eps > 0, where, "layer_norm_eps must be positive, got ", layer_norm_eps);
  KILN_CHECK(hidden_dropout_prob >= 0 && hidden_dropout_prob < 1, where, "hidden_dropout_prob must be in [0, 1), got ",
             hidden_dropout_prob);
  KILN_CHECK(attention_probs_dropout_prob >= 0 && attention_probs_dropout_prob < 1, where,
             "attention_probs_dropout_prob must be in [0, 1), got ", attention_probs_dropout_prob);
  KILN_CHECK(!classifier_dropout || (*classifier_dropout >= 0 && *classifier_dropout < 1), where,
             "classifier_dropout must be in [0, 1), got ", classifier_dropout.value_or(0));
  KILN_CHECK(initializer_range >= 0, where, "initializer_range must be non-negative, got ", initializer_range);
  KILN_CHECK(!pad_token_id || (*pad_token_id >= 0 && *pad_token_id < vocab_size), where,
             "pad_token_id must be in [0, vocab_size ", vocab_size, "), got ", pad_token_id.value_or(0));
}

namespace detail {
Activation bert_activation(const std::string& hidden_act) {
  // Hugging Face's names for the two GELUs (its gelu_python and gelu_python_tanh are the same functions).
  if (hidden_act == "gelu" || hidden_act == "gelu_python") return Activation::GELU;
  if (hidden_act == "gelu_new" || hidden_act == "gelu_pytorch_tanh" || hidden_act == "gelu_python_tanh")
    return Activation::GELUTanh;
  if (hidden_act == "relu") return Activation::ReLU;
  KILN_FAIL("BertConfig", "hidden_act must be \"gelu\", \"gelu_python\", \"gelu_new\", \"gelu_pytorch_tanh\", "
            "\"gelu_python_tanh\" or \"relu\", got \"", hidden_act, "\"");
}

std::string describe(const Tensor& t) { return kiln::detail::cat(t.dtype(), " ", t.shape()); }

void check_ids(const Tensor& ids, int64_t limit, const char* what, const char* limit_name) {
  // On a GPU the embedding kernels check every index themselves and report the first bad one at
  // the next synchronising call; reading the range here would stall every forward twice.
  if (ids.numel() == 0 || !ids.device().is_cpu()) return;
  const int64_t lo = amin(ids).item<int64_t>(), hi = amax(ids).item<int64_t>();
  KILN_CHECK(lo >= 0 && hi < limit, "BertModel", what, " must be in [0, ", limit_name, " ", limit, "), got values in [",
             lo, ", ", hi, "]");
}
}  // namespace detail

// ---- embeddings

BertEmbeddingsImpl::BertEmbeddingsImpl(const BertConfig& c) {
  word_embeddings = register_module("word_embeddings",
                                    nn::Embedding(c.vocab_size, c.hidden_size, {.padding_idx = c.pad_token_id}));
  position_embeddings = register_module("position_embeddings", nn::Embedding(c.max_position_embeddings, c.hidden_size));
  token_type_embeddings = register_module("token_type_embeddings", nn::Embedding(c.type_vocab_size, c.hidden_size));
  LayerNorm = register_module("LayerNorm", nn::LayerNorm(c.hidden_size, {.eps = c.layer_norm_eps}));
  dropout = register_module("dropout", nn::Dropout(c.hidden_dropout_prob));
}

Tensor BertEmbeddingsImpl::forward(const Tensor& input_ids, const Tensor& token_type_ids) {
  // Positions 0..S-1 are the first S rows: a view, not a gather. Without token types every
  // token has type 0. The additions are in HF's order (word + type, then + position).
  const int64_t S = input_ids.size(1);
  Tensor types = token_type_ids.defined() ? token_type_embeddings(token_type_ids)
                                          : token_type_embeddings->weight.select(0, 0);
  Tensor x = word_embeddings(input_ids) + types;
  x = x + position_embeddings->weight.narrow(0, 0, S);
  return dropout(LayerNorm(x));
}

// ---- one encoder layer: self-attention and a feed-forward block, each followed by add & norm

BertSelfAttentionImpl::BertSelfAttentionImpl(const BertConfig& c)
    : num_heads(c.num_attention_heads), head_dim(c.hidden_size / c.num_attention_heads),
      dropout_p(c.attention_probs_dropout_prob) {
  query = register_module("query", nn::Linear(c.hidden_size, c.hidden_size));
  key = register_module("key", nn::Linear(c.hidden_size, c.hidden_size));
  value = register_module("value", nn::Linear(c.hidden_size, c.hidden_size));
}

Tensor BertSelfAttentionImpl::forward(const Tensor& hidden, const Tensor& mask) {
  const int64_t B = hidden.size(0), S = hidden.size(1);
  auto heads = [&](const Tensor& t) { return t.reshape({B, S, num_heads, head_dim}).transpose(1, 2); };
  // softmax(Q K^T / sqrt(d)) V per head, as one fused op that never holds the S x S scores.
  Tensor context = scaled_dot_product_attention(heads(query(hidden)), heads(key(hidden)), heads(value(hidden)), mask,
                                                is_training() ? dropout_p : 0.0);
  return context.transpose(1, 2).reshape({B, S, num_heads * head_dim});
}

BertResidualOutputImpl::BertResidualOutputImpl(int64_t in_features, const BertConfig& c) {
  dense = register_module("dense", nn::Linear(in_features, c.hidden_size));
  LayerNorm = register_module("LayerNorm", nn::LayerNorm(c.hidden_size, {.eps = c.layer_norm_eps}));
  dropout = register_module("dropout", nn::Dropout(c.hidden_dropout_prob));
}

Tensor BertResidualOutputImpl::forward(const Tensor& hidden, const Tensor& residual) {
  return LayerNorm(dropout(dense(hidden)) + residual);
}

BertAttentionImpl::BertAttentionImpl(const BertConfig& c) {
  self = register_module("self", BertSelfAttention(c));
  output = register_module("output", BertResidualOutput(c.hidden_size, c));
}

Tensor BertAttentionImpl::forward(const Tensor& hidden, const Tensor& mask) {
  return output(self(hidden, mask), hidden);
}

BertIntermediateImpl::BertIntermediateImpl(const BertConfig& c) : activation(detail::bert_activation(c.hidden_act)) {
  dense = register_module("dense", nn::Linear(c.hidden_size, c.intermediate_size));
}

Tensor BertIntermediateImpl::forward(const Tensor& hidden) {
  return kiln::linear(hidden, dense->weight, dense->bias, activation);
}

BertLayerImpl::BertLayerImpl(const BertConfig& c) {
  attention = register_module("attention", BertAttention(c));
  intermediate = register_module("intermediate", BertIntermediate(c));
  output = register_module("output", BertResidualOutput(c.intermediate_size, c));
}

Tensor BertLayerImpl::forward(const Tensor& hidden, const Tensor& mask) {
  Tensor attended = attention(hidden, mask);
  return output(intermediate(attended), attended);
}

BertEncoderImpl::BertEncoderImpl(const BertConfig& c) : gradient_checkpointing(c.gradient_checkpointing) {
  layer = register_module("layer", nn::ModuleList());
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) layer->push_back(BertLayer(c));
}

Tensor BertEncoderImpl::forward(const Tensor& hidden, const Tensor& mask) {
  Tensor x = hidden;
  // The list is public: a module put there that is not a BertLayer is an error, not a bad cast.
  const bool checkpointed = gradient_checkpointing && is_training() && autograd::is_grad_enabled();
  for (size_t i = 0; i < layer->size(); ++i) {
    std::shared_ptr<BertLayerImpl> l = layer->ptr<BertLayerImpl>(i);
    if (!checkpointed) {
      x = l->forward(x, mask);
      continue;
    }
    // The layer is kept by the checkpoint until backward; the mask is an input (checked unchanged).
    const bool masked = mask.defined();
    x = utils::checkpoint(
        [l, masked](const std::vector<Tensor>& in) {
          return std::vector<Tensor>{l->forward(in[0], masked ? in[1] : Tensor())};
        },
        masked ? std::vector<Tensor>{x, mask} : std::vector<Tensor>{x})[0];
  }
  return x;
}

BertPoolerImpl::BertPoolerImpl(const BertConfig& c) {
  dense = register_module("dense", nn::Linear(c.hidden_size, c.hidden_size));
}

Tensor BertPoolerImpl::forward(const Tensor& sequence_output) { return tanh(dense(sequence_output.select(1, 0))); }

// ---- the model

BertModelImpl::BertModelImpl(const BertConfig& c, bool add_pooling_layer) : config(c) {
  config.validate();
  embeddings = register_module("embeddings", BertEmbeddings(c));
  encoder = register_module("encoder", BertEncoder(c));
  if (add_pooling_layer) pooler = register_module("pooler", BertPooler(c));
}

Tensor BertModelImpl::forward(const Tensor& input_ids, const Tensor& attention_mask, const Tensor& token_type_ids) {
  const char* where = "BertModel";
  KILN_CHECK(input_ids.defined() && input_ids.dim() == 2 && is_integral(input_ids.dtype(), false), where,
             "input_ids must be integer [batch, sequence], got ",
             input_ids.defined() ? detail::describe(input_ids) : std::string("an undefined tensor"));
  const int64_t B = input_ids.size(0), S = input_ids.size(1);
  KILN_CHECK(S <= config.max_position_embeddings, where, "sequence length ", S,
             " is longer than max_position_embeddings ", config.max_position_embeddings);
  detail::check_ids(input_ids, config.vocab_size, "input_ids", "vocab_size");
  if (token_type_ids.defined()) {
    KILN_CHECK(token_type_ids.shape() == input_ids.shape() && is_integral(token_type_ids.dtype(), false), where,
               "token_type_ids must be integer ", input_ids.shape(), " like input_ids, got ",
               detail::describe(token_type_ids));
    detail::check_ids(token_type_ids, config.type_vocab_size, "token_type_ids", "type_vocab_size");
  }
  // The padding mask as the attention op takes it: bool [B, 1, 1, S], true = attend.
  Tensor mask;
  if (attention_mask.defined()) {
    KILN_CHECK(attention_mask.shape() == input_ids.shape(), where, "attention_mask must be ", input_ids.shape(),
               " like input_ids, got ", attention_mask.shape());
    mask = (attention_mask.dtype() == kBool ? attention_mask : ne(attention_mask, 0)).reshape({B, 1, 1, S});
  }
  return encoder(embeddings(input_ids, token_type_ids), mask);
}

Tensor BertModelImpl::pooled(const Tensor& sequence_output) {
  KILN_CHECK(!pooler.is_empty(), "BertModel::pooled", "this model was built without the pooling layer");
  return pooler(sequence_output);
}

}  // namespace kiln::models
