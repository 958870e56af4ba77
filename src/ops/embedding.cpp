// embedding: rows of a weight table picked by integer indices, with a dense weight gradient.
#include "ops/op_util.h"

namespace kiln {

using autograd::SavedTensor;
using ops::Op;

Tensor embedding(const Tensor& weight, const Tensor& indices, int64_t padding_idx) {
  ops::check_defined(weight, "embedding");
  ops::check_defined(indices, "embedding");
  const Device dev = ops::common_device({&weight, &indices}, "embedding");
  KILN_CHECK(weight.dim() == 2, "embedding", "weight must be 2-D [num_embeddings, embedding_dim], got shape ",
             weight.shape());
  KILN_CHECK(!is_floating_point(indices.dtype()) && indices.dtype() != kBool, "embedding",
             "indices must be integers (int64 or int32), got ", indices.dtype());
  const int64_t num = weight.size(0), dim = weight.size(1);
  // PyTorch reads a negative padding_idx from the end; here the default -1 means "none", so only
  // [0, num) marks a row and every negative value means no padding row.
  KILN_CHECK(padding_idx < num, "embedding", "padding_idx ", padding_idx, " is out of range for a table of ", num,
             " rows");
  Shape shape = indices.shape();
  shape.push_back(dim);
  Tensor idx = ops::cast(indices, kInt64).reshape({-1}).contiguous();
  Tensor w = weight.contiguous();
  Tensor out = make_empty(shape, weight.dtype(), dev);
  {
    Tensor out2 = out.view({idx.numel(), dim});
    ops::run1(Op::Embedding, dev, {w, idx}, out2);
  }
  if (autograd::needs_grad({&weight})) {
    autograd::record("EmbeddingBackward", {&weight}, out,
                     [si = SavedTensor(idx), num, dim, padding_idx, dt = weight.dtype()](const Tensor& g) -> TensorList {
                       Tensor idx = si.get("EmbeddingBackward");
                       Tensor g2 = ops::cast(g, dt).reshape({idx.numel(), dim});
                       if (autograd::needs_grad({&g2})) {  // create_graph: scatter_add, differentiable in g
                         Tensor gw = ops::sum_at({num, dim}, 0,
                                                 idx.unsqueeze(1).expand({idx.numel(), dim}).contiguous(), g2);
                         if (padding_idx < 0) return {gw};
                         Tensor rows = arange(num, TensorOptions(kInt64).device(g.device())) != padding_idx;
                         return {gw * rows.unsqueeze(1).to(dt)};
                       }
                       g2 = g2.contiguous();
                       Tensor gw = make_empty({num, dim}, dt, g.device());
                       backend::EmbeddingAttrs a{padding_idx};
                       ops::run1(Op::EmbeddingBackward, g.device(), {g2, idx}, gw, &a);
                       return {gw};
                     });
  }
  return out;
}

}  // namespace kiln
