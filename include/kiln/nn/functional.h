// kiln::nn::functional (torch.nn.functional): the nn ops with options as designated initialisers.
#pragma once

#include <optional>
#include <string>

#include "kiln/nn/activation.h"
#include "kiln/nn/expanding_array.h"
#include "kiln/ops.h"

namespace kiln::nn::functional {

// Fields of every options struct follow the PyTorch function's argument order.

struct Conv2dFuncOptions {
  Tensor bias;
  ExpandingArray<2> stride = 1;
  ExpandingArray<2> padding = 0;
  ExpandingArray<2> dilation = 1;
  int64_t groups = 1;
};
inline Tensor conv2d(const Tensor& x, const Tensor& weight, const Conv2dFuncOptions& o = {}) {
  return kiln::conv2d(x, weight, o.bias, o.stride, o.padding, o.dilation, o.groups);
}

struct ConvTranspose2dFuncOptions {
  Tensor bias;
  ExpandingArray<2> stride = 1;
  ExpandingArray<2> padding = 0;
  ExpandingArray<2> output_padding = 0;
  int64_t groups = 1;
  ExpandingArray<2> dilation = 1;
};
inline Tensor conv_transpose2d(const Tensor& x, const Tensor& weight, const ConvTranspose2dFuncOptions& o = {}) {
  return kiln::conv_transpose2d(x, weight, o.bias, o.stride, o.padding, o.output_padding, o.groups, o.dilation);
}

// An empty stride means the kernel size.
struct MaxPool2dFuncOptions {
  ExpandingArray<2> kernel_size;
  ExpandingArray<2> stride = {};
  ExpandingArray<2> padding = 0;
  ExpandingArray<2> dilation = 1;
  bool ceil_mode = false;
};
inline Tensor max_pool2d(const Tensor& x, const MaxPool2dFuncOptions& o) {
  return kiln::max_pool2d(x, o.kernel_size, o.stride, o.padding, o.dilation, o.ceil_mode);
}

struct AvgPool2dFuncOptions {
  ExpandingArray<2> kernel_size;
  ExpandingArray<2> stride = {};
  ExpandingArray<2> padding = 0;
  bool ceil_mode = false;
  bool count_include_pad = true;
};
inline Tensor avg_pool2d(const Tensor& x, const AvgPool2dFuncOptions& o) {
  return kiln::avg_pool2d(x, o.kernel_size, o.stride, o.padding, o.ceil_mode, o.count_include_pad);
}

inline Tensor adaptive_avg_pool2d(const Tensor& x, ExpandingArray<2> output_size) {
  return kiln::adaptive_avg_pool2d(x, output_size);
}

// size or scale_factor (one value, or one per spatial dim); the other stays empty.
struct InterpolateFuncOptions {
  Shape size = {};
  std::vector<double> scale_factor = {};
  std::string mode = "nearest";
  std::optional<bool> align_corners = std::nullopt;
  std::optional<bool> recompute_scale_factor = std::nullopt;
};
inline Tensor interpolate(const Tensor& x, const InterpolateFuncOptions& o) {
  return kiln::interpolate(x, o.size, o.scale_factor, o.mode, o.align_corners, o.recompute_scale_factor);
}

struct BatchNormFuncOptions {
  Tensor weight = {};
  Tensor bias;
  bool training = false;
  double momentum = 0.1;
  double eps = 1e-5;
};
inline Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                         const BatchNormFuncOptions& o = {}) {
  return kiln::batch_norm(x, running_mean, running_var, o.weight, o.bias, o.training, o.momentum, o.eps);
}

struct DropoutFuncOptions {
  double p = 0.5;
  bool training = true;
};
inline Tensor dropout(const Tensor& x, const DropoutFuncOptions& o = {}) {
  return kiln::dropout(x, o.p, o.training);
}

inline Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = {}) {
  return kiln::linear(x, weight, bias);
}

// torch.flatten's defaults (all dims); nn::Flatten keeps the batch dim.
inline Tensor flatten(const Tensor& x, int64_t start_dim = 0, int64_t end_dim = -1) {
  return kiln::flatten(x, start_dim, end_dim);
}

