// Learning-rate schedulers (torch.optim.lr_scheduler): StepLR, MultiStepLR, LinearLR,
// ExponentialLR, ConstantLR, PolynomialLR, CosineAnnealingLR, OneCycleLR, SequentialLR, LambdaLR
// and ReduceLROnPlateau, with PyTorch's formulas step for step; and Hugging Face's warm-up
// schedules (linear/cosine_schedule_with_warmup).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kiln/optim/optimizer.h"

namespace kiln::optim {

// A scheduler sets every param group's "lr" each step(). As in PyTorch, constructing one
// records "initial_lr" in each group (if absent), takes those as base_lrs, and performs the
// first step, so the optimizer's lr is the schedule's value for epoch 0. Resuming goes through
// load_state_dict (there is no last_epoch constructor argument): construct the scheduler,
// then load the optimizer's and the scheduler's state. The scheduler keeps a reference to the
// optimizer, which must outlive it.
class LRScheduler {
 public:
  virtual ~LRScheduler() = default;
  LRScheduler(const LRScheduler&) = delete;
  LRScheduler& operator=(const LRScheduler&) = delete;

  // Call after optimizer.step().
  virtual void step();
  // The lr of each param group set by the latest step.
  std::vector<double> get_last_lr() const { return last_lr_; }
  int64_t last_epoch() const { return last_epoch_; }
  const std::vector<double>& base_lrs() const { return base_lrs_; }
  Optimizer& optimizer() const { return optimizer_; }
  const std::string& name() const { return name_; }

  // "last_epoch" and "step_count" (0-d int64), "base_lrs.<g>" and "last_lr.<g>" (0-d float64).
  // The constructor's arguments are not saved: load into a scheduler built with the same ones.
  virtual std::map<std::string, Tensor> state_dict() const;
  // Checks every key, dtype and the number of param groups first ("[StepLR::load_state_dict] ...");
  // on error nothing changes.
  void load_state_dict(const std::map<std::string, Tensor>& state_dict);

 protected:
  LRScheduler(Optimizer& optimizer, std::string name);
  // PyTorch's get_lr: the lrs for last_epoch_, often from the groups' current lr (recursive form).
  virtual std::vector<double> get_lr() = 0;
  // PyTorch's _get_closed_form_lr, used when SequentialLR restarts this scheduler at a milestone.
  virtual std::optional<std::vector<double>> closed_form_lr() const { return std::nullopt; }
  // The first step; each concrete scheduler's constructor calls it last (virtual get_lr is
  // not reachable from the base constructor).
  void initial_step();
  // last_epoch_ += 1 and get_lr(), or with an epoch: last_epoch_ = epoch and the closed form.
  void update_lr(std::optional<int64_t> epoch = std::nullopt);
  // load_state_dict's two halves: check everything (keys named with `prefix` in messages),
  // then take the values.
  virtual void check_loadable(const std::map<std::string, Tensor>& sd, const std::string& where,
                              const std::string& prefix) const;
  virtual void apply_loaded(const std::map<std::string, Tensor>& sd);
  // SequentialLR takes back the initial steps of the schedulers it is given.
  virtual void undo_initial_step() { last_epoch_ -= 1; }
  std::vector<double> group_lrs() const;
  void set_group_lrs(const std::vector<double>& lrs);

  Optimizer& optimizer_;
  std::string name_;
  std::vector<double> base_lrs_;
  int64_t last_epoch_ = -1;
  int64_t step_count_ = 0;
  bool is_initial_ = false;
  std::vector<double> last_lr_;

  friend class SequentialLR;
};

// lr = base_lr * gamma ^ (epoch / step_size)
class StepLR : public LRScheduler {
 public:
  StepLR(Optimizer& optimizer, int64_t step_size, double gamma = 0.1);

 protected:
  std::vector<double> get_lr() override;
  std::optional<std::vector<double>> closed_form_lr() const override;

 private:
  int64_t step_size_;
  double gamma_;
};

// lr = base_lr * gamma ^ (number of milestones <= epoch); a repeated milestone counts twice.
class MultiStepLR : public LRScheduler {
 public:
  MultiStepLR(Optimizer& optimizer, std::vector<int64_t> milestones, double gamma = 0.1);

 protected:
  std::vector<double> get_lr() override;
  std::optional<std::vector<double>> closed_form_lr() const override;

 private:
  std::vector<int64_t> milestones_;  // sorted
  double gamma_;
};

// Linear warm-up: the factor goes from start_factor to end_factor over total_iters steps.
class LinearLR : public LRScheduler {
 public:
  LinearLR(Optimizer& optimizer, double start_factor = 1.0 / 3, double end_factor = 1.0, int64_t total_iters = 5);

