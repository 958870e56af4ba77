// Linear, Flatten: construction with PyTorch's default initialisation, forward and printing.
#include "kiln/nn/linear.h"

#include <cmath>

#include "kiln/nn/init.h"
#include "kiln/ops.h"

namespace kiln::nn {

LinearImpl::LinearImpl(int64_t in_features, int64_t out_features, bool with_bias)
    : in_features(in_features), out_features(out_features) {
  KILN_CHECK(in_features >= 0 && out_features >= 0, "Linear", "feature counts must be non-negative, got ",
             in_features, " and ", out_features);
  weight = register_parameter("weight", empty({out_features, in_features}));
  if (with_bias) bias = register_parameter("bias", empty({out_features}));
  reset_parameters();
}

void LinearImpl::reset_parameters() {
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (bias.defined()) {
    double bound = in_features > 0 ? 1.0 / std::sqrt(static_cast<double>(in_features)) : 0.0;
    init::uniform_(bias, -bound, bound);
  }
}

Tensor LinearImpl::forward(const Tensor& x) { return kiln::linear(x, weight, bias); }

void LinearImpl::pretty_print(std::ostream& os) const {
  os << "Linear(in_features=" << in_features << ", out_features=" << out_features
     << ", bias=" << (bias.defined() ? "True" : "False") << ")";
}

Tensor FlattenImpl::forward(const Tensor& x) { return kiln::flatten(x, start_dim, end_dim); }

void FlattenImpl::pretty_print(std::ostream& os) const {
  os << "Flatten(start_dim=" << start_dim << ", end_dim=" << end_dim << ")";
}

}  // namespace kiln::nn
