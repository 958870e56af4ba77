// Conv2d and ConvTranspose2d (torch::nn::Conv2d, torch::nn::ConvTranspose2d) and their options.
#pragma once

#include "kiln/nn/expanding_array.h"
#include "kiln/nn/pimpl.h"

namespace kiln::nn {

// Fields in torch.nn.Conv2d's argument order after the kernel size.
struct Conv2dOptions {
  ExpandingArray<2> stride = 1;
  ExpandingArray<2> padding = 0;
  ExpandingArray<2> dilation = 1;
  int64_t groups = 1;
  bool bias = true;
};

// weight [out, in / groups, kH, kW]; weight and bias start U(-1/sqrt(fan_in), 1/sqrt(fan_in)),
// fan_in = in / groups * kH * kW (PyTorch's kaiming_uniform_(a = sqrt(5))).
class Conv2dImpl : public Module {
 public:
  Conv2dImpl(int64_t in_channels, int64_t out_channels, ExpandingArray<2> kernel_size, Conv2dOptions options = {});
  void reset_parameters();
  Tensor forward(const Tensor& x);
  void pretty_print(std::ostream& os) const override;

  int64_t in_channels, out_channels;
  ExpandingArray<2> kernel_size;
  Conv2dOptions options;
  Tensor weight, bias;
};

class Conv2d : public ModuleHolder<Conv2dImpl> {
 public:
  using ModuleHolder<Conv2dImpl>::ModuleHolder;
  Conv2d(int64_t in_channels, int64_t out_channels, ExpandingArray<2> kernel_size, Conv2dOptions options = {})
      : ModuleHolder(std::make_shared<Conv2dImpl>(in_channels, out_channels, kernel_size, options)) {}
};

// Fields in torch.nn.ConvTranspose2d's argument order after the kernel size.
struct ConvTranspose2dOptions {
  ExpandingArray<2> stride = 1;
  ExpandingArray<2> padding = 0;
  ExpandingArray<2> output_padding = 0;
  int64_t groups = 1;
  bool bias = true;
  ExpandingArray<2> dilation = 1;
};

// weight [in, out / groups, kH, kW]; weight and bias start U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with
// fan_in = out / groups * kH * kW (PyTorch's: fan_in is computed from dim 1 of the weight).
class ConvTranspose2dImpl : public Module {
 public:
  ConvTranspose2dImpl(int64_t in_channels, int64_t out_channels, ExpandingArray<2> kernel_size,
                      ConvTranspose2dOptions options = {});
  void reset_parameters();
  Tensor forward(const Tensor& x);
  void pretty_print(std::ostream& os) const override;

  int64_t in_channels, out_channels;
  ExpandingArray<2> kernel_size;
  ConvTranspose2dOptions options;
  Tensor weight, bias;
};

class ConvTranspose2d : public ModuleHolder<ConvTranspose2dImpl> {
 public:
  using ModuleHolder<ConvTranspose2dImpl>::ModuleHolder;
  ConvTranspose2d(int64_t in_channels, int64_t out_channels, ExpandingArray<2> kernel_size,
                  ConvTranspose2dOptions options = {})
      : ModuleHolder(std::make_shared<ConvTranspose2dImpl>(in_channels, out_channels, kernel_size, options)) {}
};

}  // namespace kiln::nn
