// kiln::amp::GradScaler: loss scaling for float16 training, with torch.amp.GradScaler's semantics.
//
//   kiln::amp::GradScaler scaler;
//   { kiln::AutocastGuard ac(kiln::kFloat16); loss = loss_fn(model(x), y); }
//   scaler.scale(loss).backward();
//   scaler.unscale_(opt);                       // optional: before clipping the true gradients
//   kiln::nn::utils::clip_grad_norm_(model->parameters(), 1.0);
//   scaler.step(opt);                           // skipped when a gradient is inf or NaN
//   scaler.update();                            // backoff after a skip, growth after good steps
//
// The scale starts at init_scale; update() multiplies it by backoff_factor after a step with an
// inf or NaN gradient, and by growth_factor after growth_interval steps without one in a row.
// With enabled = false every call is a pass-through (scale() returns the loss, step() steps).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "kiln/optim/optimizer.h"
#include "kiln/tensor.h"

namespace kiln::amp {

struct GradScalerOptions {
  double init_scale = 65536.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
  bool enabled = true;
};

class GradScaler {
 public:
  explicit GradScaler(GradScalerOptions options = {});

  // loss * scale (differentiable, on the loss's device).
  Tensor scale(const Tensor& loss) const;
  // Divides the optimizer's gradients by the scale in place and notes whether any is inf or NaN
  // (one check for all of them). At most once per optimizer between update()s, before step().
  // float16 gradients are an error (master weights are expected in float32), as in PyTorch.
  void unscale_(optim::Optimizer& optimizer);
  // Unscales if unscale_ was not called, then steps the optimizer unless a gradient was inf or
  // NaN. Returns whether it stepped. At most once per optimizer between update()s.
  bool step(optim::Optimizer& optimizer);
  // The next scale (backoff or growth, as above), or `new_scale` when given. Needs a step() or
  // unscale_() since the last update().
  void update(std::optional<double> new_scale = std::nullopt);

  double get_scale() const { return enabled_ ? scale_ : 1.0; }
  bool is_enabled() const { return enabled_; }
  int64_t growth_tracker() const { return growth_tracker_; }  // good steps in a row
  int64_t skipped_steps() const { return skipped_; }          // steps skipped since construction
  const GradScalerOptions& options() const { return options_; }

  // "scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker" as 0-d
  // float64 / int64 CPU tensors (torch's keys), for checkpoints.
  std::map<std::string, Tensor> state_dict() const;
  // Restores state_dict(); a missing key or a non-positive scale is an error naming it. A
  // disabled scaler ignores it (torch's no-op).
  void load_state_dict(const std::map<std::string, Tensor>& state);

 private:
  enum class Stage { Ready, Unscaled, Stepped };
  struct PerOptimizer {
    Stage stage = Stage::Ready;
    bool found_inf = false;
    bool checked = false;  // unscale_ saw a gradient (torch: "inf checks were recorded")
  };
  PerOptimizer& entry(const optim::Optimizer& optimizer);

  GradScalerOptions options_;
  bool enabled_;
  double scale_;
  int64_t growth_tracker_ = 0;
  int64_t skipped_ = 0;
  std::map<const optim::Optimizer*, PerOptimizer> per_optimizer_;
};

}  // namespace kiln::amp
