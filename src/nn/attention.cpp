// MultiheadAttention: PyTorch's parameters and initialisation; forward through the fused attention op.
#include "kiln/nn/attention.h"

#include <cmath>

#include "kiln/nn/init.h"
#include "kiln/ops.h"

namespace kiln::nn {
namespace {

// PyTorch's mask (bool true = masked, or float added) as scaled_dot_product_attention's float
// form, for combining with another mask.
Tensor additive(const Tensor& mask, ScalarType dtype) {
  if (mask.dtype() != kBool) return mask.to(dtype);
  return zeros(mask.shape(), TensorOptions(dtype).device(mask.device())).masked_fill(mask, -INFINITY);
}

void check_mask_dtype(const Tensor& mask, const char* what) {
  KILN_CHECK(mask.dtype() == kBool || mask.is_floating_point(), "MultiheadAttention::forward", what,
             " must be bool or floating point, got ", mask.dtype());
}

}  // namespace

MultiheadAttentionImpl::MultiheadAttentionImpl(int64_t embed_dim, int64_t num_heads, MultiheadAttentionOptions o)
    : embed_dim(embed_dim), num_heads(num_heads), options(o) {
  KILN_CHECK(embed_dim > 0 && num_heads > 0, "MultiheadAttention",
             "embed_dim and num_heads must be positive, got ", embed_dim, " and ", num_heads);
  KILN_CHECK(embed_dim % num_heads == 0, "MultiheadAttention", "embed_dim ", embed_dim,
             " must be divisible by num_heads ", num_heads);
  KILN_CHECK(o.dropout >= 0.0 && o.dropout <= 1.0, "MultiheadAttention", "dropout must be in [0, 1], got ", o.dropout);
  head_dim = embed_dim / num_heads;
  kdim = o.kdim.value_or(embed_dim);
  vdim = o.vdim.value_or(embed_dim);
  KILN_CHECK(kdim > 0 && vdim > 0, "MultiheadAttention", "kdim and vdim must be positive, got ", kdim, " and ", vdim);
  // Registration order is PyTorch's, so state_dict lists the same names in the same order.
  if (kdim == embed_dim && vdim == embed_dim) {
    in_proj_weight = register_parameter("in_proj_weight", empty({3 * embed_dim, embed_dim}));
  } else {
    q_proj_weight = register_parameter("q_proj_weight", empty({embed_dim, embed_dim}));
    k_proj_weight = register_parameter("k_proj_weight", empty({embed_dim, kdim}));
    v_proj_weight = register_parameter("v_proj_weight", empty({embed_dim, vdim}));
  }
  if (o.bias) in_proj_bias = register_parameter("in_proj_bias", empty({3 * embed_dim}));
  out_proj = register_module("out_proj", Linear(embed_dim, embed_dim, o.bias));
  reset_parameters();
}

void MultiheadAttentionImpl::reset_parameters() {
  if (in_proj_weight.defined()) {
    init::xavier_uniform_(in_proj_weight);
  } else {
    init::xavier_uniform_(q_proj_weight);
    init::xavier_uniform_(k_proj_weight);
    init::xavier_uniform_(v_proj_weight);
  }
  if (in_proj_bias.defined()) {
    init::zeros_(in_proj_bias);
    init::zeros_(out_proj->bias);
  }
}

std::tuple<Tensor, Tensor> MultiheadAttentionImpl::forward(const Tensor& query, const Tensor& key,
                                                           const Tensor& value, const Tensor& key_padding_mask,
                                                           bool need_weights, const Tensor& attn_mask,
                                                           bool average_attn_weights) {
  const char* where = "MultiheadAttention::forward";
  KILN_CHECK(query.defined() && key.defined() && value.defined(), where, "query, key and value must be defined");
  const bool batched = query.dim() == 3;
  KILN_CHECK(query.dim() == 3 || query.dim() == 2, where, "query must be 3-D (batched) or 2-D, got shape ",
             query.shape());
  KILN_CHECK(key.dim() == query.dim() && value.dim() == query.dim(), where,
             "query, key and value must have the same rank, got shapes ", query.shape(), ", ", key.shape(), ", ",
             value.shape());
  // Work in [B, L, E].
  auto to_blE = [&](const Tensor& t) {
    if (!batched) return t.unsqueeze(0);
    return options.batch_first ? t : t.transpose(0, 1);
  };
  Tensor q = to_blE(query), k = to_blE(key), v = to_blE(value);
  const int64_t B = q.size(0), L = q.size(1), S = k.size(1);
  KILN_CHECK(q.size(2) == embed_dim && k.size(2) == kdim && v.size(2) == vdim, where,
             "expected feature sizes (", embed_dim, ", ", kdim, ", ", vdim, "), got query ", query.shape(), ", key ",
             key.shape(), ", value ", value.shape());
  KILN_CHECK(k.size(0) == B && v.size(0) == B && v.size(1) == S, where,
             "key and value must match query's batch and each other's length, got query ", query.shape(), ", key ",
             key.shape(), ", value ", value.shape());

  // Projections. Self-attention (one input) does all three in one matmul.
  const int64_t E = embed_dim;
  auto bias_part = [&](int64_t i) { return in_proj_bias.defined() ? in_proj_bias.narrow(0, i * E, E) : Tensor(); };
  Tensor Q, K, V;
  if (in_proj_weight.defined() && query.is_same(key) && key.is_same(value)) {
    auto qkv = kiln::linear(q, in_proj_weight, in_proj_bias).chunk(3, -1);
    Q = qkv[0], K = qkv[1], V = qkv[2];
  } else {
    Tensor wq = in_proj_weight.defined() ? in_proj_weight.narrow(0, 0, E) : q_proj_weight;
    Tensor wk = in_proj_weight.defined() ? in_proj_weight.narrow(0, E, E) : k_proj_weight;
    Tensor wv = in_proj_weight.defined() ? in_proj_weight.narrow(0, 2 * E, E) : v_proj_weight;
    Q = kiln::linear(q, wq, bias_part(0));
    K = kiln::linear(k, wk, bias_part(1));
    V = kiln::linear(v, wv, bias_part(2));
  }
  auto heads = [&](const Tensor& t, int64_t len) { return t.reshape({B, len, num_heads, head_dim}).transpose(1, 2); };
  Q = heads(Q, L), K = heads(K, S), V = heads(V, S);

  // One mask in scaled_dot_product_attention's convention, broadcastable to [B, H, L, S].
  Tensor mask;
  if (attn_mask.defined()) {
    check_mask_dtype(attn_mask, "attn_mask");
    KILN_CHECK(attn_mask.shape() == (Shape{L, S}) || attn_mask.shape() == (Shape{B * num_heads, L, S}), where,
               "attn_mask must be [", L, ", ", S, "] or [", B * num_heads, ", ", L, ", ", S, "], got ",
               attn_mask.shape());
    mask = attn_mask.dim() == 2 ? attn_mask : attn_mask.reshape({B, num_heads, L, S});
  }
  if (key_padding_mask.defined()) {
    check_mask_dtype(key_padding_mask, "key_padding_mask");
    Shape want = batched ? Shape{B, S} : Shape{S};
    KILN_CHECK(key_padding_mask.shape() == want, where, "key_padding_mask must be ", want, ", got ",
               key_padding_mask.shape());
    Tensor kpm = key_padding_mask.reshape({B, 1, 1, S});
    if (!mask.defined()) {
      mask = kpm;
    } else if (mask.dtype() == kBool && kpm.dtype() == kBool) {
      mask = logical_or(mask, kpm);
    } else {
      mask = add(additive(mask, Q.dtype()), additive(kpm, Q.dtype()));
    }
  }
  if (mask.defined() && mask.dtype() == kBool) mask = logical_not(mask);  // true = attend
  else if (mask.defined()) mask = mask.to(Q.dtype());

  const double p = is_training() ? options.dropout : 0.0;
  Tensor out, weights;
  if (!need_weights) {
    out = scaled_dot_product_attention(Q, K, V, mask, p);
  } else {
    // The weights are asked for, so the S x S matrix is built; as in PyTorch they are returned
    // after dropout.
    Tensor scores = mul(matmul(Q, K.transpose(-2, -1)), 1.0 / std::sqrt(static_cast<double>(head_dim)));
    weights = mask.defined() ? masked_softmax(scores, mask, -1) : softmax(scores, -1);
    if (p > 0) weights = dropout(weights, p, true);
    out = matmul(weights, V);
    if (average_attn_weights) weights = mean(weights, {1});
    if (!batched) weights = weights.squeeze(0);
  }
  out = out_proj(out.transpose(1, 2).reshape({B, L, E}));
  if (!batched) return {out.squeeze(0), weights};
  return {options.batch_first ? out : out.transpose(0, 1), weights};
}

}  // namespace kiln::nn