inline Tensor relu(const Tensor& x) { return kiln::relu(x); }

struct GELUFuncOptions {
  std::string approximate = "none";  // or "tanh"
};
inline Tensor gelu(const Tensor& x, const GELUFuncOptions& o = {}) { return kiln::gelu(x, o.approximate); }

// torch.nn.functional's activations with parameters; options as the modules' (nn/activation.h).
inline Tensor leaky_relu(const Tensor& x, const LeakyReLUOptions& o = {}) { return kiln::leaky_relu(x, o.negative_slope); }
inline Tensor elu(const Tensor& x, const ELUOptions& o = {}) { return kiln::elu(x, o.alpha); }
inline Tensor softplus(const Tensor& x, const SoftplusOptions& o = {}) { return kiln::softplus(x, o.beta, o.threshold); }
inline Tensor hardtanh(const Tensor& x, const HardtanhOptions& o = {}) { return kiln::hardtanh(x, o.min_val, o.max_val); }
inline Tensor relu6(const Tensor& x) { return kiln::relu6(x); }

// libtorch's F::embedding(input, weight, options): a negative padding_idx counts from the end.
struct EmbeddingFuncOptions {
  std::optional<int64_t> padding_idx = std::nullopt;
};
inline Tensor embedding(const Tensor& input, const Tensor& weight, const EmbeddingFuncOptions& o = {}) {
  int64_t pad = -1;
  if (o.padding_idx) {
    KILN_CHECK(weight.defined() && weight.dim() == 2, "embedding", "weight must be 2-D, got shape ",
               weight.defined() ? weight.shape() : Shape{});
    const int64_t n = weight.size(0);
    KILN_CHECK(*o.padding_idx < n && *o.padding_idx >= -n, "embedding", "padding_idx must be within num_embeddings ",
               n, ", got ", *o.padding_idx);
    pad = *o.padding_idx < 0 ? *o.padding_idx + n : *o.padding_idx;
  }
  return kiln::embedding(weight, input, pad);
}

struct LayerNormFuncOptions {
  Shape normalized_shape;
  Tensor weight = {};
  Tensor bias;
  double eps = 1e-5;
};
inline Tensor layer_norm(const Tensor& x, const LayerNormFuncOptions& o) {
  return kiln::layer_norm(x, o.normalized_shape, o.weight, o.bias, o.eps);
}

struct GroupNormFuncOptions {
  int64_t num_groups;
  Tensor weight = {};
  Tensor bias;
  double eps = 1e-5;
};
inline Tensor group_norm(const Tensor& x, const GroupNormFuncOptions& o) {
  return kiln::group_norm(x, o.num_groups, o.weight, o.bias, o.eps);
}

struct InstanceNormFuncOptions {
  Tensor running_mean = {};
  Tensor running_var = {};
  Tensor weight = {};
  Tensor bias = {};
  bool use_input_stats = true;
  double momentum = 0.1;
  double eps = 1e-5;
};
inline Tensor instance_norm(const Tensor& x, const InstanceNormFuncOptions& o = {}) {
  return kiln::instance_norm(x, o.running_mean, o.running_var, o.weight, o.bias, o.use_input_stats, o.momentum, o.eps);
}

// bool attn_mask: true = attend (PyTorch's convention for this function); float: added to the scores.
struct ScaledDotProductAttentionFuncOptions {
  Tensor attn_mask;
  double dropout_p = 0.0;
  bool is_causal = false;
  std::optional<double> scale = std::nullopt;
};
inline Tensor scaled_dot_product_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                                           const ScaledDotProductAttentionFuncOptions& o = {}) {
  return kiln::scaled_dot_product_attention(query, key, value, o.attn_mask, o.dropout_p, o.is_causal, o.scale);
}
inline Tensor softmax(const Tensor& x, int64_t dim) { return kiln::softmax(x, dim); }

struct PadFuncOptions {
  Shape pad;  // (before, after) for the last dim, then the one before it, ...
  std::string mode = "constant";  // "constant", "reflect", "replicate" or "circular"
  double value = 0;
};
inline Tensor pad(const Tensor& x, const PadFuncOptions& o) { return kiln::pad(x, o.pad, o.mode, o.value); }

