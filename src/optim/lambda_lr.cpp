// LambdaLR, and the warm-up schedules of Hugging Face transformers built on it (same arithmetic,
// so the lrs agree with get_linear/cosine_schedule_with_warmup to the last bit or close to it).
#include <algorithm>
#include <cmath>
#include <numbers>

#include "kiln/optim/lr_scheduler.h"

namespace kiln::optim {
namespace {

std::vector<LambdaLR::LrLambda> one_per_group(Optimizer& o, LambdaLR::LrLambda f) {
  KILN_CHECK(static_cast<bool>(f), "LambdaLR", "got an empty lr_lambda");
  return std::vector<LambdaLR::LrLambda>(o.param_groups().size(), std::move(f));
}

Optimizer& check_lambdas(Optimizer& o, const std::vector<LambdaLR::LrLambda>& fs) {
  KILN_CHECK(fs.size() == o.param_groups().size(), "LambdaLR", "expected ", o.param_groups().size(),
             " lr_lambdas (one per param group), got ", fs.size());
  for (size_t i = 0; i < fs.size(); ++i) KILN_CHECK(static_cast<bool>(fs[i]), "LambdaLR", "lr_lambda ", i, " is empty");
  return o;
}

void check_warmup(const char* where, int64_t warmup, int64_t total) {
  KILN_CHECK(warmup >= 0, where, "num_warmup_steps must be non-negative, got ", warmup);
  KILN_CHECK(total >= 0, where, "num_training_steps must be non-negative, got ", total);
}

double warmup_factor(int64_t step, int64_t warmup) {
  return static_cast<double>(step) / static_cast<double>(std::max<int64_t>(1, warmup));
}

}  // namespace

LambdaLR::LambdaLR(Optimizer& optimizer, LrLambda lr_lambda)
    : LambdaLR(optimizer, one_per_group(optimizer, std::move(lr_lambda))) {}

LambdaLR::LambdaLR(Optimizer& optimizer, std::vector<LrLambda> lr_lambdas)
    : LRScheduler(check_lambdas(optimizer, lr_lambdas), "LambdaLR"), lr_lambdas_(std::move(lr_lambdas)) {
  initial_step();
}

std::vector<double> LambdaLR::get_lr() {
  std::vector<double> lrs;
  for (size_t i = 0; i < base_lrs_.size(); ++i) lrs.push_back(base_lrs_[i] * lr_lambdas_.at(i)(last_epoch_));
  return lrs;
}

std::unique_ptr<LambdaLR> linear_schedule_with_warmup(Optimizer& optimizer, int64_t num_warmup_steps,
                                                      int64_t num_training_steps) {
  check_warmup("linear_schedule_with_warmup", num_warmup_steps, num_training_steps);
  return std::make_unique<LambdaLR>(optimizer, [=](int64_t step) {
    if (step < num_warmup_steps) return warmup_factor(step, num_warmup_steps);
    return std::max(0.0, static_cast<double>(num_training_steps - step) /
                             static_cast<double>(std::max<int64_t>(1, num_training_steps - num_warmup_steps)));
  });
}

std::unique_ptr<LambdaLR> cosine_schedule_with_warmup(Optimizer& optimizer, int64_t num_warmup_steps,
                                                      int64_t num_training_steps, double num_cycles) {
  check_warmup("cosine_schedule_with_warmup", num_warmup_steps, num_training_steps);
  KILN_CHECK(std::isfinite(num_cycles), "cosine_schedule_with_warmup", "num_cycles must be finite, got ", num_cycles);
  return std::make_unique<LambdaLR>(optimizer, [=](int64_t step) {
    if (step < num_warmup_steps) return warmup_factor(step, num_warmup_steps);
    const double progress = static_cast<double>(step - num_warmup_steps) /
                            static_cast<double>(std::max<int64_t>(1, num_training_steps - num_warmup_steps));
    return std::max(0.0, 0.5 * (1.0 + std::cos(std::numbers::pi * num_cycles * 2.0 * progress)));
  });
}

}  // namespace kiln::optim
