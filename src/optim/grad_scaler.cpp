// kiln::amp::GradScaler (see include/kiln/amp.h): torch.amp.GradScaler's state machine per
// optimizer, its scale update, and one host round trip per unscale (the inf/NaN check); the
// unscale itself is one multi-tensor kernel per device and dtype (optim/fused_step.h).
#include "kiln/amp.h"

#include <cmath>
#include <limits>

#include "kiln/autograd.h"
#include "kiln/ops.h"
#include "optim/fused_step.h"

namespace kiln::amp {

GradScaler::GradScaler(GradScalerOptions options)
    // A float32 value, as torch keeps its scale (torch.full((), init_scale, dtype=float32)).
    : options_(options), enabled_(options.enabled), scale_(static_cast<float>(options.init_scale)) {
  const char* where = "GradScaler";
  KILN_CHECK(std::isfinite(options.init_scale) && options.init_scale > 0, where,
             "init_scale must be positive and finite, got ", options.init_scale);
  KILN_CHECK(std::isfinite(options.growth_factor) && options.growth_factor > 1.0, where,
             "growth_factor must be above 1, got ", options.growth_factor);
  KILN_CHECK(std::isfinite(options.backoff_factor) && options.backoff_factor > 0 && options.backoff_factor < 1.0, where,
             "backoff_factor must be in (0, 1), got ", options.backoff_factor);
  KILN_CHECK(options.growth_interval >= 1, where, "growth_interval must be at least 1, got ", options.growth_interval);
}

Tensor GradScaler::scale(const Tensor& loss) const {
  KILN_CHECK(loss.defined(), "GradScaler::scale", "the loss is an undefined tensor");
  if (!enabled_) return loss;
  // In float32 as PyTorch keeps its scale (a float16 loss would overflow at the default scale); a
  // float64 loss stays float64, as torch promotes it.
  return (loss.dtype() == kFloat64 ? loss : loss.to(kFloat32)) * scale_;
}

GradScaler::PerOptimizer& GradScaler::entry(const optim::Optimizer& optimizer) { return per_optimizer_[&optimizer]; }

void GradScaler::unscale_(optim::Optimizer& optimizer) {
  if (!enabled_) return;
  const char* where = "GradScaler::unscale_";
  PerOptimizer& e = entry(optimizer);
  KILN_CHECK(e.stage != Stage::Unscaled, where, "unscale_() has already been called on this optimizer since the last update()");
  KILN_CHECK(e.stage != Stage::Stepped, where, "unscale_() is being called after step()");
  NoGradGuard no_grad;
  std::vector<Tensor> grads;
  for (const optim::OptimizerParamGroup& group : optimizer.param_groups()) {
    for (const Tensor& p : group.params()) {
      Tensor g = p.grad();
      if (!g.defined()) continue;
      KILN_CHECK(g.dtype() != kFloat16, where, "attempting to unscale float16 gradients (keep the parameters in float32 "
                                               "and let autocast lower the ops)");
      grads.push_back(g);
    }
  }
  // The reciprocal in double, rounded to float32 as PyTorch's inv_scale.
  const double inv = static_cast<double>(static_cast<float>(1.0 / scale_));
  e.found_inf = optim::detail::unscale_grads(grads, inv, where);
  e.checked = !grads.empty();
  e.stage = Stage::Unscaled;
}

bool GradScaler::step(optim::Optimizer& optimizer) {
  if (!enabled_) {
    optimizer.step();
    return true;
  }
  PerOptimizer& e = entry(optimizer);
  KILN_CHECK(e.stage != Stage::Stepped, "GradScaler::step", "step() has already been called since the last update()");
  if (e.stage == Stage::Ready) unscale_(optimizer);
  // As torch's: a step with no gradient to check proves nothing about the scale (update() would
  // count it toward growth).
  KILN_CHECK(e.checked, "GradScaler::step",
             "no inf checks were recorded for this optimizer: none of its parameters has a gradient (call "
             "backward() on scale(loss) first)");
  e.stage = Stage::Stepped;
  if (e.found_inf) {
    ++skipped_;
    return false;
  }
  optimizer.step();
  return true;
}

void GradScaler::update(std::optional<double> new_scale) {
  if (!enabled_) return;
  if (new_scale) {
    KILN_CHECK(std::isfinite(*new_scale) && *new_scale > 0, "GradScaler::update", "new_scale must be positive and finite, got ",
               *new_scale);
    scale_ = static_cast<float>(*new_scale);  // torch fills its float32 scale
  } else {
    bool any = false, found_inf = false;
    for (const auto& [opt, e] : per_optimizer_) {
      if (e.stage == Stage::Ready || !e.checked) continue;  // no gradient was checked for inf/NaN
      any = true;
      found_inf = found_inf || e.found_inf;
    }
    KILN_CHECK(any, "GradScaler::update", "no inf checks were recorded prior to update() (call step() or unscale_() first)");
    // As torch's _amp_update_scale_: the product rounded to float32, where the scale is kept; a
    // scale that would pass float32's range stays.
    if (found_inf) {
      scale_ = static_cast<float>(scale_ * options_.backoff_factor);
      growth_tracker_ = 0;
    } else if (++growth_tracker_ == options_.growth_interval) {
      const double grown = scale_ * options_.growth_factor;
      if (grown <= std::numeric_limits<float>::max()) scale_ = static_cast<float>(grown);
      growth_tracker_ = 0;
    }
  }
  per_optimizer_.clear();
}

std::map<std::string, Tensor> GradScaler::state_dict() const {
  if (!enabled_) return {};
  return {{"scale", full({}, scale_, kFloat64)},
          {"growth_factor", full({}, options_.growth_factor, kFloat64)},
          {"backoff_factor", full({}, options_.backoff_factor, kFloat64)},
          {"growth_interval", full({}, options_.growth_interval, kInt64)},
          {"_growth_tracker", full({}, growth_tracker_, kInt64)}};
}

void GradScaler::load_state_dict(const std::map<std::string, Tensor>& state) {
  const char* where = "GradScaler::load_state_dict";
  if (!enabled_) return;  // as torch's: a disabled scaler (a run resumed without AMP) ignores it
  auto get = [&](const char* key) {
    auto it = state.find(key);
    KILN_CHECK(it != state.end() && it->second.defined() && it->second.numel() == 1, where, "missing '", key, "'");
    return it->second.item<double>();
  };
  const double scale = get("scale"), growth = get("growth_factor"), backoff = get("backoff_factor");
  const double interval = get("growth_interval"), tracker = get("_growth_tracker");
  KILN_CHECK(std::isfinite(scale) && scale > 0, where, "scale must be positive and finite, got ", scale);
  KILN_CHECK(growth > 1 && backoff > 0 && backoff < 1 && interval >= 1 && tracker >= 0 && tracker < interval, where,
             "inconsistent factors: growth ", growth, ", backoff ", backoff, ", interval ", interval, ", tracker ", tracker);
  scale_ = static_cast<float>(scale);
  options_.growth_factor = growth;
  options_.backoff_factor = backoff;
  options_.growth_interval = static_cast<int64_t>(interval);
  growth_tracker_ = static_cast<int64_t>(tracker);
  per_optimizer_.clear();
}

}  // namespace kiln::amp
