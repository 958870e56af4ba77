// MultiheadAttention (torch::nn::MultiheadAttention) and its options.
#pragma once

#include <optional>
#include <tuple>

#include "kiln/nn/linear.h"

namespace kiln::nn {

// Fields in torch.nn.MultiheadAttention's argument order after num_heads (add_bias_kv and
// add_zero_attn are not supported). kdim/vdim default to embed_dim.
struct MultiheadAttentionOptions {
  double dropout = 0.0;
  bool bias = true;
  std::optional<int64_t> kdim = std::nullopt;
  std::optional<int64_t> vdim = std::nullopt;
  bool batch_first = false;
};

// PyTorch's parameters and initialisation: in_proj_weight [3E, E] (xavier_uniform) when
// kdim == vdim == E, else q_proj_weight [E, E], k_proj_weight [E, kdim], v_proj_weight [E, vdim];
// in_proj_bias [3E] (zeros); out_proj (a Linear E -> E, bias zeroed).
class MultiheadAttentionImpl : public Module {
 public:
  MultiheadAttentionImpl(int64_t embed_dim, int64_t num_heads, MultiheadAttentionOptions options = {});
  void reset_parameters();

  // query [L, B, E] ([B, L, E] with batch_first, [L, E] unbatched), key [S, B, kdim], value
  // [S, B, vdim]. key_padding_mask [B, S]: bool true = ignore that key, or float added to the
  // scores. attn_mask [L, S] or [B * num_heads, L, S]: bool true = not allowed, or float added.
  // (PyTorch's masks mean "masked" where scaled_dot_product_attention's bool mask means "attend".)
  // Returns (output like query, weights [B, L, S] averaged over heads, or [B, H, L, S], when
  // need_weights; else undefined). need_weights defaults to false, unlike PyTorch: the weights
  // need the S x S matrix, which the fused attention op never builds.
  std::tuple<Tensor, Tensor> forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                     const Tensor& key_padding_mask = {}, bool need_weights = false,
                                     const Tensor& attn_mask = {}, bool average_attn_weights = true);

  int64_t embed_dim, num_heads, head_dim, kdim, vdim;
  MultiheadAttentionOptions options;
  Tensor in_proj_weight, q_proj_weight, k_proj_weight, v_proj_weight, in_proj_bias;
  Linear out_proj{nullptr};
};

class MultiheadAttention : public ModuleHolder<MultiheadAttentionImpl> {
 public:
  using ModuleHolder<MultiheadAttentionImpl>::ModuleHolder;
  MultiheadAttention(int64_t embed_dim, int64_t num_heads, MultiheadAttentionOptions options = {})
      : ModuleHolder(std::make_shared<MultiheadAttentionImpl>(embed_dim, num_heads, options)) {}
  // Spelled out (not forwarded) so that `mha(q, k, v, {}, false, mask)` compiles.
  std::tuple<Tensor, Tensor> operator()(const Tensor& query, const Tensor& key, const Tensor& value,
                                        const Tensor& key_padding_mask = {}, bool need_weights = false,
                                        const Tensor& attn_mask = {}, bool average_attn_weights = true) const {
    return get()->forward(query, key, value, key_padding_mask, need_weights, attn_mask, average_attn_weights);
  }
};

}  // namespace kiln::nn
