// Loss modules (torch::nn::CrossEntropyLoss, NLLLoss, MSELoss): the functional losses with their
// options kept. A class weight is a buffer, so module.to(device) moves it, as torch's.
#pragma once

#include "kiln/nn/functional.h"
#include "kiln/nn/pimpl.h"

namespace kiln::nn {

using CrossEntropyLossOptions = functional::CrossEntropyFuncOptions;
using NLLLossOptions = functional::NLLLossFuncOptions;
using MSELossOptions = functional::MSELossFuncOptions;

class CrossEntropyLossImpl : public Module {
 public:
  explicit CrossEntropyLossImpl(CrossEntropyLossOptions options = {});
  Tensor forward(const Tensor& input, const Tensor& target);
  void pretty_print(std::ostream& os) const override;

  CrossEntropyLossOptions options;
};
KILN_MODULE(CrossEntropyLoss);

class NLLLossImpl : public Module {
 public:
  explicit NLLLossImpl(NLLLossOptions options = {});
  Tensor forward(const Tensor& input, const Tensor& target);
  void pretty_print(std::ostream& os) const override;

  NLLLossOptions options;
};
KILN_MODULE(NLLLoss);

class MSELossImpl : public Module {
 public:
  explicit MSELossImpl(MSELossOptions options = {}) : options(options) {}
  Tensor forward(const Tensor& input, const Tensor& target);
  void pretty_print(std::ostream& os) const override;

  MSELossOptions options;
};
KILN_MODULE(MSELoss);

}  // namespace kiln::nn
