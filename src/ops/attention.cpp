// scaled_dot_product_attention.
// STAND-IN: composed from matmul and softmax (S x S scores materialised) until the fused kernel lands.
#include <cmath>

#include "ops/op_util.h"

namespace kiln {

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& attn_mask,
                                    double dropout_p, bool is_causal, std::optional<double> scale) {
  const double s = scale ? *scale : 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  Tensor scores = mul(matmul(q, k.transpose(-2, -1)), s);
  if (is_causal) {
    Tensor keep = tril(ones({q.size(-2), k.size(-2)}, TensorOptions(kBool).device(q.device())));
    scores = masked_fill(scores, logical_not(keep), -INFINITY);
  }
  Tensor p = attn_mask.defined() ? masked_softmax(scores, attn_mask, -1) : softmax(scores, -1);
  if (dropout_p > 0) p = dropout(p, dropout_p, true);
  return matmul(p, v);
}

}  // namespace kiln
