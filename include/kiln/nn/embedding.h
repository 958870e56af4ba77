// Embedding (torch::nn::Embedding): a lookup table of learned vectors.
#pragma once

#include <optional>

#include "kiln/nn/pimpl.h"

namespace kiln::nn {

// PyTorch's keyword arguments that Kiln supports. A negative padding_idx counts from the end
// (-1 is the last row), as in PyTorch.
struct EmbeddingOptions {
  std::optional<int64_t> padding_idx = std::nullopt;
};

// weight [num_embeddings, embedding_dim], N(0, 1) with the padding row zeroed (PyTorch's
// reset_parameters). forward(indices of any integer shape) -> [..., embedding_dim]; the padding
// row gets no gradient, so it stays what it is.
class EmbeddingImpl : public Module {
 public:
  EmbeddingImpl(int64_t num_embeddings, int64_t embedding_dim, EmbeddingOptions options = {});
  // With `weight` [N, D] as its table, drawing nothing (torch's _weight argument).
  EmbeddingImpl(const Tensor& weight, EmbeddingOptions options);
  void reset_parameters();
  Tensor forward(const Tensor& indices);
  void pretty_print(std::ostream& os) const override;

  int64_t num_embeddings, embedding_dim;
  EmbeddingOptions options;  // padding_idx normalised to [0, num_embeddings) when set
  Tensor weight;
};

class Embedding : public ModuleHolder<EmbeddingImpl> {
 public:
  using ModuleHolder<EmbeddingImpl>::ModuleHolder;
  Embedding(int64_t num_embeddings, int64_t embedding_dim, EmbeddingOptions options = {})
      : ModuleHolder(std::make_shared<EmbeddingImpl>(num_embeddings, embedding_dim, options)) {}

  // An Embedding whose weight is a copy of `embeddings` [N, D] (torch.nn.Embedding.from_pretrained);
  // freeze = true makes it a parameter without gradient.
  static Embedding from_pretrained(const Tensor& embeddings, bool freeze = true, EmbeddingOptions options = {});
};

}  // namespace kiln::nn