// x divided by its p-norm along dim, the norm raised to eps first (torch's).
struct NormalizeFuncOptions {
  double p = 2.0;
  int64_t dim = 1;
  double eps = 1e-12;
};
inline Tensor normalize(const Tensor& x, const NormalizeFuncOptions& o = {}) {
  return x / clamp_min(kiln::norm(x, o.p, {o.dim}, true), o.eps);
}

struct CosineSimilarityFuncOptions {
  int64_t dim = 1;
  double eps = 1e-8;
};
inline Tensor cosine_similarity(const Tensor& x1, const Tensor& x2, const CosineSimilarityFuncOptions& o = {}) {
  return kiln::cosine_similarity(x1, x2, o.dim, o.eps);
}
inline Tensor log_softmax(const Tensor& x, int64_t dim) { return kiln::log_softmax(x, dim); }

struct CrossEntropyFuncOptions {
  Tensor weight = {};
  int64_t ignore_index = -100;
  Reduction reduction = Reduction::Mean;
  double label_smoothing = 0.0;
};
inline Tensor cross_entropy(const Tensor& input, const Tensor& target, const CrossEntropyFuncOptions& o = {}) {
  return kiln::cross_entropy(input, target, o.weight, o.reduction, o.ignore_index, o.label_smoothing);
}

struct NLLLossFuncOptions {
  Tensor weight = {};
  int64_t ignore_index = -100;
  Reduction reduction = Reduction::Mean;
};
inline Tensor nll_loss(const Tensor& input, const Tensor& target, const NLLLossFuncOptions& o = {}) {
  return kiln::nll_loss(input, target, o.weight, o.reduction, o.ignore_index);
}

struct MSELossFuncOptions {
  Reduction reduction = Reduction::Mean;
};
inline Tensor mse_loss(const Tensor& input, const Tensor& target, const MSELossFuncOptions& o = {}) {
  return kiln::mse_loss(input, target, o.reduction);
}

struct L1LossFuncOptions {
  Reduction reduction = Reduction::Mean;
};
inline Tensor l1_loss(const Tensor& input, const Tensor& target, const L1LossFuncOptions& o = {}) {
  return kiln::l1_loss(input, target, o.reduction);
}

struct SmoothL1LossFuncOptions {
  Reduction reduction = Reduction::Mean;
  double beta = 1.0;
};
inline Tensor smooth_l1_loss(const Tensor& input, const Tensor& target, const SmoothL1LossFuncOptions& o = {}) {
  return kiln::smooth_l1_loss(input, target, o.reduction, o.beta);
}

struct HuberLossFuncOptions {
  Reduction reduction = Reduction::Mean;
  double delta = 1.0;
};
inline Tensor huber_loss(const Tensor& input, const Tensor& target, const HuberLossFuncOptions& o = {}) {
  return kiln::huber_loss(input, target, o.reduction, o.delta);
}

struct BinaryCrossEntropyFuncOptions {
  Tensor weight = {};
  Reduction reduction = Reduction::Mean;
};
inline Tensor binary_cross_entropy(const Tensor& input, const Tensor& target,
                                   const BinaryCrossEntropyFuncOptions& o = {}) {
  return kiln::binary_cross_entropy(input, target, o.weight, o.reduction);
}

struct KLDivFuncOptions {
  Reduction reduction = Reduction::Mean;
  bool log_target = false;
};
inline Tensor kl_div(const Tensor& input, const Tensor& target, const KLDivFuncOptions& o = {}) {
  return kiln::kl_div(input, target, o.reduction, o.log_target);
}

struct BinaryCrossEntropyWithLogitsFuncOptions {
  Tensor weight = {};
  Reduction reduction = Reduction::Mean;
  Tensor pos_weight = {};
};
inline Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target,
                                               const BinaryCrossEntropyWithLogitsFuncOptions& o = {}) {
  return kiln::binary_cross_entropy_with_logits(input, target, o.weight, o.pos_weight, o.reduction);
}

}  // namespace kiln::nn::functional
