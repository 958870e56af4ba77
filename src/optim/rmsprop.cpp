// RMSprop and Adagrad (kiln/optim/rmsprop.h): options, state, and torch's for-loop update, op for
// op (addcmul_, addcdiv_, lerp_ and add with alpha round as torch's do), so that a run equals
// PyTorch's on the CPU bit for bit in every dtype.
#include "kiln/optim/rmsprop.h"

#include "kiln/autograd.h"
#include "kiln/ops.h"
#include "optim/fused_step.h"

namespace kiln::optim {
namespace {

std::map<std::string, Scalar> to_map(const RMSpropOptions& o) {
  return {{"lr", o.lr},         {"alpha", o.alpha},       {"eps", o.eps},          {"weight_decay", o.weight_decay},
          {"momentum", o.momentum}, {"centered", o.centered}, {"maximize", o.maximize}};
}

RMSpropOptions rmsprop_options(const std::map<std::string, Scalar>& m) {
  return {.lr = m.at("lr").to_double(), .alpha = m.at("alpha").to_double(), .eps = m.at("eps").to_double(),
          .weight_decay = m.at("weight_decay").to_double(), .momentum = m.at("momentum").to_double(),
          .centered = m.at("centered").to<bool>(), .maximize = m.at("maximize").to<bool>()};
}

std::map<std::string, Scalar> to_map(const AdagradOptions& o) {
  return {{"lr", o.lr}, {"lr_decay", o.lr_decay}, {"weight_decay", o.weight_decay},
          {"initial_accumulator_value", o.initial_accumulator_value}, {"eps", o.eps}, {"maximize", o.maximize}};
}

AdagradOptions adagrad_options(const std::map<std::string, Scalar>& m) {
  return {.lr = m.at("lr").to_double(), .lr_decay = m.at("lr_decay").to_double(),
          .weight_decay = m.at("weight_decay").to_double(),
          .initial_accumulator_value = m.at("initial_accumulator_value").to_double(), .eps = m.at("eps").to_double(),
          .maximize = m.at("maximize").to<bool>()};
}

// The state tensor `name`, made by `make` at the first step.
template <class Make>
Tensor& state_of(std::map<std::string, Tensor>& st, const char* name, Make&& make) {
  Tensor& t = st[name];
  if (!t.defined()) t = make();
  return t;
}

// The gradient as the update sees it: negated (maximize), plus weight_decay * p.
Tensor effective_grad(const Tensor& p, bool maximize, double weight_decay) {
  Tensor g = maximize ? -p.grad() : p.grad();
  return weight_decay != 0 ? g.add(p, weight_decay) : g;
}

}  // namespace

// ---- the shared step

void PerParameterOptimizer::init_groups(std::vector<OptimizerParamGroup> groups) {
  check_options(defaults(), name());
  KILN_CHECK(!groups.empty(), name().c_str(), "got an empty list of param groups");
  for (auto& g : groups) {
    KILN_CHECK(!g.params().empty(), name().c_str(), "got an empty parameter list");
    add_param_group(std::move(g));
  }
}

Tensor PerParameterOptimizer::step(LossClosure closure) {
  Tensor loss = run_closure(closure);
  NoGradGuard no_grad;
  const std::string where = name() + "::step";
  const auto buckets = detail::checked_buckets(param_groups(), where.c_str());
  check_state_matches_params(where.c_str());
  for (size_t g = 0; g < buckets.size(); ++g)
    for (const auto& bucket : buckets[g])
      for (Tensor p : bucket.tensors) update(param_groups()[g].options(), p, mutable_state(p));
  return loss;
}

// ---- RMSprop

RMSprop::RMSprop(std::vector<Tensor> params, RMSpropOptions defaults)
    : RMSprop(std::vector<OptimizerParamGroup>{OptimizerParamGroup(std::move(params))}, defaults) {}

RMSprop::RMSprop(std::vector<OptimizerParamGroup> param_groups, RMSpropOptions defaults)
    : PerParameterOptimizer("RMSprop", to_map(defaults), {"square_avg", "momentum_buffer", "grad_avg"}, {"step"}) {
  init_groups(std::move(param_groups));
}

void RMSprop::check_options(const std::map<std::string, Scalar>& m, const std::string& where) const {
  const RMSpropOptions o = rmsprop_options(m);
  const char* w = where.c_str();
  KILN_CHECK(o.lr >= 0, w, "invalid learning rate: ", o.lr);
  KILN_CHECK(o.eps >= 0, w, "invalid epsilon value: ", o.eps);
  KILN_CHECK(o.momentum >= 0, w, "invalid momentum value: ", o.momentum);
  KILN_CHECK(o.weight_decay >= 0, w, "invalid weight_decay value: ", o.weight_decay);
  KILN_CHECK(o.alpha >= 0, w, "invalid alpha value: ", o.alpha);
}

std::vector<std::string> RMSprop::required_state(const std::map<std::string, Scalar>& options) const {
  const RMSpropOptions o = rmsprop_options(options);
  std::vector<std::string> names = {"step", "square_avg"};
  if (o.momentum > 0) names.push_back("momentum_buffer");
  if (o.centered) names.push_back("grad_avg");
  return names;
}

RMSpropOptions RMSprop::options(size_t group) const { return rmsprop_options(group_options(group)); }

void RMSprop::update(const std::map<std::string, Scalar>& options, Tensor& p, std::map<std::string, Tensor>& st) {
  const RMSpropOptions o = rmsprop_options(options);
  detail::advance_step(st);
  const Tensor grad = effective_grad(p, o.maximize, o.weight_decay);
  Tensor& square_avg = state_of(st, "square_avg", [&] { return zeros_like(p); });
  square_avg.mul_(o.alpha).addcmul_(grad, grad, 1 - o.alpha);
  Tensor avg;
  if (o.centered) {
    Tensor& grad_avg = state_of(st, "grad_avg", [&] { return zeros_like(p); });
    grad_avg.lerp_(grad, 1 - o.alpha);
    avg = square_avg.addcmul(grad_avg, grad_avg, -1).sqrt_();
  } else {
    avg = square_avg.sqrt();
  }
  avg.add_(o.eps);
  if (o.momentum > 0) {
    Tensor& buf = state_of(st, "momentum_buffer", [&] { return zeros_like(p); });
    buf.mul_(o.momentum).addcdiv_(grad, avg);
    p.add_(buf, -o.lr);
  } else {
    p.addcdiv_(grad, avg, -o.lr);
  }
}

// ---- Adagrad

Adagrad::Adagrad(std::vector<Tensor> params, AdagradOptions defaults)
    : Adagrad(std::vector<OptimizerParamGroup>{OptimizerParamGroup(std::move(params))}, defaults) {}

Adagrad::Adagrad(std::vector<OptimizerParamGroup> param_groups, AdagradOptions defaults)
    : PerParameterOptimizer("Adagrad", to_map(defaults), {"sum"}, {"step"}) {
  init_groups(std::move(param_groups));
  // As torch's, the state exists from the start: a step count of 0, and sums of the
  // constructor's initial_accumulator_value (torch's takes that one, whatever a group says); a
  // group added later gets its own at its first step.
  NoGradGuard no_grad;
  for (const auto& g : this->param_groups())
    for (const Tensor& p : g.params()) {
      auto& st = mutable_state(p);
      st["step"] = scalar_tensor(0.0, kFloat32);
      st["sum"] = full_like(p, defaults.initial_accumulator_value);
    }
}

void Adagrad::check_options(const std::map<std::string, Scalar>& m, const std::string& where) const {
  const AdagradOptions o = adagrad_options(m);
  const char* w = where.c_str();
  KILN_CHECK(o.lr >= 0, w, "invalid learning rate: ", o.lr);
  KILN_CHECK(o.lr_decay >= 0, w, "invalid lr_decay value: ", o.lr_decay);
  KILN_CHECK(o.weight_decay >= 0, w, "invalid weight_decay value: ", o.weight_decay);
  KILN_CHECK(o.initial_accumulator_value >= 0, w, "invalid initial_accumulator_value value: ",
             o.initial_accumulator_value);
  KILN_CHECK(o.eps >= 0, w, "invalid epsilon value: ", o.eps);
}

std::vector<std::string> Adagrad::required_state(const std::map<std::string, Scalar>&) const { return {"step", "sum"}; }

AdagradOptions Adagrad::options(size_t group) const { return adagrad_options(group_options(group)); }

void Adagrad::update(const std::map<std::string, Scalar>& options, Tensor& p, std::map<std::string, Tensor>& st) {
  const AdagradOptions o = adagrad_options(options);
  const double step = detail::advance_step(st);
  const Tensor grad = effective_grad(p, o.maximize, o.weight_decay);
  const double clr = o.lr / (1 + (step - 1) * o.lr_decay);
  // A group added later starts from the optimizer's initial value too, as torch's.
  Tensor& sum = state_of(st, "sum", [&] { return full_like(p, adagrad_options(defaults()).initial_accumulator_value); });
  sum.addcmul_(grad, grad, 1);
  Tensor std = sum.sqrt().add_(o.eps);
  p.addcdiv_(grad, std, -clr);
}

}  // namespace kiln::optim
