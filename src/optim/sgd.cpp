// SGD: torch.optim.SGD's update written with in-place ops, in as few memory passes as ops allow.
#include "kiln/optim/sgd.h"

#include "kiln/autograd.h"
#include "kiln/ops.h"

namespace kiln::optim {
namespace {

std::map<std::string, Scalar> to_map(const SGDOptions& o) {
  return {{"lr", o.lr}, {"momentum", o.momentum}, {"dampening", o.dampening},
          {"weight_decay", o.weight_decay}, {"nesterov", o.nesterov}};
}

SGDOptions from_map(const std::map<std::string, Scalar>& m) {
  return {.lr = m.at("lr").to_double(), .momentum = m.at("momentum").to_double(),
          .dampening = m.at("dampening").to_double(), .weight_decay = m.at("weight_decay").to_double(),
          .nesterov = m.at("nesterov").to<bool>()};
}

// One parameter's update. `d` is the direction; `own` says whether d is a temporary of ours
// that may be changed in place (never p.grad(), never the momentum buffer).
void update(Tensor& p, const Tensor& grad, const SGDOptions& o, std::map<std::string, Tensor>& state) {
  Tensor d = grad;
  bool own = false;
  if (o.weight_decay != 0) {
    d = p * o.weight_decay;
    d.add_(grad);
    own = true;
  }
  if (o.momentum != 0) {
    auto it = state.find("momentum_buffer");
    Tensor buf;
    if (it == state.end()) {
      buf = own ? d : d.clone();  // first step: the buffer is the gradient itself
      state["momentum_buffer"] = buf;
      own = false;                // d and buf are one tensor now
    } else {
      buf = it->second;
      buf.mul_(o.momentum);
      if (o.dampening != 0) buf.add_(own ? d.mul_(1 - o.dampening) : d * (1 - o.dampening));
      else buf.add_(d);
      // after dampening d no longer holds the gradient; only Nesterov reads it again, and
      // Nesterov requires dampening == 0
    }
    if (o.nesterov) {
      Tensor u = buf * o.momentum;
      u.add_(d);
      d = u;
      own = true;
    } else {
      d = buf;
      own = false;
    }
  }
  if (own) p.sub_(d.mul_(o.lr));
  else p.sub_(d * o.lr);
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

SGDOptions SGD::options(size_t group) const {
  KILN_CHECK(group < param_groups().size(), "SGD::options", "param group ", group, " out of range (",
             param_groups().size(), " groups)");
  return from_map(param_groups()[group].options());
}

Tensor SGD::step(LossClosure closure) {
  Tensor loss;
  if (closure) {
    AutoGradMode enable(true);
    loss = closure();
  }
  NoGradGuard no_grad;
  for (auto& group : param_groups()) {
    const SGDOptions o = from_map(group.options());
    for (Tensor& p : group.params()) {
      Tensor grad = p.grad();
      if (!grad.defined()) continue;
      update(p, grad, o, mutable_state(p));
    }
  }
  return loss;
}

}  // namespace kiln::optim
