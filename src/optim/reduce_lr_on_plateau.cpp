// ReduceLROnPlateau: torch.optim.lr_scheduler.ReduceLROnPlateau's step(metrics), step for step.
#include <algorithm>
#include <cmath>
#include <limits>

#include "kiln/optim/lr_scheduler.h"

namespace kiln::optim {
namespace {

const char* const kExtra[] = {"best", "num_bad_epochs", "cooldown_counter"};

ReduceLROnPlateauOptions checked(Optimizer& optimizer, ReduceLROnPlateauOptions o) {
  const char* w = "ReduceLROnPlateau";
  KILN_CHECK(o.factor < 1.0, w, "the factor must be below 1, got ", o.factor);
  KILN_CHECK(o.mode == "min" || o.mode == "max", w, "mode must be 'min' or 'max', got '", o.mode, "'");
  KILN_CHECK(o.threshold_mode == "rel" || o.threshold_mode == "abs", w, "threshold_mode must be 'rel' or 'abs', got '",
             o.threshold_mode, "'");
  KILN_CHECK(o.patience >= 0 && o.cooldown >= 0, w, "patience and cooldown must not be negative, got ", o.patience,
             " and ", o.cooldown);
  const size_t groups = optimizer.param_groups().size();
  KILN_CHECK(o.min_lr_per_group.empty() || o.min_lr_per_group.size() == groups, w, "expected ", groups,
             " min_lrs (one per param group), got ", o.min_lr_per_group.size());
  return o;
}

}  // namespace

ReduceLROnPlateau::ReduceLROnPlateau(Optimizer& optimizer, ReduceLROnPlateauOptions options)
    : LRScheduler(optimizer, "ReduceLROnPlateau"), options_(checked(optimizer, std::move(options))) {
  min_lrs_ = options_.min_lr_per_group.empty()
                 ? std::vector<double>(optimizer_.param_groups().size(), options_.min_lr)
                 : options_.min_lr_per_group;
  best_ = options_.mode == "min" ? std::numeric_limits<double>::infinity() : -std::numeric_limits<double>::infinity();
  last_epoch_ = 0;
  last_lr_ = group_lrs();
}

void ReduceLROnPlateau::step() {
  KILN_FAIL("ReduceLROnPlateau::step", "takes the metric it watches: step(validation_loss)");
}

bool ReduceLROnPlateau::is_better(double a) const {
  const double t = options_.threshold;
  const bool rel = options_.threshold_mode == "rel";
  if (options_.mode == "min") return rel ? a < best_ * (1.0 - t) : a < best_ - t;
  return rel ? a > best_ * (t + 1.0) : a > best_ + t;
}

void ReduceLROnPlateau::step(double metric) {
  step_count_ += 1;
  last_epoch_ += 1;
  if (is_better(metric)) {
    best_ = metric;
    num_bad_epochs_ = 0;
  } else {
    num_bad_epochs_ += 1;
  }
  if (cooldown_counter_ > 0) {  // bad epochs in the cooldown do not count
    cooldown_counter_ -= 1;
    num_bad_epochs_ = 0;
  }
  if (num_bad_epochs_ > options_.patience) {
    auto& groups = optimizer_.param_groups();
    // One min_lr for all: groups added since take it too (as torch's); one per group cannot be guessed.
    if (options_.min_lr_per_group.empty()) min_lrs_.resize(groups.size(), options_.min_lr);
    KILN_CHECK(groups.size() == min_lrs_.size(), "ReduceLROnPlateau::step", "the optimizer has ", groups.size(),
               " param groups, and ", min_lrs_.size(), " when the scheduler was made with a min_lr for each");
    for (size_t i = 0; i < groups.size(); ++i) {
      const double old_lr = groups[i].lr();
      const double new_lr = std::max(old_lr * options_.factor, min_lrs_[i]);
      if (old_lr - new_lr > options_.eps) groups[i].set_lr(new_lr);
    }
    cooldown_counter_ = options_.cooldown;
    num_bad_epochs_ = 0;
  }
  last_lr_ = group_lrs();
}

std::map<std::string, Tensor> ReduceLROnPlateau::state_dict() const {
  std::map<std::string, Tensor> sd = LRScheduler::state_dict();
  sd["best"] = scalar_tensor(best_, kFloat64);
  sd["num_bad_epochs"] = scalar_tensor(num_bad_epochs_, kInt64);
  sd["cooldown_counter"] = scalar_tensor(cooldown_counter_, kInt64);
  return sd;
}

void ReduceLROnPlateau::check_loadable(const std::map<std::string, Tensor>& sd, const std::string& where,
                                       const std::string& prefix) const {
  std::map<std::string, Tensor> base = sd;
  for (const char* key : kExtra) {
    auto it = base.find(key);
    KILN_CHECK(it != base.end(), where.c_str(), "missing key '", prefix, key, "'");
    const ScalarType want = std::string(key) == "best" ? kFloat64 : kInt64;
    KILN_CHECK(it->second.defined() && it->second.dim() == 0 && it->second.dtype() == want, where.c_str(), "'",
               prefix, key, "' must be a 0-d ", want, " tensor");
    base.erase(it);
  }
  LRScheduler::check_loadable(base, where, prefix);
}

void ReduceLROnPlateau::apply_loaded(const std::map<std::string, Tensor>& sd) {
  LRScheduler::apply_loaded(sd);
  best_ = sd.at("best").item<double>();
  num_bad_epochs_ = sd.at("num_bad_epochs").item<int64_t>();
  cooldown_counter_ = sd.at("cooldown_counter").item<int64_t>();
}

}  // namespace kiln::optim
