// --amp: see mixed_precision.h.
#include "kiln/train/mixed_precision.h"

#include "kiln/train/checkpoint.h"

namespace kiln::train {

MixedPrecision::MixedPrecision(const std::string& mode, const char* where) : mode_(mode.empty() ? "off" : mode) {
  KILN_CHECK(mode_ == "off" || mode_ == "bf16" || mode_ == "fp16", where, "--amp expects bf16, fp16 or off, got '",
             mode, "'");
  if (mode_ == "bf16") dtype_ = kBFloat16;
  if (mode_ == "fp16") {
    dtype_ = kFloat16;
    scaler_ = std::make_unique<amp::GradScaler>();
  }
}

Tensor MixedPrecision::forward(const std::function<Tensor()>& forward) const {
  Tensor loss;
  autocast([&] { loss = forward(); });
  return loss;
}

void MixedPrecision::autocast(const std::function<void()>& fn) const {
  if (!dtype_) return fn();
  AutocastGuard guard(*dtype_);
  fn();
}

bool MixedPrecision::backward_and_step(const Tensor& loss, optim::Optimizer& optimizer,
                                       const std::function<void()>& before_step) {
  if (!scaler_) {
    loss.backward();
    if (before_step) before_step();
    optimizer.step();
    return true;
  }
  scaler_->scale(loss).backward();
  if (before_step) {
    scaler_->unscale_(optimizer);  // clipping sees the true gradients
    before_step();
  }
  const bool stepped = scaler_->step(optimizer);
  scaler_->update();
  return stepped;
}

std::map<std::string, Tensor> MixedPrecision::state_dict() const {
  return scaler_ ? prefixed(scaler_->state_dict(), "scaler.") : std::map<std::string, Tensor>{};
}

void MixedPrecision::load_state_dict(const std::map<std::string, Tensor>& checkpoint_tensors) {
  if (scaler_) scaler_->load_state_dict(with_prefix(checkpoint_tensors, "scaler."));
}

}  // namespace kiln::train
