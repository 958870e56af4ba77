// LayerNorm and GroupNorm: construction, forward and printing.
#include "kiln/nn/normalization.h"

#include "kiln/nn/init.h"
#include "kiln/ops.h"
#include "nn/python_float.h"

namespace kiln::nn {

LayerNormImpl::LayerNormImpl(Shape normalized_shape_, LayerNormOptions options)
    : normalized_shape(std::move(normalized_shape_)), options(options) {
  for (int64_t s : normalized_shape)
    KILN_CHECK(s >= 0, "LayerNorm", "normalized_shape must be non-negative, got ", normalized_shape);
  if (options.elementwise_affine) {
    weight = register_parameter("weight", empty(normalized_shape));
    if (options.bias) bias = register_parameter("bias", empty(normalized_shape));
  }
  reset_parameters();
}

void LayerNormImpl::reset_parameters() {
  if (weight.defined()) init::ones_(weight);
  if (bias.defined()) init::zeros_(bias);
}

Tensor LayerNormImpl::forward(const Tensor& x) {
  return kiln::layer_norm(x, normalized_shape, weight, bias, options.eps);
}

void LayerNormImpl::pretty_print(std::ostream& os) const {
  os << "LayerNorm((";
  for (size_t i = 0; i < normalized_shape.size(); ++i) os << (i ? ", " : "") << normalized_shape[i];
  os << (normalized_shape.size() == 1 ? ",)" : ")") << ", eps=" << detail::python_float(options.eps)
     << ", elementwise_affine=" << (options.elementwise_affine ? "True" : "False") << ")";
}

GroupNormImpl::GroupNormImpl(int64_t num_groups, int64_t num_channels, GroupNormOptions options)
    : num_groups(num_groups), num_channels(num_channels), options(options) {
  KILN_CHECK(num_groups > 0 && num_channels >= 0 && num_channels % num_groups == 0, "GroupNorm", "num_channels (",
             num_channels, ") must be divisible by num_groups (", num_groups, "), a positive number");
  if (options.affine) {
    weight = register_parameter("weight", empty({num_channels}));
    bias = register_parameter("bias", empty({num_channels}));
  }
  reset_parameters();
}

void GroupNormImpl::reset_parameters() {
  if (weight.defined()) init::ones_(weight);
  if (bias.defined()) init::zeros_(bias);
}

Tensor GroupNormImpl::forward(const Tensor& x) { return kiln::group_norm(x, num_groups, weight, bias, options.eps); }

void GroupNormImpl::pretty_print(std::ostream& os) const {
  os << "GroupNorm(" << num_groups << ", " << num_channels << ", eps=" << detail::python_float(options.eps)
     << ", affine=" << (options.affine ? "True" : "False") << ")";
}

}  // namespace kiln::nn
