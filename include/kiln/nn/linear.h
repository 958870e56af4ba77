// Linear, Flatten and Identity modules (torch::nn::Linear, Flatten, Identity).
#pragma once

#include "kiln/nn/pimpl.h"

namespace kiln::nn {

// y = x W^T + b, W [out_features, in_features]. Weight and bias start U(-1/sqrt(in), 1/sqrt(in)).
class LinearImpl : public Module {
 public:
  LinearImpl(int64_t in_features, int64_t out_features, bool bias = true);
  // Draws the weight and bias again, as at construction.
  void reset_parameters();
  Tensor forward(const Tensor& x);
  void pretty_print(std::ostream& os) const override;

  int64_t in_features, out_features;
  Tensor weight, bias;  // bias undefined when constructed with bias = false
};
KILN_MODULE(Linear);

// Flattens dims start_dim..end_dim (default: all but the batch dim).
class FlattenImpl : public Module {
 public:
  explicit FlattenImpl(int64_t start_dim = 1, int64_t end_dim = -1) : start_dim(start_dim), end_dim(end_dim) {}
  Tensor forward(const Tensor& x);
  void pretty_print(std::ostream& os) const override;

  int64_t start_dim, end_dim;
};
KILN_MODULE(Flatten);

class IdentityImpl : public Module {
 public:
  Tensor forward(const Tensor& x) { return x; }
};
KILN_MODULE(Identity);

}  // namespace kiln::nn
