// ReLU, GELU and Dropout modules (torch::nn::ReLU, GELU, Dropout).
#pragma once

#include <string>

#include "kiln/nn/pimpl.h"

namespace kiln::nn {

// `inplace` is accepted for PyTorch compatibility and printed; the result is always a new tensor.
class ReLUImpl : public Module {
 public:
  explicit ReLUImpl(bool inplace = false) : inplace(inplace) {}
  Tensor forward(const Tensor& x);
  void pretty_print(std::ostream& os) const override;

  bool inplace;
};
KILN_MODULE(ReLU);

struct GELUOptions {
  std::string approximate = "none";  // "none" (the erf form) or "tanh"
};

class GELUImpl : public Module {
 public:
  explicit GELUImpl(GELUOptions options = {});
  Tensor forward(const Tensor& x);
  void pretty_print(std::ostream& os) const override;

  GELUOptions options;
};

class GELU : public ModuleHolder<GELUImpl> {
 public:
  using ModuleHolder<GELUImpl>::ModuleHolder;
  GELU(GELUOptions options) : ModuleHolder(std::make_shared<GELUImpl>(std::move(options))) {}
};

// Zeroes elements with probability p in training mode; the identity in eval mode.
class DropoutImpl : public Module {
 public:
  explicit DropoutImpl(double p = 0.5);
  Tensor forward(const Tensor& x);
  void pretty_print(std::ostream& os) const override;

  double p;
};
KILN_MODULE(Dropout);

}  // namespace kiln::nn
