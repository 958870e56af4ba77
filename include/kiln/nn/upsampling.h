// Upsample (torch::nn::Upsample) and its options.
#pragma once

#include "kiln/nn/functional.h"
#include "kiln/nn/pimpl.h"

namespace kiln::nn {

// interpolate's options: size or scale_factor (one value, or one per spatial dim), the mode,
// align_corners and recompute_scale_factor.
using UpsampleOptions = functional::InterpolateFuncOptions;

// interpolate with the options; no parameters.
class UpsampleImpl : public Module {
 public:
  explicit UpsampleImpl(UpsampleOptions options = {});
  Tensor forward(const Tensor& x);
  void pretty_print(std::ostream& os) const override;

  UpsampleOptions options;
};

class Upsample : public ModuleHolder<UpsampleImpl> {
 public:
  using ModuleHolder<UpsampleImpl>::ModuleHolder;
  explicit Upsample(UpsampleOptions options = {}) : ModuleHolder(std::make_shared<UpsampleImpl>(std::move(options))) {}
};

}  // namespace kiln::nn
