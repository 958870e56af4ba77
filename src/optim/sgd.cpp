// SGD: options and state; the update is one fused kernel per param group (optim/fused_step.h).
#include "kiln/optim/sgd.h"

#include "kiln/autograd.h"
#include "kiln/ops.h"
#include "optim/fused_step.h"

namespace kiln::optim {
namespace {

std::map<std::string, Scalar> to_map(const SGDOptions& o) {
  return {{"lr", o.lr}, {"momentum", o.momentum}, {"dampening", o.dampening},
          {"weight_decay", o.weight_decay}, {"nesterov", o.nesterov}, {"maximize", o.maximize}};
}

SGDOptions from_map(const std::map<std::string, Scalar>& m) {
  return {.lr = m.at("lr").to_double(), .momentum = m.at("momentum").to_double(),
          .dampening = m.at("dampening").to_double(), .weight_decay = m.at("weight_decay").to_double(),
          .nesterov = m.at("nesterov").to<bool>(), .maximize = m.at("maximize").to<bool>()};
}

}  // namespace

SGD::SGD(std::vector<Tensor> params, SGDOptions defaults) : Optimizer("SGD", to_map(defaults), {"momentum_buffer"}) {
  check_options(this->defaults(), "SGD");
  KILN_CHECK(!params.empty(), "SGD", "got an empty parameter list");
  add_param_group(OptimizerParamGroup(std::move(params)));
}

SGD::SGD(std::vector<OptimizerParamGroup> param_groups, SGDOptions defaults)
    : Optimizer("SGD", to_map(defaults), {"momentum_buffer"}) {
  check_options(this->defaults(), "SGD");
  KILN_CHECK(!param_groups.empty(), "SGD", "got an empty list of param groups");
  for (auto& g : param_groups) add_param_group(std::move(g));
}

void SGD::check_options(const std::map<std::string, Scalar>& m, const std::string& where) const {
  const SGDOptions o = from_map(m);
  const char* w = where.c_str();
  KILN_CHECK(o.lr >= 0, w, "invalid learning rate: ", o.lr);
  KILN_CHECK(o.momentum >= 0, w, "invalid momentum value: ", o.momentum);
  KILN_CHECK(o.weight_decay >= 0, w, "invalid weight_decay value: ", o.weight_decay);
  KILN_CHECK(!o.nesterov || (o.momentum > 0 && o.dampening == 0), w,
             "Nesterov momentum requires a momentum and zero dampening (got momentum ", o.momentum,
             ", dampening ", o.dampening, ")");
}

SGDOptions SGD::options(size_t group) const { return from_map(group_options(group)); }

Tensor SGD::step(LossClosure closure) {
  Tensor loss = run_closure(closure);
  NoGradGuard no_grad;
  const std::string where = name() + "::step";
  // Every group is checked before any buffer is created or any parameter moves: a step that
  // throws changes nothing.
  const auto buckets = detail::checked_buckets(param_groups(), where.c_str());
  check_state_matches_params(where.c_str());
  for (size_t g = 0; g < buckets.size(); ++g) {
    const SGDOptions o = from_map(param_groups()[g].options());
    for (const auto& bucket : buckets[g]) {
      std::vector<Tensor> params = bucket.tensors, grads, bufs;
      std::vector<uint8_t> fresh;
      for (const Tensor& p : params) {
        grads.push_back(detail::like_param(p.grad(), p));
        if (o.momentum == 0) continue;
        Tensor& buf = mutable_state(p)["momentum_buffer"];
        // First step: the buffer is a copy of the (decayed) gradient, written by the kernel.
        fresh.push_back(buf.defined() ? 0 : 1);
        buf = buf.defined() ? detail::like_param(buf, p) : empty_like(p);
        bufs.push_back(buf);
      }
      backend::SgdStepAttrs attrs;
      attrs.lr = o.lr;
      attrs.momentum = o.momentum;
      attrs.dampening = o.dampening;
      attrs.weight_decay = o.weight_decay;
      attrs.nesterov = o.nesterov;
      attrs.maximize = o.maximize;
      attrs.fresh_buffer = fresh;
      detail::sgd_step(params, grads, bufs, attrs, where.c_str());
    }
  }
  return loss;
}

}  // namespace kiln::optim
