// kiln::optim::RMSprop and Adagrad: per-element step sizes from running averages (RMSprop) or
// sums (Adagrad) of squared gradients, as torch.optim's (and libtorch's torch::optim) versions.
#pragma once

#include "kiln/optim/optimizer.h"

namespace kiln::optim {

// What RMSprop and Adagrad share: torch's for-loop step, each parameter with a gradient updated by
// elementwise ops in its own dtype and on its device, after every group was checked (a step that
// throws changes nothing).
class PerParameterOptimizer : public Optimizer {
 public:
  Tensor step(LossClosure closure = nullptr) override;

 protected:
  using Optimizer::Optimizer;
  // Checks the defaults, refuses an empty list, and adds the groups.
  void init_groups(std::vector<OptimizerParamGroup> groups);
  // One parameter's update with its group's options and its state.
  virtual void update(const std::map<std::string, Scalar>& options, Tensor& param,
                      std::map<std::string, Tensor>& state) = 0;
};

// Fields in torch.optim.RMSprop's argument order: RMSprop opt(ps, {.lr = 1e-3, .momentum = 0.9}).
struct RMSpropOptions {
  double lr = 1e-2;
  double alpha = 0.99;
  double eps = 1e-8;
  double weight_decay = 0;
  double momentum = 0;
  bool centered = false;
  bool maximize = false;
};

// torch.optim.RMSprop's (non-foreach) update, for each parameter p with a gradient g:
//   g = -g (maximize);  g = g + weight_decay * p
//   v = alpha * v + (1 - alpha) * g^2
//   centered: m = lerp(m, g, 1 - alpha);  avg = sqrt(v - m^2) + eps     else avg = sqrt(v) + eps
//   momentum: buf = momentum * buf + g / avg;  p = p - lr * buf          else p = p - lr * g / avg
// State per parameter: "step" (0-d float32 on the CPU), "square_avg", "momentum_buffer" (momentum
// > 0), "grad_avg" (centered), zeros at the first step. Parameters without a gradient are skipped.
// The update is a few elementwise ops per parameter in its own dtype and on its device (torch's
// for-loop form: mul_, addcmul_, lerp_, sqrt, addcdiv_, add_ with alpha, rounding as torch's), on
// every device that has those ops. float32 and float64 runs equal torch's but for an ulp where
// torch's sqrt (MKL's) rounds otherwise; 16-bit runs may differ by an ulp where torch's short
// tensors round per operation (docs/numerics.md).
class RMSprop : public PerParameterOptimizer {
 public:
  RMSprop(std::vector<Tensor> params, RMSpropOptions defaults = {});
  RMSprop(std::vector<OptimizerParamGroup> param_groups, RMSpropOptions defaults = {});
  RMSpropOptions options(size_t group) const;

 protected:
  void check_options(const std::map<std::string, Scalar>& options, const std::string& where) const override;
  std::vector<std::string> required_state(const std::map<std::string, Scalar>& options) const override;
  void update(const std::map<std::string, Scalar>& options, Tensor& param,
              std::map<std::string, Tensor>& state) override;
};

struct AdagradOptions {
  double lr = 1e-2;
  double lr_decay = 0;
  double weight_decay = 0;
  double initial_accumulator_value = 0;
  double eps = 1e-10;
  bool maximize = false;
};

// torch.optim.Adagrad's (non-foreach, dense) update, for each parameter p with a gradient g at its
// step t (counting from 1):
//   g = -g (maximize);  g = g + weight_decay * p;  clr = lr / (1 + (t - 1) * lr_decay)
//   sum = sum + g^2;  p = p - clr * g / (sqrt(sum) + eps)
// State per parameter: "step" (0-d float32 on the CPU) and "sum", made by the constructor as
// torch's, from the constructor's initial_accumulator_value (torch's ignores a group's, also for
// a group added later, whose state comes at its first step). Parameters without a gradient are
// skipped. Elementwise ops, as RMSprop's.
class Adagrad : public PerParameterOptimizer {
 public:
  Adagrad(std::vector<Tensor> params, AdagradOptions defaults = {});
  Adagrad(std::vector<OptimizerParamGroup> param_groups, AdagradOptions defaults = {});
  AdagradOptions options(size_t group) const;

 protected:
  void check_options(const std::map<std::string, Scalar>& options, const std::string& where) const override;
  std::vector<std::string> required_state(const std::map<std::string, Scalar>& options) const override;
  void update(const std::map<std::string, Scalar>& options, Tensor& param,
              std::map<std::string, Tensor>& state) override;
};

}  // namespace kiln::optim
