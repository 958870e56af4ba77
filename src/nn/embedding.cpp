// Embedding: construction with PyTorch's initialisation, from_pretrained, forward and printing.
#include "kiln/nn/embedding.h"

#include "kiln/autograd.h"
#include "kiln/nn/init.h"
#include "kiln/ops.h"

namespace kiln::nn {
namespace {
std::optional<int64_t> checked_padding_idx(std::optional<int64_t> idx, int64_t n, const char* where) {
  if (!idx) return idx;
  KILN_CHECK(*idx < n && *idx >= -n, where, "padding_idx must be within num_embeddings ", n, ", got ", *idx);
  return *idx < 0 ? *idx + n : *idx;
}
}  // namespace

EmbeddingImpl::EmbeddingImpl(int64_t num_embeddings, int64_t embedding_dim, EmbeddingOptions options_)
    : num_embeddings(num_embeddings), embedding_dim(embedding_dim), options(options_) {
  KILN_CHECK(num_embeddings >= 0 && embedding_dim >= 0, "Embedding",
             "num_embeddings and embedding_dim must be non-negative, got ", num_embeddings, " and ", embedding_dim);
  options.padding_idx = checked_padding_idx(options.padding_idx, num_embeddings, "Embedding");
  weight = register_parameter("weight", empty({num_embeddings, embedding_dim}));
  reset_parameters();
}

EmbeddingImpl::EmbeddingImpl(const Tensor& table, EmbeddingOptions options_)
    : num_embeddings(table.size(0)), embedding_dim(table.size(1)), options(options_) {
  options.padding_idx = checked_padding_idx(options.padding_idx, num_embeddings, "Embedding");
  weight = register_parameter("weight", table);
}

void EmbeddingImpl::reset_parameters() {
  init::normal_(weight);
  if (options.padding_idx) {
    NoGradGuard no_grad;
    weight.select(0, *options.padding_idx).zero_();
  }
}

Tensor EmbeddingImpl::forward(const Tensor& indices) {
  return kiln::embedding(weight, indices, options.padding_idx.value_or(-1));
}

void EmbeddingImpl::pretty_print(std::ostream& os) const {
  os << "Embedding(" << num_embeddings << ", " << embedding_dim;
  if (options.padding_idx) os << ", padding_idx=" << *options.padding_idx;
  os << ")";
}

Embedding Embedding::from_pretrained(const Tensor& embeddings, bool freeze, EmbeddingOptions options) {
  KILN_CHECK(embeddings.defined() && embeddings.dim() == 2, "Embedding::from_pretrained",
             "embeddings must be 2-D [num_embeddings, embedding_dim], got shape ",
             embeddings.defined() ? embeddings.shape() : Shape{});
  // The table as given: no random one drawn first (that moved the generator, so every layer
  // made afterwards got other weights than in PyTorch).
  Embedding e(std::make_shared<EmbeddingImpl>(embeddings.detach().clone(), options));
  e->weight.requires_grad_(!freeze);
  return e;
}

}  // namespace kiln::nn
