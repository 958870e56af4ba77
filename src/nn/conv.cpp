// Conv2d: construction with PyTorch's default initialisation, forward and printing.
#include "kiln/nn/conv.h"

#include <cmath>

#include "kiln/nn/init.h"
#include "kiln/ops.h"

namespace kiln::nn {

Conv2dImpl::Conv2dImpl(int64_t in_channels, int64_t out_channels, ExpandingArray<2> kernel_size,
                       Conv2dOptions options)
    : in_channels(in_channels), out_channels(out_channels), kernel_size(kernel_size), options(options) {
  KILN_CHECK(options.groups > 0, "Conv2d", "groups must be positive, got ", options.groups);
  KILN_CHECK(in_channels > 0 && in_channels % options.groups == 0, "Conv2d", "in_channels (", in_channels,
             ") must be positive and divisible by groups (", options.groups, ")");
  KILN_CHECK(out_channels > 0 && out_channels % options.groups == 0, "Conv2d", "out_channels (", out_channels,
             ") must be positive and divisible by groups (", options.groups, ")");
  KILN_CHECK(!kernel_size.empty() && kernel_size[0] > 0 && kernel_size[1] > 0, "Conv2d",
             "kernel_size must be positive, got ", kernel_size.shape());
  weight = register_parameter(
      "weight", empty({out_channels, in_channels / options.groups, kernel_size[0], kernel_size[1]}));
  if (options.bias) bias = register_parameter("bias", empty({out_channels}));
  reset_parameters();
}

void Conv2dImpl::reset_parameters() {
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (bias.defined()) {
    auto [fan_in, fan_out] = init::calculate_fan_in_and_fan_out(weight);
    double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
    init::uniform_(bias, -bound, bound);
  }
}

Tensor Conv2dImpl::forward(const Tensor& x) {
  return kiln::conv2d(x, weight, bias, options.stride, options.padding, options.dilation, options.groups);
}

namespace {
std::ostream& pair(std::ostream& os, const ExpandingArray<2>& a) { return os << "(" << a[0] << ", " << a[1] << ")"; }
}  // namespace

// Like PyTorch: non-default options only.
void Conv2dImpl::pretty_print(std::ostream& os) const {
  os << "Conv2d(" << in_channels << ", " << out_channels << ", kernel_size=";
  pair(os, kernel_size) << ", stride=";
  pair(os, options.stride);
  if (options.padding != ExpandingArray<2>(0)) pair(os << ", padding=", options.padding);
  if (options.dilation != ExpandingArray<2>(1)) pair(os << ", dilation=", options.dilation);
  if (options.groups != 1) os << ", groups=" << options.groups;
  if (!options.bias) os << ", bias=False";
  os << ")";
}

}  // namespace kiln::nn
