// embedding: rows of a weight table picked by integer indices.
// STAND-IN: composed from index_select until the embedding kernel lands (padding_idx not honoured).
#include "ops/op_util.h"

namespace kiln {

Tensor embedding(const Tensor& weight, const Tensor& indices, int64_t padding_idx) {
  (void)padding_idx;
  Shape shape = indices.shape();
  shape.push_back(weight.size(1));
  return index_select(weight, 0, indices.reshape({-1})).reshape(shape);
}

}  // namespace kiln
