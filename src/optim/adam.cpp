// Adam and AdamW: options, checks, per-parameter state and bias corrections; the update itself
// is one fused kernel per param group (optim/fused_step.h).
#include "kiln/optim/adam.h"

#include <cmath>

#include "kiln/autograd.h"
#include "kiln/ops.h"
#include "optim/fused_step.h"

namespace kiln::optim {
namespace {

template <class O>
std::map<std::string, Scalar> to_map(const O& o) {
  return {{"lr", o.lr}, {"beta1", std::get<0>(o.betas)}, {"beta2", std::get<1>(o.betas)}, {"eps", o.eps},
          {"weight_decay", o.weight_decay}, {"amsgrad", o.amsgrad}, {"maximize", o.maximize}};
}

template <class O>
O from_map(const std::map<std::string, Scalar>& m) {
  O o;
  o.lr = m.at("lr").to_double();
  o.betas = {m.at("beta1").to_double(), m.at("beta2").to_double()};
  o.eps = m.at("eps").to_double();
  o.weight_decay = m.at("weight_decay").to_double();
  o.amsgrad = m.at("amsgrad").to<bool>();
  o.maximize = m.at("maximize").to<bool>();
  return o;
}

// State tensor `name` of a parameter: created as zeros on first use, re-laid out like the
// parameter if a loaded one is not.
Tensor& moment(std::map<std::string, Tensor>& state, const char* name, const Tensor& p) {
  Tensor& t = state[name];
  if (!t.defined()) t = zeros_like(p);
  else t = detail::like_param(t, p);
  return t;
}

}  // namespace

AdamBase::AdamBase(std::string name, std::map<std::string, Scalar> defaults, bool decoupled)
    : Optimizer(std::move(name), std::move(defaults), {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"}, {"step"}),
      decoupled_(decoupled) {}

void AdamBase::init_groups(std::vector<OptimizerParamGroup> groups, const char* what) {
  check_options(defaults(), name());
  KILN_CHECK(!groups.empty(), name().c_str(), "got an empty ", what);
  for (auto& g : groups) add_param_group(std::move(g));
}

void AdamBase::check_options(const std::map<std::string, Scalar>& m, const std::string& where) const {
  const AdamOptions o = from_map<AdamOptions>(m);
  const char* w = where.c_str();
  KILN_CHECK(o.lr >= 0, w, "invalid learning rate: ", o.lr);
  KILN_CHECK(o.eps >= 0, w, "invalid epsilon value: ", o.eps);
  const auto [b1, b2] = o.betas;
  KILN_CHECK(b1 >= 0 && b1 < 1, w, "invalid beta parameter at index 0: ", b1, " (betas must be in [0, 1))");
  KILN_CHECK(b2 >= 0 && b2 < 1, w, "invalid beta parameter at index 1: ", b2, " (betas must be in [0, 1))");
  KILN_CHECK(o.weight_decay >= 0, w, "invalid weight_decay value: ", o.weight_decay);
}

std::vector<std::string> AdamBase::required_state(const std::map<std::string, Scalar>& options) const {
  std::vector<std::string> names = {"step", "exp_avg", "exp_avg_sq"};
  if (from_map<AdamOptions>(options).amsgrad) names.push_back("max_exp_avg_sq");
  return names;
}

Tensor AdamBase::step(LossClosure closure) {
  Tensor loss = run_closure(closure);
  NoGradGuard no_grad;
  const std::string where = name() + "::step";
  // Every group is checked before any step count or moment changes: a step that throws changes
  // nothing (a counted step without an update would skew every later bias correction).
  const auto buckets = detail::checked_buckets(param_groups(), where.c_str());
  check_state_matches_params(where.c_str());
  for (size_t g = 0; g < buckets.size(); ++g) {
    const AdamOptions o = from_map<AdamOptions>(param_groups()[g].options());
    const auto [beta1, beta2] = o.betas;
    for (const auto& bucket : buckets[g]) {
      const size_t n = bucket.index.size();
      std::vector<Tensor> params = bucket.tensors, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs;
      std::vector<double> step_size(n), bc2_sqrt(n);
      for (size_t k = 0; k < n; ++k) {
        const Tensor& p = params[k];
        auto& st = mutable_state(p);
        const double step = detail::advance_step(st);
        const double bc1 = 1 - std::pow(beta1, step);
        const double bc2 = 1 - std::pow(beta2, step);
        step_size[k] = o.lr / bc1;
        bc2_sqrt[k] = std::pow(bc2, 0.5);
        grads.push_back(detail::like_param(p.grad(), p));
        exp_avgs.push_back(moment(st, "exp_avg", p));
        exp_avg_sqs.push_back(moment(st, "exp_avg_sq", p));
        if (o.amsgrad) max_exp_avg_sqs.push_back(moment(st, "max_exp_avg_sq", p));
      }
      backend::AdamStepAttrs attrs;
      attrs.lr = o.lr;
      attrs.beta1 = beta1;
      attrs.beta2 = beta2;
      attrs.eps = o.eps;
      attrs.weight_decay = o.weight_decay;
      attrs.amsgrad = o.amsgrad;
      attrs.maximize = o.maximize;
      attrs.decoupled = decoupled_;
      attrs.step_size = step_size;
      attrs.bias_correction2_sqrt = bc2_sqrt;
      detail::adam_step(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, attrs, where.c_str());
    }
  }
  return loss;
}

Adam::Adam(std::vector<Tensor> params, AdamOptions defaults) : AdamBase("Adam", to_map(defaults), false) {
  std::vector<OptimizerParamGroup> groups;
  if (!params.empty()) groups.emplace_back(std::move(params));
  init_groups(std::move(groups), "parameter list");
}

Adam::Adam(std::vector<OptimizerParamGroup> param_groups, AdamOptions defaults)
    : AdamBase("Adam", to_map(defaults), false) {
  init_groups(std::move(param_groups), "list of param groups");
}

AdamOptions Adam::options(size_t group) const { return from_map<AdamOptions>(group_options(group)); }

AdamW::AdamW(std::vector<Tensor> params, AdamWOptions defaults) : AdamBase("AdamW", to_map(defaults), true) {
  std::vector<OptimizerParamGroup> groups;
  if (!params.empty()) groups.emplace_back(std::move(params));
  init_groups(std::move(groups), "parameter list");
}

AdamW::AdamW(std::vector<OptimizerParamGroup> param_groups, AdamWOptions defaults)
    : AdamBase("AdamW", to_map(defaults), true) {
  init_groups(std::move(param_groups), "list of param groups");
}

AdamWOptions AdamW::options(size_t group) const { return from_map<AdamWOptions>(group_options(group)); }

}  // namespace kiln::optim
