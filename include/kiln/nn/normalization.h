// LayerNorm and GroupNorm (torch::nn::LayerNorm, torch::nn::GroupNorm) and their options.
#pragma once

#include "kiln/nn/pimpl.h"

namespace kiln::nn {

// Fields in torch.nn.LayerNorm's argument order after normalized_shape (bias is PyTorch >= 2.1).
struct LayerNormOptions {
  double eps = 1e-5;
  bool elementwise_affine = true;
  bool bias = true;
};

// Normalises over the last normalized_shape.size() dims (biased variance). Parameters weight
// (ones) and bias (zeros), each normalized_shape, when elementwise_affine (bias only with options.bias).
class LayerNormImpl : public Module {
 public:
  LayerNormImpl(Shape normalized_shape, LayerNormOptions options = {});
  void reset_parameters();
  Tensor forward(const Tensor& x);
  void pretty_print(std::ostream& os) const override;

  Shape normalized_shape;
  LayerNormOptions options;
  Tensor weight, bias;
};

class LayerNorm : public ModuleHolder<LayerNormImpl> {
 public:
  using ModuleHolder<LayerNormImpl>::ModuleHolder;
  LayerNorm(Shape normalized_shape, LayerNormOptions options = {})
      : ModuleHolder(std::make_shared<LayerNormImpl>(std::move(normalized_shape), options)) {}
  // LayerNorm(768) for the common one-dim case (PyTorch accepts an int too).
  LayerNorm(int64_t normalized_shape, LayerNormOptions options = {})
      : ModuleHolder(std::make_shared<LayerNormImpl>(Shape{normalized_shape}, options)) {}
};

// Fields in torch.nn.GroupNorm's argument order after num_channels.
struct GroupNormOptions {
  double eps = 1e-5;
  bool affine = true;
};

// Normalises each of num_groups groups of num_channels / num_groups channels as one (biased
// variance); parameters weight (ones) and bias (zeros) of [num_channels] when affine.
class GroupNormImpl : public Module {
 public:
  GroupNormImpl(int64_t num_groups, int64_t num_channels, GroupNormOptions options = {});
  void reset_parameters();
  Tensor forward(const Tensor& x);
  void pretty_print(std::ostream& os) const override;

  int64_t num_groups, num_channels;
  GroupNormOptions options;
  Tensor weight, bias;
};

class GroupNorm : public ModuleHolder<GroupNormImpl> {
 public:
  using ModuleHolder<GroupNormImpl>::ModuleHolder;
  GroupNorm(int64_t num_groups, int64_t num_channels, GroupNormOptions options = {})
      : ModuleHolder(std::make_shared<GroupNormImpl>(num_groups, num_channels, options)) {}
};

}  // namespace kiln::nn
