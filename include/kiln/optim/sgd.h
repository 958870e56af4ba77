// kiln::optim::SGD: stochastic gradient descent with momentum, dampening, Nesterov and weight decay.
#pragma once

#include "kiln/optim/optimizer.h"

namespace kiln::optim {

// Fields in torch.optim.SGD's argument order, for designated initialisers:
// SGD opt(model->parameters(), {.lr = 0.01, .momentum = 0.9, .weight_decay = 1e-4});
// lr defaults to PyTorch's 1e-3, so {.momentum = 0.9} alone is not silently lr = 0.
struct SGDOptions {
  double lr = 1e-3;
  double momentum = 0;
  double dampening = 0;
  double weight_decay = 0;
  bool nesterov = false;
  bool maximize = false;  // ascend: g = -g first
};

// torch.optim.SGD's update, for each parameter p with a gradient g:
//   g = -g (maximize);  g = g + weight_decay * p
//   buf = g (first step) or momentum * buf + (1 - dampening) * g;  g = nesterov ? g + momentum * buf : buf
//   p = p - lr * g
// Parameters without a gradient are skipped. State: "momentum_buffer" when momentum != 0.
// Each param group (per device and dtype) is one fused kernel: one pass over its elements.
class SGD : public Optimizer {
 public:
  SGD(std::vector<Tensor> params, SGDOptions defaults);
  SGD(std::vector<OptimizerParamGroup> param_groups, SGDOptions defaults);

  Tensor step(LossClosure closure = nullptr) override;
  // Group g's options, typed.
  SGDOptions options(size_t group) const;

 protected:
  void check_options(const std::map<std::string, Scalar>& options, const std::string& where) const override;
};

}  // namespace kiln::optim
