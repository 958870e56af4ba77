// LayerNorm, GroupNorm, InstanceNorm1d and InstanceNorm2d (torch::nn's) and their options.
#pragma once

#include <optional>

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

// Fields in torch.nn.GroupNorm's argument order after num_channels (bias is keyword-only there,
// PyTorch >= 2.10): bias = false (with affine) learns a scale only.
struct GroupNormOptions {
  double eps = 1e-5;
  bool affine = true;
  bool bias = true;
};

// Normalises each of num_groups groups of num_channels / num_groups channels as one (biased
// variance); parameters weight (ones) and bias (zeros) of [num_channels] when affine (bias only
// with options.bias).
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

// Fields in torch.nn.InstanceNorm2d's argument order after num_features (bias is keyword-only
// there, PyTorch >= 2.10).
struct InstanceNormOptions {
  double eps = 1e-5;
  double momentum = 0.1;
  bool affine = false;
  bool track_running_stats = false;
  bool bias = true;
};

// Normalises each instance's channels over their own elements. weight (1) and bias (0) [C] when
// affine (bias only with options.bias); running_mean (0), running_var (1) and num_batches_tracked when tracking running
// statistics, which evaluation then uses. What InstanceNorm1d and 2d share; they differ in rank.
class InstanceNormImplBase : public Module {
 public:
  void reset_running_stats();
  void reset_parameters();
  Tensor forward(const Tensor& x);
  void pretty_print(std::ostream& os) const override;

  int64_t num_features;
  InstanceNormOptions options;
  Tensor weight, bias;
  Tensor running_mean, running_var, num_batches_tracked;

 protected:
  // `name` for errors and printing; batched inputs have rank `rank` (unbatched ones one less).
  InstanceNormImplBase(int64_t num_features, InstanceNormOptions options, const char* name, int64_t rank);

 private:
  const char* name_;
  int64_t rank_;
};

// [N, C, L] or [C, L] (torch::nn::InstanceNorm1d).
class InstanceNorm1dImpl : public InstanceNormImplBase {
 public:
  explicit InstanceNorm1dImpl(int64_t num_features, InstanceNormOptions options = {})
      : InstanceNormImplBase(num_features, options, "InstanceNorm1d", 3) {}
};

// [N, C, H, W] or [C, H, W] (torch::nn::InstanceNorm2d).
class InstanceNorm2dImpl : public InstanceNormImplBase {
 public:
  explicit InstanceNorm2dImpl(int64_t num_features, InstanceNormOptions options = {})
      : InstanceNormImplBase(num_features, options, "InstanceNorm2d", 4) {}
};

class InstanceNorm1d : public ModuleHolder<InstanceNorm1dImpl> {
 public:
  using ModuleHolder<InstanceNorm1dImpl>::ModuleHolder;
  InstanceNorm1d(int64_t num_features, InstanceNormOptions options = {})
      : ModuleHolder(std::make_shared<InstanceNorm1dImpl>(num_features, options)) {}
};

class InstanceNorm2d : public ModuleHolder<InstanceNorm2dImpl> {
 public:
  using ModuleHolder<InstanceNorm2dImpl>::ModuleHolder;
  InstanceNorm2d(int64_t num_features, InstanceNormOptions options = {})
      : ModuleHolder(std::make_shared<InstanceNorm2dImpl>(num_features, options)) {}
};

}  // namespace kiln::nn
