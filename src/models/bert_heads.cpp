// BERT's heads (masked-LM with the decoder tied to the word embeddings; sequence classification),
// Hugging Face's initialisation, and the model constructors.
#include "kiln/models/bert.h"

#include "models/bert_util.h"

namespace kiln::models {

BertPredictionHeadTransformImpl::BertPredictionHeadTransformImpl(const BertConfig& c)
    : activation(detail::bert_activation(c.hidden_act)) {
  dense = register_module("dense", nn::Linear(c.hidden_size, c.hidden_size));
  LayerNorm = register_module("LayerNorm", nn::LayerNorm(c.hidden_size, {.eps = c.layer_norm_eps}));
}

Tensor BertPredictionHeadTransformImpl::forward(const Tensor& hidden) {
  return LayerNorm(kiln::linear(hidden, dense->weight, dense->bias, activation));
}

BertLMPredictionHeadImpl::BertLMPredictionHeadImpl(const BertConfig& c, Tensor word_embeddings_weight)
    : decoder_weight(std::move(word_embeddings_weight)) {
  bias = register_parameter("bias", zeros({c.vocab_size}));
  transform = register_module("transform", BertPredictionHeadTransform(c));
}

// Scores every vocabulary entry by its input embedding: the output projection shares the
// input's matrix (Press & Wolf 2017), so the decoder adds no parameters of its own.
Tensor BertLMPredictionHeadImpl::forward(const Tensor& hidden) {
  return kiln::linear(transform(hidden), decoder_weight, bias);
}

BertOnlyMLMHeadImpl::BertOnlyMLMHeadImpl(const BertConfig& c, Tensor word_embeddings_weight) {
  predictions = register_module("predictions", BertLMPredictionHead(c, std::move(word_embeddings_weight)));
}

BertForMaskedLMImpl::BertForMaskedLMImpl(const BertConfig& config) {
  KILN_CHECK(config.tie_word_embeddings, "BertForMaskedLM",
             "tie_word_embeddings = false is not supported (Kiln's masked-LM decoder is the word embeddings)");
  bert = register_module("bert", BertModel(config, false));
  cls = register_module("cls", BertOnlyMLMHead(config, bert->embeddings->word_embeddings->weight));
}

Tensor BertForMaskedLMImpl::forward(const Tensor& input_ids, const Tensor& attention_mask,
                                    const Tensor& token_type_ids) {
  return cls(bert(input_ids, attention_mask, token_type_ids));
}

Tensor BertForMaskedLMImpl::loss(const Tensor& logits, const Tensor& labels) {
  KILN_CHECK(logits.defined() && labels.defined() && logits.dim() == 3 && labels.dim() == 2 &&
                 labels.size(0) == logits.size(0) && labels.size(1) == logits.size(1),
             "BertForMaskedLM::loss", "expected logits [B, S, V] and labels [B, S], got ",
             logits.defined() ? logits.shape() : Shape{}, " and ", labels.defined() ? labels.shape() : Shape{});
  return cross_entropy(logits.reshape({-1, logits.size(2)}), labels.reshape({-1}), {}, Reduction::Mean, -100);
}

Tensor BertForMaskedLMImpl::masked_lm_loss(const Tensor& input_ids, const Tensor& labels,
                                           const Tensor& attention_mask, const Tensor& token_type_ids) {
  KILN_CHECK(labels.defined() && input_ids.defined() && labels.shape() == input_ids.shape() &&
                 is_integral(labels.dtype(), false),
             "BertForMaskedLM::masked_lm_loss", "labels must be integer like input_ids ",
             input_ids.defined() ? input_ids.shape() : Shape{}, ", got ",
             labels.defined() ? detail::describe(labels) : std::string("an undefined tensor"));
  // The labelled positions, found on the host (labels are small and usually there already),
  // before the encoder is queued: labels on a GPU are read while it has no work of this step.
  std::vector<int64_t> flat = labels.to_vector<int64_t>(), rows, targets;
  for (size_t i = 0; i < flat.size(); ++i)
    if (flat[i] != -100) rows.push_back(static_cast<int64_t>(i)), targets.push_back(flat[i]);
  Tensor hidden = bert(input_ids, attention_mask, token_type_ids);
  Tensor index = tensor(rows, Shape{static_cast<int64_t>(rows.size())}, kInt64).to(hidden.device());
  Tensor picked = index_select(hidden.reshape({-1, hidden.size(2)}), 0, index);
  Tensor target = tensor(targets, Shape{static_cast<int64_t>(targets.size())}, kInt64).to(hidden.device());
  return cross_entropy(cls(picked), target, {}, Reduction::Mean, -100);
}

BertForSequenceClassificationImpl::BertForSequenceClassificationImpl(const BertConfig& config, int64_t num_labels)
    : num_labels(num_labels) {
  KILN_CHECK(num_labels > 0, "BertForSequenceClassification", "num_labels must be positive, got ", num_labels);
  bert = register_module("bert", BertModel(config, true));
  dropout = register_module("dropout", nn::Dropout(config.classifier_dropout.value_or(config.hidden_dropout_prob)));
  classifier = register_module("classifier", nn::Linear(config.hidden_size, num_labels));
}

Tensor BertForSequenceClassificationImpl::forward(const Tensor& input_ids, const Tensor& attention_mask,
                                                  const Tensor& token_type_ids) {
  return classifier(dropout(bert->pooled(bert(input_ids, attention_mask, token_type_ids))));
}

namespace detail {
void init_bert_weights(nn::Module& model, const BertConfig& c) {
  model.apply([&](nn::Module& m) {
    if (auto* lin = dynamic_cast<nn::LinearImpl*>(&m)) {
      nn::init::normal_(lin->weight, 0.0, c.initializer_range);
      if (lin->bias.defined()) nn::init::zeros_(lin->bias);
    } else if (auto* emb = dynamic_cast<nn::EmbeddingImpl*>(&m)) {
      nn::init::normal_(emb->weight, 0.0, c.initializer_range);
      if (emb->options.padding_idx) nn::init::zeros_(emb->weight.select(0, *emb->options.padding_idx));
    } else if (auto* ln = dynamic_cast<nn::LayerNormImpl*>(&m)) {
      nn::init::ones_(ln->weight);
      nn::init::zeros_(ln->bias);
    } else if (auto* head = dynamic_cast<BertLMPredictionHeadImpl*>(&m)) {
      nn::init::zeros_(head->bias);
    }
  });
}
}  // namespace detail

BertModel bert_model(const BertConfig& config, bool add_pooling_layer) {
  BertModel m(std::make_shared<BertModelImpl>(config, add_pooling_layer));
  detail::init_bert_weights(*m, config);
  return m;
}

BertForMaskedLM bert_for_masked_lm(const BertConfig& config) {
  BertForMaskedLM m(std::make_shared<BertForMaskedLMImpl>(config));
  detail::init_bert_weights(*m, config);
  return m;
}

BertForSequenceClassification bert_for_sequence_classification(const BertConfig& config, int64_t num_labels) {
  BertForSequenceClassification m(std::make_shared<BertForSequenceClassificationImpl>(config, num_labels));
  detail::init_bert_weights(*m, config);
  return m;
}

}  // namespace kiln::models
