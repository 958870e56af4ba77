// TransformerEncoderLayer and TransformerEncoder: PyTorch's structure, post-norm or pre-norm.
#include "kiln/nn/transformer.h"

#include <map>
#include <string>

#include "kiln/autograd.h"

namespace kiln::nn {
namespace {
Activation activation_of(const std::string& name) {
  if (name == "relu") return Activation::ReLU;
  if (name == "gelu") return Activation::GELU;
  if (name == "gelu_tanh") return Activation::GELUTanh;
  KILN_FAIL("TransformerEncoderLayer", "activation must be \"relu\", \"gelu\" or \"gelu_tanh\", got \"", name, "\"");
}

// Makes `copy`, a fresh module of the prototype's structure, hold the prototype's values: each
// tensor first takes the prototype's dtype and device (a fresh layer is float32 on the CPU), then
// load_state_dict checks the names and shapes and copies the values; frozen parameters stay frozen.
void deep_copy_tensors(Module& copy, const std::map<std::string, Tensor>& weights,
                       const NamedTensors& proto_params) {
  {
    NoGradGuard no_grad;
    auto take_kind = [&](const NamedTensors& own) {
      for (auto [name, t] : own) {
        auto it = weights.find(name);
        if (it == weights.end()) continue;  // load_state_dict names it
        const Tensor& w = it->second;
        if (t.dtype() != w.dtype() || t.device() != w.device())
          detail::set_data(t, t.detach().to(w.device(), w.dtype()));
      }
    };
    take_kind(copy.named_parameters());
    take_kind(copy.named_buffers());
  }
  copy.load_state_dict(weights);
  std::map<std::string, bool> requires_grad;
  for (const auto& [name, p] : proto_params) requires_grad[name] = p.requires_grad();
  for (auto [name, t] : copy.named_parameters())
    if (auto it = requires_grad.find(name); it != requires_grad.end()) t.requires_grad_(it->second);
}

}  // namespace

TransformerEncoderLayerImpl::TransformerEncoderLayerImpl(int64_t d_model, int64_t nhead,
                                                         TransformerEncoderLayerOptions o)
    : d_model(d_model), nhead(nhead), options(o), activation_(activation_of(o.activation)) {
  KILN_CHECK(o.dim_feedforward > 0, "TransformerEncoderLayer", "dim_feedforward must be positive, got ",
             o.dim_feedforward);
  self_attn = register_module(
      "self_attn", MultiheadAttention(d_model, nhead, {.dropout = o.dropout, .bias = o.bias, .batch_first = o.batch_first}));
  linear1 = register_module("linear1", Linear(d_model, o.dim_feedforward, o.bias));
  dropout = register_module("dropout", Dropout(o.dropout));
  linear2 = register_module("linear2", Linear(o.dim_feedforward, d_model, o.bias));
  norm1 = register_module("norm1", LayerNorm(d_model, {.eps = o.layer_norm_eps, .bias = o.bias}));
  norm2 = register_module("norm2", LayerNorm(d_model, {.eps = o.layer_norm_eps, .bias = o.bias}));
  dropout1 = register_module("dropout1", Dropout(o.dropout));
  dropout2 = register_module("dropout2", Dropout(o.dropout));
}

Tensor TransformerEncoderLayerImpl::sa_block(const Tensor& x, const Tensor& mask, const Tensor& key_padding_mask) {
  return dropout1(std::get<0>(self_attn(x, x, x, key_padding_mask, false, mask)));
}

// The activation runs fused into linear1's matmul where the backend allows.
Tensor TransformerEncoderLayerImpl::ff_block(const Tensor& x) {
  return dropout2(linear2(dropout(kiln::linear(x, linear1->weight, linear1->bias, activation_))));
}

Tensor TransformerEncoderLayerImpl::forward(const Tensor& src, const Tensor& src_mask,
                                            const Tensor& src_key_padding_mask) {
  Tensor x = src;
  if (options.norm_first) {
    x = x + sa_block(norm1(x), src_mask, src_key_padding_mask);
    return x + ff_block(norm2(x));
  }
  x = norm1(x + sa_block(x, src_mask, src_key_padding_mask));
  return norm2(x + ff_block(x));
}

TransformerEncoderImpl::TransformerEncoderImpl(const TransformerEncoderLayer& encoder_layer, int64_t num_layers,
                                               LayerNorm norm_)
    : num_layers(num_layers) {
  KILN_CHECK(!encoder_layer.is_empty(), "TransformerEncoder", "encoder_layer is empty");
  KILN_CHECK(num_layers > 0, "TransformerEncoder", "num_layers must be positive, got ", num_layers);
  // PyTorch deep-copies the layer: every copy starts with the given layer's weights, each
  // tensor's dtype and device, each parameter's requires_grad, and the mode.
  layers = register_module("layers", ModuleList());
  const auto& proto = *encoder_layer;
  const auto weights = proto.state_dict();
  for (int64_t i = 0; i < num_layers; ++i) {
    TransformerEncoderLayer layer(proto.d_model, proto.nhead, proto.options);
    deep_copy_tensors(*layer, weights, proto.named_parameters());
    layer->train(proto.is_training());
    layers->push_back(layer);
  }
  if (norm_) norm = register_module("norm", norm_);
}

Tensor TransformerEncoderImpl::forward(const Tensor& src, const Tensor& mask, const Tensor& src_key_padding_mask) {
  Tensor x = src;
  // The list is public: a module put there that is not an encoder layer is an error, not a bad cast.
  for (size_t i = 0; i < layers->size(); ++i)
    x = layers->ptr<TransformerEncoderLayerImpl>(i)->forward(x, mask, src_key_padding_mask);
  return norm ? norm(x) : x;
}

}  // namespace kiln::nn
