// LRScheduler's stepping and state, and the schedules with a closed form: StepLR, MultiStepLR,
// LinearLR, CosineAnnealingLR. Each get_lr is PyTorch's expression, in PyTorch's evaluation
// order, so the lrs agree with torch.optim.lr_scheduler to the last bit or close to it.
#include "kiln/optim/lr_scheduler.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace kiln::optim {
namespace {

// Python's // (floor division).
int64_t floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

const Tensor& find_key(const std::map<std::string, Tensor>& sd, const std::string& key, const std::string& where,
                       const std::string& prefix, ScalarType dtype) {
  auto it = sd.find(key);
  KILN_CHECK(it != sd.end(), where.c_str(), "missing key '", prefix, key, "'");
  const Tensor& t = it->second;
  KILN_CHECK(t.defined() && t.dim() == 0 && t.dtype() == dtype, where.c_str(), "'", prefix, key,
             "' must be a 0-d ", dtype, " tensor, got ",
             t.defined() ? detail::cat(t.dtype(), " of shape ", t.shape()) : std::string("an undefined tensor"));
  return t;
}

}  // namespace

LRScheduler::LRScheduler(Optimizer& optimizer, std::string name) : optimizer_(optimizer), name_(std::move(name)) {
  for (auto& g : optimizer_.param_groups())
    if (!g.has("initial_lr")) g.set("initial_lr", g.lr());
  for (const auto& g : optimizer_.param_groups()) base_lrs_.push_back(g.get("initial_lr"));
}

std::vector<double> LRScheduler::group_lrs() const {
  std::vector<double> lrs;
  for (const auto& g : optimizer_.param_groups()) lrs.push_back(g.lr());
  return lrs;
}

void LRScheduler::set_group_lrs(const std::vector<double>& lrs) {
  auto& groups = optimizer_.param_groups();
  KILN_CHECK(lrs.size() == groups.size(), name_.c_str(), "computed ", lrs.size(), " learning rates for ",
             groups.size(), " param groups (were groups added after the scheduler was made?)");
  for (size_t i = 0; i < lrs.size(); ++i) groups[i].set_lr(lrs[i]);
}

void LRScheduler::initial_step() {
  step_count_ = 0;
  is_initial_ = true;
  try {
    step();
  } catch (...) {
    is_initial_ = false;
    throw;
  }
  is_initial_ = false;
}

void LRScheduler::step() {
  step_count_ += 1;
  update_lr();
}

void LRScheduler::update_lr(std::optional<int64_t> epoch) {
  std::vector<double> values;
  if (!epoch) {
    last_epoch_ += 1;
    values = get_lr();
  } else {
    last_epoch_ = *epoch;
    auto closed = closed_form_lr();
    values = closed ? *closed : get_lr();
  }
  set_group_lrs(values);
  last_lr_ = group_lrs();
}

std::map<std::string, Tensor> LRScheduler::state_dict() const {
  std::map<std::string, Tensor> sd;
  sd["last_epoch"] = scalar_tensor(last_epoch_, kInt64);
  sd["step_count"] = scalar_tensor(step_count_, kInt64);
  for (size_t g = 0; g < base_lrs_.size(); ++g) sd["base_lrs." + std::to_string(g)] = scalar_tensor(base_lrs_[g], kFloat64);
  for (size_t g = 0; g < last_lr_.size(); ++g) sd["last_lr." + std::to_string(g)] = scalar_tensor(last_lr_[g], kFloat64);
  return sd;
}

void LRScheduler::load_state_dict(const std::map<std::string, Tensor>& sd) {
  check_loadable(sd, name_ + "::load_state_dict", "");
  apply_loaded(sd);
}

void LRScheduler::check_loadable(const std::map<std::string, Tensor>& sd, const std::string& where,
                                 const std::string& prefix) const {
  const size_t groups = optimizer_.param_groups().size();
  std::vector<std::string> expected{"last_epoch", "step_count"};
  for (size_t g = 0; g < groups; ++g) {
    expected.push_back("base_lrs." + std::to_string(g));
    expected.push_back("last_lr." + std::to_string(g));
  }
  for (size_t i = 0; i < expected.size(); ++i)
    find_key(sd, expected[i], where, prefix, i < 2 ? kInt64 : kFloat64);
  for (const auto& [key, t] : sd)
    KILN_CHECK(std::find(expected.begin(), expected.end(), key) != expected.end(), where.c_str(),
               "unexpected key '", prefix, key, "' (the optimizer has ", groups, " param groups)");
}

void LRScheduler::apply_loaded(const std::map<std::string, Tensor>& sd) {
  last_epoch_ = sd.at("last_epoch").item<int64_t>();
  step_count_ = sd.at("step_count").item<int64_t>();
  const size_t groups = optimizer_.param_groups().size();
  base_lrs_.assign(groups, 0.0);
  last_lr_.assign(groups, 0.0);
  for (size_t g = 0; g < groups; ++g) {
    base_lrs_[g] = sd.at("base_lrs." + std::to_string(g)).item<double>();
    last_lr_[g] = sd.at("last_lr." + std::to_string(g)).item<double>();
  }
}

// ---- StepLR

static Optimizer& check_step_lr(Optimizer& o, int64_t step_size) {
  KILN_CHECK(step_size > 0, "StepLR", "step_size must be positive, got ", step_size);
  return o;
}

StepLR::StepLR(Optimizer& optimizer, int64_t step_size, double gamma)
    : LRScheduler(check_step_lr(optimizer, step_size), "StepLR"), step_size_(step_size), gamma_(gamma) {
  initial_step();
}

