// layer_norm over the trailing dims.
// STAND-IN: composed from reductions until the layer_norm kernel lands.
#include "ops/op_util.h"

namespace kiln {

Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight, const Tensor& bias,
                  double eps) {
  Shape dims;
  for (size_t i = 0; i < normalized_shape.size(); ++i) dims.push_back(x.dim() - 1 - static_cast<int64_t>(i));
  Tensor mu = mean(x, dims, true);
  Tensor y = div(sub(x, mu), sqrt(add(var(x, dims, 0, true), eps)));
  if (weight.defined()) y = mul(y, weight);
  if (bias.defined()) y = add(y, bias);
  return y;
}

}  // namespace kiln
