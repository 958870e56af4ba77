// --amp for every task: autocast around the forward pass (bf16 or fp16) and evaluation, and for
// fp16 a GradScaler around backward and the optimizer step, whose state goes into checkpoints.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "kiln/amp.h"
#include "kiln/autocast.h"
#include "kiln/optim/optimizer.h"

namespace kiln::train {

class MixedPrecision {
 public:
  // mode: "" or "off" (float32), "bf16", "fp16"; anything else is an error naming `where`.
  MixedPrecision(const std::string& mode, const char* where);
  const std::string& mode() const { return mode_; }  // "off", "bf16" or "fp16"

  // The loss of `forward`, run under autocast when on.
  Tensor forward(const std::function<Tensor()>& forward) const;
  // `fn` under autocast when on: evaluation runs as the model trained (as Hugging Face's
  // Trainer evaluates), and the device probe dispatches the ops the job will.
  void autocast(const std::function<void()>& fn) const;
  // loss.backward(), then `before_step` (gradient clipping: it sees unscaled gradients), then
  // the optimizer's step (skipped by the scaler after an inf/NaN gradient in fp16). Returns
  // whether the optimizer stepped.
  bool backward_and_step(const Tensor& loss, optim::Optimizer& optimizer, const std::function<void()>& before_step = {});
  // "scaler.*" entries for a checkpoint (none unless fp16), and their restore.
  std::map<std::string, Tensor> state_dict() const;
  void load_state_dict(const std::map<std::string, Tensor>& checkpoint_tensors);

 private:
  std::string mode_;
  std::optional<ScalarType> dtype_;
  std::unique_ptr<amp::GradScaler> scaler_;
};

}  // namespace kiln::train