 protected:
  std::vector<double> get_lr() override;
  std::optional<std::vector<double>> closed_form_lr() const override;

 private:
  double start_factor_, end_factor_;
  int64_t total_iters_;
};

// lr = base_lr * gamma ^ epoch
class ExponentialLR : public LRScheduler {
 public:
  ExponentialLR(Optimizer& optimizer, double gamma);

 protected:
  std::vector<double> get_lr() override;
  std::optional<std::vector<double>> closed_form_lr() const override;

 private:
  double gamma_;
};

// lr = base_lr * factor for the first total_iters steps, then base_lr; 0 < factor <= 1.
class ConstantLR : public LRScheduler {
 public:
  ConstantLR(Optimizer& optimizer, double factor = 1.0 / 3, int64_t total_iters = 5);

 protected:
  std::vector<double> get_lr() override;
  std::optional<std::vector<double>> closed_form_lr() const override;

 private:
  double factor_;
  int64_t total_iters_;
};

// lr = base_lr * (1 - min(epoch, total_iters) / total_iters) ^ power (0 from total_iters on).
class PolynomialLR : public LRScheduler {
 public:
  PolynomialLR(Optimizer& optimizer, int64_t total_iters = 5, double power = 1.0);

 protected:
  std::vector<double> get_lr() override;
  std::optional<std::vector<double>> closed_form_lr() const override;

 private:
  int64_t total_iters_;
  double power_;
};

// lr = eta_min + (base_lr - eta_min) * (1 + cos(pi * epoch / T_max)) / 2, in PyTorch's
// recursive form (so it keeps going past T_max, back up, as PyTorch's does).
class CosineAnnealingLR : public LRScheduler {
 public:
  CosineAnnealingLR(Optimizer& optimizer, int64_t T_max, double eta_min = 0.0);

 protected:
  std::vector<double> get_lr() override;
  std::optional<std::vector<double>> closed_form_lr() const override;

 private:
  int64_t T_max_;
  double eta_min_;
};

// Fields in torch.optim.lr_scheduler.OneCycleLR's argument order. Give total_steps, or
// epochs and steps_per_epoch. One value (max_lr, base_momentum, max_momentum) for all groups,
// or the *_per_group vectors with one value per param group.
struct OneCycleLROptions {
  double max_lr = 0;
  std::optional<int64_t> total_steps = std::nullopt;
  std::optional<int64_t> epochs = std::nullopt;
  std::optional<int64_t> steps_per_epoch = std::nullopt;
  double pct_start = 0.3;
  std::string anneal_strategy = "cos";  // "cos" or "linear"
  bool cycle_momentum = true;
  double base_momentum = 0.85;
  double max_momentum = 0.95;
  double div_factor = 25.0;
  double final_div_factor = 1e4;
  bool three_phase = false;
  std::vector<double> max_lr_per_group = {};
  std::vector<double> base_momentum_per_group = {};
  std::vector<double> max_momentum_per_group = {};
};

// The 1cycle policy (Smith & Topin): lr from max_lr / div_factor up to max_lr over pct_start
// of the steps, then down to initial_lr / final_div_factor; with cycle_momentum the
// optimizer's "momentum" (SGD) or "beta1" (Adam, AdamW: PyTorch's betas[0]) moves the opposite
// way between max_momentum and base_momentum. max_lr must be given (positive and finite). Like
// PyTorch, it stores initial_lr, max_lr, min_lr (and max_momentum, base_momentum) in the
// param groups. Stepping past total_steps is an error.
class OneCycleLR : public LRScheduler {
 public:
  OneCycleLR(Optimizer& optimizer, const OneCycleLROptions& options);

 protected:
  std::vector<double> get_lr() override;

 private:
  struct Phase {
    double end_step;
    const char *start_lr, *end_lr, *start_momentum, *end_momentum;
  };
  double anneal(double start, double end, double pct) const;

  int64_t total_steps_;
  bool cos_;
  std::string momentum_;  // the option cycle_momentum moves ("momentum" or "beta1"), empty without it
  std::vector<Phase> phases_;
};

// Runs schedulers one after another: schedulers[i] from milestones[i - 1] on (each restarts
// from its epoch 0 at its milestone), e.g. LinearLR warm-up for 5 steps, then cosine:
//   auto warm = std::make_shared<LinearLR>(opt, 0.1, 1.0, 5);
//   auto cos = std::make_shared<CosineAnnealingLR>(opt, 95);
//   SequentialLR sched(opt, {warm, cos}, {5});
// The schedulers must be built on the same optimizer, right before this (as in PyTorch).
class SequentialLR : public LRScheduler {
 public:
  SequentialLR(Optimizer& optimizer, std::vector<std::shared_ptr<LRScheduler>> schedulers,
               std::vector<int64_t> milestones);

