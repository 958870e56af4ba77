// ExponentialLR, ConstantLR and PolynomialLR: PyTorch's get_lr (recursive, from the groups' current
// lrs) and _get_closed_form_lr, in PyTorch's evaluation order.
#include <algorithm>
#include <cmath>

#include "kiln/optim/lr_scheduler.h"

namespace kiln::optim {
namespace {

template <class F>
std::vector<double> each(std::vector<double> lrs, F&& f) {
  for (double& lr : lrs) lr = f(lr);
  return lrs;
}

}  // namespace

// ---- ExponentialLR

ExponentialLR::ExponentialLR(Optimizer& optimizer, double gamma) : LRScheduler(optimizer, "ExponentialLR"), gamma_(gamma) {
  initial_step();
}

std::vector<double> ExponentialLR::get_lr() {
  if (last_epoch_ == 0) return group_lrs();
  return each(group_lrs(), [&](double lr) { return lr * gamma_; });
}

std::optional<std::vector<double>> ExponentialLR::closed_form_lr() const {
  return each(base_lrs_, [&](double base) { return base * std::pow(gamma_, static_cast<double>(last_epoch_)); });
}

// ---- ConstantLR

static Optimizer& check_constant_lr(Optimizer& o, double factor, int64_t total_iters) {
  // 0 is refused too: at total_iters the lr is divided by it (torch raises ZeroDivisionError then).
  KILN_CHECK(factor > 0 && factor <= 1, "ConstantLR", "the factor must be above 0 and at most 1, got ", factor);
  KILN_CHECK(total_iters >= 0, "ConstantLR", "total_iters must not be negative, got ", total_iters);
  return o;
}

ConstantLR::ConstantLR(Optimizer& optimizer, double factor, int64_t total_iters)
    : LRScheduler(check_constant_lr(optimizer, factor, total_iters), "ConstantLR"), factor_(factor),
      total_iters_(total_iters) {
  initial_step();
}

std::vector<double> ConstantLR::get_lr() {
  if (last_epoch_ == 0) return each(group_lrs(), [&](double lr) { return lr * factor_; });
  if (last_epoch_ != total_iters_) return group_lrs();
  return each(group_lrs(), [&](double lr) { return lr * (1.0 / factor_); });
}

std::optional<std::vector<double>> ConstantLR::closed_form_lr() const {
  const double f = factor_ + (last_epoch_ >= total_iters_ ? 1.0 : 0.0) * (1 - factor_);
  return each(base_lrs_, [&](double base) { return base * f; });
}

// ---- PolynomialLR

static Optimizer& check_polynomial_lr(Optimizer& o, int64_t total_iters) {
  KILN_CHECK(total_iters > 0, "PolynomialLR", "total_iters must be positive, got ", total_iters);
  return o;
}

PolynomialLR::PolynomialLR(Optimizer& optimizer, int64_t total_iters, double power)
    : LRScheduler(check_polynomial_lr(optimizer, total_iters), "PolynomialLR"), total_iters_(total_iters),
      power_(power) {
  initial_step();
}

std::vector<double> PolynomialLR::get_lr() {
  if (last_epoch_ == 0 || last_epoch_ > total_iters_) return group_lrs();
  const double t = static_cast<double>(total_iters_), e = static_cast<double>(last_epoch_);
  const double decay = std::pow((1.0 - e / t) / (1.0 - (e - 1) / t), power_);
  return each(group_lrs(), [&](double lr) { return lr * decay; });
}

std::optional<std::vector<double>> PolynomialLR::closed_form_lr() const {
  const double t = static_cast<double>(total_iters_);
  const double f = std::pow(1.0 - static_cast<double>(std::min(total_iters_, last_epoch_)) / t, power_);
  return each(base_lrs_, [&](double base) { return base * f; });
}

}  // namespace kiln::optim