std::vector<double> StepLR::get_lr() {
  if (last_epoch_ == 0 || last_epoch_ % step_size_ != 0) return group_lrs();
  std::vector<double> lrs = group_lrs();
  for (double& lr : lrs) lr = lr * gamma_;
  return lrs;
}

std::optional<std::vector<double>> StepLR::closed_form_lr() const {
  std::vector<double> lrs;
  for (double base : base_lrs_) lrs.push_back(base * std::pow(gamma_, static_cast<double>(floor_div(last_epoch_, step_size_))));
  return lrs;
}

// ---- MultiStepLR

MultiStepLR::MultiStepLR(Optimizer& optimizer, std::vector<int64_t> milestones, double gamma)
    : LRScheduler(optimizer, "MultiStepLR"), milestones_(std::move(milestones)), gamma_(gamma) {
  std::sort(milestones_.begin(), milestones_.end());
  initial_step();
}

std::vector<double> MultiStepLR::get_lr() {
  const auto hits = std::count(milestones_.begin(), milestones_.end(), last_epoch_);
  std::vector<double> lrs = group_lrs();
  if (hits == 0) return lrs;
  for (double& lr : lrs) lr = lr * std::pow(gamma_, static_cast<double>(hits));
  return lrs;
}

std::optional<std::vector<double>> MultiStepLR::closed_form_lr() const {
  const auto passed = std::upper_bound(milestones_.begin(), milestones_.end(), last_epoch_) - milestones_.begin();
  std::vector<double> lrs;
  for (double base : base_lrs_) lrs.push_back(base * std::pow(gamma_, static_cast<double>(passed)));
  return lrs;
}

// ---- LinearLR

static Optimizer& check_linear_lr(Optimizer& o, double start, double end, int64_t total_iters) {
  KILN_CHECK(start > 0 && start <= 1.0, "LinearLR",
             "start_factor must be greater than 0 and at most 1, got ", start);
  KILN_CHECK(end >= 0 && end <= 1.0, "LinearLR", "end_factor must be between 0 and 1, got ", end);
  // 0 keeps start_factor for ever, as torch's.
  KILN_CHECK(total_iters >= 0, "LinearLR", "total_iters must not be negative, got ", total_iters);
  return o;
}

LinearLR::LinearLR(Optimizer& optimizer, double start_factor, double end_factor, int64_t total_iters)
    : LRScheduler(check_linear_lr(optimizer, start_factor, end_factor, total_iters), "LinearLR"),
      start_factor_(start_factor), end_factor_(end_factor), total_iters_(total_iters) {
  initial_step();
}

std::vector<double> LinearLR::get_lr() {
  std::vector<double> lrs = group_lrs();
  if (last_epoch_ == 0) {
    for (double& lr : lrs) lr = lr * start_factor_;
    return lrs;
  }
  if (is_initial_ || last_epoch_ > total_iters_) return lrs;
  const double diff = end_factor_ - start_factor_;
  const double factor = 1.0 + diff / (static_cast<double>(total_iters_) * start_factor_ +
                                      static_cast<double>(last_epoch_ - 1) * diff);
  for (double& lr : lrs) lr = lr * factor;
  return lrs;
}

std::optional<std::vector<double>> LinearLR::closed_form_lr() const {
  const double done = static_cast<double>(std::min(total_iters_, last_epoch_));
  std::vector<double> lrs;
  for (double base : base_lrs_)
    lrs.push_back(total_iters_ == 0 ? base * start_factor_
                                    : base * (start_factor_ + (end_factor_ - start_factor_) * done /
                                                                  static_cast<double>(total_iters_)));
  return lrs;
}

// ---- CosineAnnealingLR

static Optimizer& check_cosine(Optimizer& o, int64_t T_max) {
  KILN_CHECK(T_max > 0, "CosineAnnealingLR", "T_max must be positive, got ", T_max);
  return o;
}

CosineAnnealingLR::CosineAnnealingLR(Optimizer& optimizer, int64_t T_max, double eta_min)
    : LRScheduler(check_cosine(optimizer, T_max), "CosineAnnealingLR"), T_max_(T_max), eta_min_(eta_min) {
  initial_step();
}

std::vector<double> CosineAnnealingLR::get_lr() {
  constexpr double pi = std::numbers::pi;
  const double e = static_cast<double>(last_epoch_), T = static_cast<double>(T_max_);
  std::vector<double> lrs = group_lrs();
  if (is_initial_) return lrs;
  if (step_count_ == 1 && last_epoch_ > 0) {
    for (size_t i = 0; i < lrs.size(); ++i)
      lrs[i] = eta_min_ + (base_lrs_[i] - eta_min_) * (1 + std::cos(e * pi / T)) / 2;
  } else if ((last_epoch_ - 1 - T_max_) % (2 * T_max_) == 0) {
    for (size_t i = 0; i < lrs.size(); ++i)
      lrs[i] = lrs[i] + (base_lrs_[i] - eta_min_) * (1 - std::cos(pi / T)) / 2;
  } else {
    for (double& lr : lrs)
      lr = (1 + std::cos(pi * e / T)) / (1 + std::cos(pi * (e - 1) / T)) * (lr - eta_min_) + eta_min_;
  }
  return lrs;
}

std::optional<std::vector<double>> CosineAnnealingLR::closed_form_lr() const {
  constexpr double pi = std::numbers::pi;
  std::vector<double> lrs;
  for (double base : base_lrs_)
    lrs.push_back(eta_min_ + (base - eta_min_) * (1 + std::cos(pi * static_cast<double>(last_epoch_) /
                                                               static_cast<double>(T_max_))) / 2);
  return lrs;
}

}  // namespace kiln::optim