  void step() override;
  // Its own counters plus "schedulers.<i>.<key>" for each scheduler.
  std::map<std::string, Tensor> state_dict() const override;

 protected:
  std::vector<double> get_lr() override { return last_lr_; }
  void check_loadable(const std::map<std::string, Tensor>& sd, const std::string& where,
                      const std::string& prefix) const override;
  void apply_loaded(const std::map<std::string, Tensor>& sd) override;
  void undo_initial_step() override;

 private:
  std::vector<std::shared_ptr<LRScheduler>> schedulers_;
  std::vector<int64_t> milestones_;
};

// lr = base_lr * lr_lambda(epoch): one function for every param group, or one per group.
// The functions are not part of state_dict() (PyTorch saves only callable objects' state):
// give the same ones when resuming.
class LambdaLR : public LRScheduler {
 public:
  using LrLambda = std::function<double(int64_t)>;
  LambdaLR(Optimizer& optimizer, LrLambda lr_lambda);
  LambdaLR(Optimizer& optimizer, std::vector<LrLambda> lr_lambdas);

 protected:
  std::vector<double> get_lr() override;

 private:
  std::vector<LrLambda> lr_lambdas_;
};

// Fields in torch.optim.lr_scheduler.ReduceLROnPlateau's argument order. min_lr: one for every
// group, or min_lr_per_group with one per param group.
struct ReduceLROnPlateauOptions {
  std::string mode = "min";  // "min": lower metrics are better; "max": higher
  double factor = 0.1;       // the lr is multiplied by it on a plateau (< 1)
  int64_t patience = 10;     // epochs without improvement tolerated
  double threshold = 1e-4;
  std::string threshold_mode = "rel";  // "rel": best * (1 -/+ threshold); "abs": best -/+ threshold
  int64_t cooldown = 0;                // epochs after a reduction before counting again
  double min_lr = 0;
  std::vector<double> min_lr_per_group = {};
  double eps = 1e-8;  // a reduction smaller than this is not made
};

// Lowers the lr when a metric stops improving: step(metric) after each evaluation (a loss in
// "min" mode, an accuracy in "max"); after more than `patience` epochs without a better value
// than the best by more than the threshold, every group's lr becomes max(lr * factor, min_lr),
// then `cooldown` epochs pass before bad epochs count again. As torch's, it has no initial step
// and reads and sets the groups' current lrs (it works after another scheduler). step() without
// a metric is an error. state_dict() adds "best" (float64), "num_bad_epochs" and
// "cooldown_counter" (int64).
class ReduceLROnPlateau : public LRScheduler {
 public:
  ReduceLROnPlateau(Optimizer& optimizer, ReduceLROnPlateauOptions options = {});

  void step() override;
  void step(double metric);
  double best() const { return best_; }
  int64_t num_bad_epochs() const { return num_bad_epochs_; }
  std::map<std::string, Tensor> state_dict() const override;

 protected:
  std::vector<double> get_lr() override { return group_lrs(); }
  void check_loadable(const std::map<std::string, Tensor>& sd, const std::string& where,
                      const std::string& prefix) const override;
  void apply_loaded(const std::map<std::string, Tensor>& sd) override;

 private:
  bool is_better(double value) const;
  ReduceLROnPlateauOptions options_;
  std::vector<double> min_lrs_;
  double best_;
  int64_t num_bad_epochs_ = 0, cooldown_counter_ = 0;
};

// Hugging Face transformers' get_linear_schedule_with_warmup: the factor rises linearly from 0
// to 1 over num_warmup_steps, then falls linearly to 0 at num_training_steps (and stays 0).
std::unique_ptr<LambdaLR> linear_schedule_with_warmup(Optimizer& optimizer, int64_t num_warmup_steps,
                                                      int64_t num_training_steps);
// get_cosine_schedule_with_warmup: linear warm-up, then 0.5 * (1 + cos(pi * 2 num_cycles *
// progress)) with progress going 0 -> 1 from the end of warm-up to num_training_steps (the
// default 0.5 cycles is a half cosine from 1 to 0), never below 0.
std::unique_ptr<LambdaLR> cosine_schedule_with_warmup(Optimizer& optimizer, int64_t num_warmup_steps,
                                                      int64_t num_training_steps, double num_cycles = 0.5);

}  // namespace kiln::optim
