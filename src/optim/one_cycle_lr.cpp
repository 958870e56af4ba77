// OneCycleLR and SequentialLR: the schedulers that drive other state (momentum, other schedulers).
#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>

#include "kiln/optim/lr_scheduler.h"

namespace kiln::optim {
namespace {

// One value per param group: the per-group list when given, else `one` for every group.
std::vector<double> per_group(const Optimizer& o, const char* name, double one, const std::vector<double>& list) {
  const size_t groups = o.param_groups().size();
  if (list.empty()) return std::vector<double>(groups, one);
  KILN_CHECK(list.size() == groups, "OneCycleLR", "expected ", groups, " values for ", name, "_per_group, got ",
             list.size());
  return list;
}

int64_t one_cycle_total_steps(const OneCycleLROptions& o) {
  if (o.total_steps) {
    KILN_CHECK(*o.total_steps > 0, "OneCycleLR", "expected a positive total_steps, got ", *o.total_steps);
    return *o.total_steps;
  }
  KILN_CHECK(o.epochs && o.steps_per_epoch, "OneCycleLR",
             "give either total_steps or both epochs and steps_per_epoch");
  KILN_CHECK(*o.epochs > 0, "OneCycleLR", "expected a positive epochs, got ", *o.epochs);
  KILN_CHECK(*o.steps_per_epoch > 0, "OneCycleLR", "expected a positive steps_per_epoch, got ", *o.steps_per_epoch);
  return *o.epochs * *o.steps_per_epoch;
}

// The option cycle_momentum moves: "beta1" where the optimizer has betas (Adam, AdamW), as
// PyTorch's use_beta1 moves betas[0]; else "momentum" (SGD).
std::string cycled_momentum(const Optimizer& opt) {
  if (opt.defaults().count("beta1")) return "beta1";
  KILN_CHECK(opt.defaults().count("momentum"), "OneCycleLR", opt.name(),
             " has neither a momentum nor a beta1 option; cycle_momentum needs one (set cycle_momentum = false)");
  return "momentum";
}

// Checks the options and writes initial_lr, max_lr, min_lr (and the momenta) into the groups,
// before the base constructor reads initial_lr, as PyTorch's constructor does.
Optimizer& prepare_one_cycle(Optimizer& opt, const OneCycleLROptions& o) {
  one_cycle_total_steps(o);
  KILN_CHECK(o.pct_start >= 0 && o.pct_start <= 1, "OneCycleLR", "expected pct_start between 0 and 1, got ",
             o.pct_start);
  KILN_CHECK(o.anneal_strategy == "cos" || o.anneal_strategy == "linear", "OneCycleLR",
             "anneal_strategy must be \"cos\" or \"linear\", got \"", o.anneal_strategy, "\"");
  const auto max_lrs = per_group(opt, "max_lr", o.max_lr, o.max_lr_per_group);
  // PyTorch requires max_lr; here it has a default (0), which would train nothing.
  for (size_t i = 0; i < max_lrs.size(); ++i)
    KILN_CHECK(std::isfinite(max_lrs[i]) && max_lrs[i] > 0, "OneCycleLR", "expected a positive, finite max_lr, got ",
               max_lrs[i], " (param group ", i, ")");
  std::string momentum;
  std::vector<double> max_m, base_m;
  if (o.cycle_momentum) {
    momentum = cycled_momentum(opt);
    max_m = per_group(opt, "max_momentum", o.max_momentum, o.max_momentum_per_group);
    base_m = per_group(opt, "base_momentum", o.base_momentum, o.base_momentum_per_group);
  }
  auto& groups = opt.param_groups();
  for (size_t i = 0; i < groups.size(); ++i) {
    groups[i].set("initial_lr", max_lrs[i] / o.div_factor);
    groups[i].set("max_lr", max_lrs[i]);
    groups[i].set("min_lr", groups[i].get("initial_lr") / o.final_div_factor);
    if (o.cycle_momentum) {
      groups[i].set(momentum, max_m[i]);
      groups[i].set("max_momentum", max_m[i]);
      groups[i].set("base_momentum", base_m[i]);
    }
  }
  return opt;
}

}  // namespace

// ---- OneCycleLR

OneCycleLR::OneCycleLR(Optimizer& optimizer, const OneCycleLROptions& o)
    : LRScheduler(prepare_one_cycle(optimizer, o), "OneCycleLR"),
      total_steps_(one_cycle_total_steps(o)),
      cos_(o.anneal_strategy == "cos"),
      momentum_(o.cycle_momentum ? cycled_momentum(optimizer) : "") {
  const double total = static_cast<double>(total_steps_);
  if (o.three_phase) {
    phases_ = {{o.pct_start * total - 1, "initial_lr", "max_lr", "max_momentum", "base_momentum"},
               {2 * o.pct_start * total - 2, "max_lr", "initial_lr", "base_momentum", "max_momentum"},
               {total - 1, "initial_lr", "min_lr", "max_momentum", "max_momentum"}};
  } else {
    phases_ = {{o.pct_start * total - 1, "initial_lr", "max_lr", "max_momentum", "base_momentum"},
               {total - 1, "max_lr", "min_lr", "base_momentum", "max_momentum"}};
  }
  // A phase of no steps would divide by zero: NaN learning rates and momenta, then NaN weights
  // after one step (torch raises ZeroDivisionError there). A phase that ends before it starts
  // (pct_start 0) is never entered, as in torch.
  double start = 0;
  for (size_t i = 0; i < phases_.size(); ++i) {
    KILN_CHECK(phases_[i].end_step != start, "OneCycleLR", "phase ", i + 1, " of ", phases_.size(), " has no steps (",
               "pct_start ", o.pct_start, " of ", total_steps_, " total steps); use more steps or another pct_start");
    start = phases_[i].end_step;
  }
  initial_step();
}

double OneCycleLR::anneal(double start, double end, double pct) const {
  if (cos_) {
    const double cos_out = std::cos(std::numbers::pi * pct) + 1;
    return end + (start - end) / 2.0 * cos_out;
  }
  return (end - start) * pct + start;
}

std::vector<double> OneCycleLR::get_lr() {
  const int64_t step_num = last_epoch_;
  KILN_CHECK(step_num <= total_steps_, "OneCycleLR", "tried to step ", step_num,
             " times; the specified number of total steps is ", total_steps_);
  std::vector<double> lrs;
  for (auto& group : optimizer_.param_groups()) {
    double start_step = 0.0;
    for (size_t i = 0; i < phases_.size(); ++i) {
      const Phase& phase = phases_[i];
      if (static_cast<double>(step_num) <= phase.end_step || i == phases_.size() - 1) {
        const double pct = (static_cast<double>(step_num) - start_step) / (phase.end_step - start_step);
        lrs.push_back(anneal(group.get(phase.start_lr), group.get(phase.end_lr), pct));
        if (!momentum_.empty())
          group.set(momentum_, anneal(group.get(phase.start_momentum), group.get(phase.end_momentum), pct));
        break;
      }
      start_step = phase.end_step;
    }
  }
  return lrs;
}

// ---- SequentialLR

static Optimizer& check_sequential(Optimizer& opt, const std::vector<std::shared_ptr<LRScheduler>>& schedulers,
                                   const std::vector<int64_t>& milestones) {
  KILN_CHECK(!schedulers.empty(), "SequentialLR", "expects at least one scheduler, got none");
  for (size_t i = 0; i < schedulers.size(); ++i) {
    KILN_CHECK(schedulers[i] != nullptr, "SequentialLR", "scheduler ", i, " is null");
    KILN_CHECK(&schedulers[i]->optimizer() == &opt, "SequentialLR", "scheduler ", i, " (",
               schedulers[i]->name(), ") belongs to a different optimizer");
  }
  KILN_CHECK(milestones.size() + 1 == schedulers.size(), "SequentialLR", "expects one milestone fewer than ",
             "schedulers, got ", schedulers.size(), " schedulers and ", milestones.size(), " milestones");
  KILN_CHECK(std::is_sorted(milestones.begin(), milestones.end()), "SequentialLR",
             "milestones must be in increasing order");
  return opt;
}

SequentialLR::SequentialLR(Optimizer& optimizer, std::vector<std::shared_ptr<LRScheduler>> schedulers,
                           std::vector<int64_t> milestones)
    : LRScheduler(check_sequential(optimizer, schedulers, milestones), "SequentialLR"),
      schedulers_(std::move(schedulers)),
      milestones_(std::move(milestones)) {
  last_epoch_ = 0;
  // Back to the initial lrs and each scheduler's epoch before its initial step; then only the
  // scheduler that runs at epoch 0 takes its first step.
  for (auto& g : optimizer_.param_groups()) g.set_lr(g.get("initial_lr"));
  undo_initial_step();
  const size_t idx = std::upper_bound(milestones_.begin(), milestones_.end(), 0) - milestones_.begin();
  schedulers_[idx]->initial_step();
  last_lr_ = schedulers_[idx]->get_last_lr();
}

void SequentialLR::undo_initial_step() {
  for (auto& s : schedulers_) s->undo_initial_step();
}

void SequentialLR::step() {
  last_epoch_ += 1;
  const size_t idx = std::upper_bound(milestones_.begin(), milestones_.end(), last_epoch_) - milestones_.begin();
  LRScheduler& s = *schedulers_[idx];
  if (idx > 0 && milestones_[idx - 1] == last_epoch_) s.update_lr(0);
  else s.step();
  last_lr_ = s.get_last_lr();
}

std::map<std::string, Tensor> SequentialLR::state_dict() const {
  std::map<std::string, Tensor> sd = LRScheduler::state_dict();
  for (size_t i = 0; i < schedulers_.size(); ++i)
    for (auto& [key, t] : schedulers_[i]->state_dict()) sd["schedulers." + std::to_string(i) + "." + key] = t;
  return sd;
}

namespace {
// Splits "schedulers.<i>.<key>" entries off into one map per scheduler.
std::map<std::string, Tensor> split_children(const std::map<std::string, Tensor>& sd, size_t n,
                                             std::vector<std::map<std::string, Tensor>>& children) {
  children.assign(n, {});
  std::map<std::string, Tensor> own;
  for (const auto& [key, t] : sd) {
    bool taken = false;
    for (size_t i = 0; i < n && !taken; ++i) {
      const std::string prefix = "schedulers." + std::to_string(i) + ".";
      if (key.size() > prefix.size() && key.compare(0, prefix.size(), prefix) == 0) {
        children[i][key.substr(prefix.size())] = t;
        taken = true;
      }
    }
    if (!taken) own[key] = t;
  }
  return own;
}
}  // namespace

void SequentialLR::check_loadable(const std::map<std::string, Tensor>& sd, const std::string& where,
                                  const std::string& prefix) const {
  std::vector<std::map<std::string, Tensor>> children;
  LRScheduler::check_loadable(split_children(sd, schedulers_.size(), children), where, prefix);
  for (size_t i = 0; i < schedulers_.size(); ++i)
    schedulers_[i]->check_loadable(children[i], where, prefix + "schedulers." + std::to_string(i) + ".");
}

void SequentialLR::apply_loaded(const std::map<std::string, Tensor>& sd) {
  std::vector<std::map<std::string, Tensor>> children;
  LRScheduler::apply_loaded(split_children(sd, schedulers_.size(), children));
  for (size_t i = 0; i < schedulers_.size(); ++i) schedulers_[i]->apply_loaded(children[i]);
}

}  // namespace kiln::optim
