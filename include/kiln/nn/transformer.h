// TransformerEncoderLayer and TransformerEncoder (torch::nn's), with PyTorch's submodule names.
#pragma once

#include <optional>
#include <string>

#include "kiln/nn/activation.h"
#include "kiln/nn/attention.h"
#include "kiln/nn/container.h"
#include "kiln/nn/normalization.h"
#include "kiln/ops.h"

namespace kiln::nn {

// Fields in torch.nn.TransformerEncoderLayer's argument order after nhead.
struct TransformerEncoderLayerOptions {
  int64_t dim_feedforward = 2048;
  double dropout = 0.1;
  std::string activation = "relu";  // "relu", "gelu" or "gelu_tanh"
  double layer_norm_eps = 1e-5;
  bool batch_first = false;
  bool norm_first = false;  // pre-norm; false is the post-norm of "Attention Is All You Need" and BERT
  bool bias = true;
};

// Submodules self_attn, linear1, dropout, linear2, norm1, norm2, dropout1, dropout2, in that
// order. Post-norm: x = norm1(x + sa(x)); x = norm2(x + ff(x)). Pre-norm: x = x + sa(norm1(x));
// x = x + ff(norm2(x)). Masks as in MultiheadAttention::forward.
class TransformerEncoderLayerImpl : public Module {
 public:
  TransformerEncoderLayerImpl(int64_t d_model, int64_t nhead, TransformerEncoderLayerOptions options = {});
  Tensor forward(const Tensor& src, const Tensor& src_mask = {}, const Tensor& src_key_padding_mask = {});

  int64_t d_model, nhead;
  TransformerEncoderLayerOptions options;
  MultiheadAttention self_attn{nullptr};
  Linear linear1{nullptr}, linear2{nullptr};
  Dropout dropout{nullptr}, dropout1{nullptr}, dropout2{nullptr};
  LayerNorm norm1{nullptr}, norm2{nullptr};

 private:
  Tensor sa_block(const Tensor& x, const Tensor& mask, const Tensor& key_padding_mask);
  Tensor ff_block(const Tensor& x);
  Activation activation_;
};

class TransformerEncoderLayer : public ModuleHolder<TransformerEncoderLayerImpl> {
 public:
  using ModuleHolder<TransformerEncoderLayerImpl>::ModuleHolder;
  TransformerEncoderLayer(int64_t d_model, int64_t nhead, TransformerEncoderLayerOptions options = {})
      : ModuleHolder(std::make_shared<TransformerEncoderLayerImpl>(d_model, nhead, options)) {}
  // Spelled out (not forwarded) so that `layer(x, {}, padding)` compiles.
  Tensor operator()(const Tensor& src, const Tensor& src_mask = {}, const Tensor& src_key_padding_mask = {}) const {
    return get()->forward(src, src_mask, src_key_padding_mask);
  }
};

// num_layers copies of encoder_layer as layers.0 .. layers.N-1, then the optional final norm.
// Each copy starts as PyTorch's deepcopy does: the layer's weights, each tensor's dtype and
// device, each parameter's requires_grad, and its train/eval mode.
class TransformerEncoderImpl : public Module {
 public:
  TransformerEncoderImpl(const TransformerEncoderLayer& encoder_layer, int64_t num_layers,
                         LayerNorm norm = nullptr);
  Tensor forward(const Tensor& src, const Tensor& mask = {}, const Tensor& src_key_padding_mask = {});

  int64_t num_layers;
  ModuleList layers{nullptr};
  LayerNorm norm{nullptr};
};

class TransformerEncoder : public ModuleHolder<TransformerEncoderImpl> {
 public:
  using ModuleHolder<TransformerEncoderImpl>::ModuleHolder;
  TransformerEncoder(const TransformerEncoderLayer& encoder_layer, int64_t num_layers, LayerNorm norm = nullptr)
      : ModuleHolder(std::make_shared<TransformerEncoderImpl>(encoder_layer, num_layers, std::move(norm))) {}
  Tensor operator()(const Tensor& src, const Tensor& mask = {}, const Tensor& src_key_padding_mask = {}) const {
    return get()->forward(src, mask, src_key_padding_mask);
  }
};

}  // namespace kiln::nn
