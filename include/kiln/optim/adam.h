// kiln::optim::Adam and AdamW: adaptive moments with L2 (Adam) or decoupled (AdamW) weight decay.
#pragma once

#include <tuple>

#include "kiln/optim/optimizer.h"

namespace kiln::optim {

// Fields in torch.optim.Adam's argument order, for designated initialisers:
// Adam opt(model->parameters(), {.lr = 3e-4, .betas = {0.9, 0.98}});
// In a param group's option map the betas are two options, "beta1" and "beta2" (a name ->
// number map holds no pairs): OptimizerParamGroup(ps, {{"beta2", 0.98}}).
struct AdamOptions {
  double lr = 1e-3;
  std::tuple<double, double> betas = {0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 0;
  bool amsgrad = false;
  bool maximize = false;  // ascend: g = -g first
};

// AdamW's: the same fields, with weight_decay 1e-2 by default as in PyTorch.
struct AdamWOptions {
  double lr = 1e-3;
  std::tuple<double, double> betas = {0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 1e-2;
  bool amsgrad = false;
  bool maximize = false;
};

// The update shared by Adam and AdamW, torch.optim.Adam's (non-foreach, non-fused) step for each
// parameter p with a gradient g, its own step count t and bias corrections:
//   g = -g (maximize)
//   Adam: g = g + weight_decay * p          AdamW: p = p * (1 - lr * weight_decay)
//   m = lerp(m, g, 1 - beta1);  v = beta2 * v + (1 - beta2) * g^2;  [amsgrad: vmax = max(vmax, v)]
//   p = p - lr / (1 - beta1^t) * m / (sqrt(v or vmax) / sqrt(1 - beta2^t) + eps)
// All parameters of a group (per device and dtype) are updated by one fused kernel. Parameters
// without a gradient are skipped (their step count does not advance). State per parameter:
// "step" (0-d float32 on the CPU, as PyTorch's), "exp_avg", "exp_avg_sq", and
// "max_exp_avg_sq" with amsgrad. Parameters must be contiguous (row-major or channels-last);
// float16/bfloat16 ones are updated in float and rounded once per stored value.
class AdamBase : public Optimizer {
 public:
  Tensor step(LossClosure closure = nullptr) override;

 protected:
  AdamBase(std::string name, std::map<std::string, Scalar> defaults, bool decoupled);
  void check_options(const std::map<std::string, Scalar>& options, const std::string& where) const override;
  std::vector<std::string> required_state(const std::map<std::string, Scalar>& options) const override;
  void init_groups(std::vector<OptimizerParamGroup> groups, const char* what);

 private:
  bool decoupled_;
};

class Adam : public AdamBase {
 public:
  Adam(std::vector<Tensor> params, AdamOptions defaults = {});
  Adam(std::vector<OptimizerParamGroup> param_groups, AdamOptions defaults = {});
  // Group g's options, typed.
  AdamOptions options(size_t group) const;
};

class AdamW : public AdamBase {
 public:
  AdamW(std::vector<Tensor> params, AdamWOptions defaults = {});
  AdamW(std::vector<OptimizerParamGroup> param_groups, AdamWOptions defaults = {});
  AdamWOptions options(size_t group) const;
};

}  // namespace kiln::optim
