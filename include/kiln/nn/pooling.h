// MaxPool2d, AvgPool2d and AdaptiveAvgPool2d (torch::nn's pooling modules) and their options.
#pragma once

#include "kiln/nn/expanding_array.h"
#include "kiln/nn/pimpl.h"

namespace kiln::nn {

// Fields in torch.nn.MaxPool2d's order after the kernel size; an empty stride means the kernel size.
struct MaxPool2dOptions {
  ExpandingArray<2> stride = {};
  ExpandingArray<2> padding = 0;
  ExpandingArray<2> dilation = 1;
  bool ceil_mode = false;
};

class MaxPool2dImpl : public Module {
 public:
  explicit MaxPool2dImpl(ExpandingArray<2> kernel_size, MaxPool2dOptions options = {});
  Tensor forward(const Tensor& x);
  void pretty_print(std::ostream& os) const override;

  ExpandingArray<2> kernel_size;
  MaxPool2dOptions options;
};

class MaxPool2d : public ModuleHolder<MaxPool2dImpl> {
 public:
  using ModuleHolder<MaxPool2dImpl>::ModuleHolder;
  MaxPool2d(ExpandingArray<2> kernel_size, MaxPool2dOptions options = {})
      : ModuleHolder(std::make_shared<MaxPool2dImpl>(kernel_size, options)) {}
};

// Fields in torch.nn.AvgPool2d's order after the kernel size.
struct AvgPool2dOptions {
  ExpandingArray<2> stride = {};
  ExpandingArray<2> padding = 0;
  bool ceil_mode = false;
  bool count_include_pad = true;
};

class AvgPool2dImpl : public Module {
 public:
  explicit AvgPool2dImpl(ExpandingArray<2> kernel_size, AvgPool2dOptions options = {});
  Tensor forward(const Tensor& x);
  void pretty_print(std::ostream& os) const override;

  ExpandingArray<2> kernel_size;
  AvgPool2dOptions options;
};

class AvgPool2d : public ModuleHolder<AvgPool2dImpl> {
 public:
  using ModuleHolder<AvgPool2dImpl>::ModuleHolder;
  AvgPool2d(ExpandingArray<2> kernel_size, AvgPool2dOptions options = {})
      : ModuleHolder(std::make_shared<AvgPool2dImpl>(kernel_size, options)) {}
};

class AdaptiveAvgPool2dImpl : public Module {
 public:
  explicit AdaptiveAvgPool2dImpl(ExpandingArray<2> output_size) : output_size(output_size) {}
  Tensor forward(const Tensor& x);
  void pretty_print(std::ostream& os) const override;

  ExpandingArray<2> output_size;
};

class AdaptiveAvgPool2d : public ModuleHolder<AdaptiveAvgPool2dImpl> {
 public:
  using ModuleHolder<AdaptiveAvgPool2dImpl>::ModuleHolder;
  AdaptiveAvgPool2d(ExpandingArray<2> output_size)
      : ModuleHolder(std::make_shared<AdaptiveAvgPool2dImpl>(output_size)) {}
};

}  // namespace kiln::nn
