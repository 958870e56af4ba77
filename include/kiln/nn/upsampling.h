// Upsample (torch::nn::Upsample) and its options.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "kiln/nn/pimpl.h"

namespace kiln::nn {

// size or scale_factor (one value, or one per spatial dim); the other stays empty.
struct UpsampleOptions {
  Shape size = {};
  std::vector<double> scale_factor = {};
  std::string mode = "nearest";
  std::optional<bool> align_corners = std::nullopt;
  std::optional<bool> recompute_scale_factor = std::nullopt;
};

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
