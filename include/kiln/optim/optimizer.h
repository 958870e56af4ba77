// kiln::optim::Optimizer: parameter groups, zero_grad, and the state as one flat tensor map.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "kiln/tensor.h"

namespace kiln::optim {

// Parameters with their own options. Options given here override the optimizer's defaults by
// name ({"lr", 0.1}), as a param-group dict does in torch.optim; once the group is in an
// optimizer it holds every option, and schedulers add entries of their own ("initial_lr",
// "max_lr", ...), as in PyTorch. (libtorch keeps a typed OptimizerOptions object per group
// instead; a name -> number map is what lets a scheduler or a checkpoint treat every
// optimizer alike. SGD::options(g) gives the typed view.)
class OptimizerParamGroup {
 public:
  OptimizerParamGroup(std::vector<Tensor> params, std::map<std::string, Scalar> options = {})
      : params_(std::move(params)), options_(std::move(options)) {}

  std::vector<Tensor>& params() { return params_; }
  const std::vector<Tensor>& params() const { return params_; }
  std::map<std::string, Scalar>& options() { return options_; }
  const std::map<std::string, Scalar>& options() const { return options_; }

  bool has(const std::string& name) const { return options_.count(name) != 0; }
  // The option as a double; a missing one is an error naming it.
  double get(const std::string& name) const;
  void set(const std::string& name, Scalar value) { options_[name] = value; }
  double lr() const { return get("lr"); }
  void set_lr(double lr) { set("lr", lr); }

 private:
  std::vector<Tensor> params_;
  std::map<std::string, Scalar> options_;
};

// Called by step() before the update, with grad mode on; its loss is what step() returns.
using LossClosure = std::function<Tensor()>;

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // One update of every parameter that has a gradient.
  virtual Tensor step(LossClosure closure = nullptr) = 0;
  // Drops every parameter's .grad() (set_to_none) or fills it with zeros.
  void zero_grad(bool set_to_none = true);
  // Adds parameters with options over the defaults. Errors for an unknown option name (torch keeps
  // one; Kiln refuses it here to catch a typo: add a key of your own afterwards with the group's
  // set()), a parameter already in a group, a non-leaf or undefined tensor, or an invalid value.
  void add_param_group(OptimizerParamGroup group);

  std::vector<OptimizerParamGroup>& param_groups() { return groups_; }
  const std::vector<OptimizerParamGroup>& param_groups() const { return groups_; }
  const std::map<std::string, Scalar>& defaults() const { return defaults_; }
  // Every group's parameters in order: index i here is "state.<i>." in state_dict().
  std::vector<Tensor> parameters() const;
  // The per-parameter state ("momentum_buffer", ...); empty until a step creates it.
  const std::map<std::string, Tensor>& state(const Tensor& param) const;
  const std::string& name() const { return name_; }

  // "state.<i>.<name>" -> the state tensor (shared, not copied, as in PyTorch),
  // "param_groups.<g>.params" -> int64 indices of the group's parameters,
  // "param_groups.<g>.<option>" -> 0-d float64 (int64 for integer and bool options).
  std::map<std::string, Tensor> state_dict() const;
  // Restores a state_dict() of an optimizer of the same kind over parameters of the same
  // shapes. Checks everything first and names what is missing, unexpected or mismatched
  // ("[SGD::load_state_dict] ..."); on error nothing changes. State tensors are copied, cast to
  // each parameter's dtype and moved to its device, as PyTorch does (so float32 state loads
  // into a model converted to float64); counters such as "step" stay float32 on the CPU.
  void load_state_dict(const std::map<std::string, Tensor>& state_dict);

 protected:
  // The closure's loss, computed with grad mode on (undefined without a closure), as step() begins.
  static Tensor run_closure(const LossClosure& closure);
  // Group `group`'s options, for the typed options(g) of each optimizer: a group out of range is
  // an error naming "<name>::options".
  const std::map<std::string, Scalar>& group_options(size_t group) const;
  // name: "SGD"; defaults: every option with its kind (float, int or bool); state_names: the
  // per-parameter state tensors, each shaped like its parameter; counter_names: per-parameter
  // 0-d float32 CPU counters (Adam's "step", a float tensor as in PyTorch).
  Optimizer(std::string name, std::map<std::string, Scalar> defaults, std::vector<std::string> state_names,
            std::vector<std::string> counter_names = {});
  // Checks one group's complete options; `where` names the caller for the message.
  virtual void check_options(const std::map<std::string, Scalar>& /*options*/, const std::string& /*where*/) const {}
  // The state a parameter of a group with these options has all of once it has any (Adam: step,
  // exp_avg, exp_avg_sq): load_state_dict refuses a state dict that has only some of it.
  virtual std::vector<std::string> required_state(const std::map<std::string, Scalar>& /*options*/) const { return {}; }
  // The parameter's state, created empty on first use.
  std::map<std::string, Tensor>& mutable_state(const Tensor& param) { return state_[param.impl()]; }
  // Every existing state tensor still has its parameter's shape, dtype and device (a model
  // converted after some steps has not): an error naming `where`, checked before a step changes
  // anything.
  void check_state_matches_params(const char* where) const;

 private:
  std::string name_;
  std::map<std::string, Scalar> defaults_;
  std::vector<std::string> state_names_;
  std::vector<std::string> counter_names_;
  std::vector<OptimizerParamGroup> groups_;
  // Keyed by the parameter's TensorImpl, which its group keeps alive.
  std::unordered_map<const TensorImpl*, std::map<std::string, Tensor>> state_;
};

}  // namespace kiln::optim
