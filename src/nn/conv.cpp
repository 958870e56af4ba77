// Conv2d: construction with PyTorch's default initialisation, forward and printing.
#include "kiln/nn/conv.h"

#include <cmath>

#include "kiln/nn/init.h"
#include "kiln/ops.h"

namespace kiln::nn {

namespace {
// The checks of Conv2d's and ConvTranspose2d's sizes (name: the module's).
void check_sizes(const char* name, int64_t in_channels, int64_t out_channels, const ExpandingArray<2>& kernel_size,
                 int64_t groups) {
  KILN_CHECK(groups > 0, name, "groups must be positive, got ", groups);
  KILN_CHECK(in_channels > 0 && in_channels % groups == 0, name, "in_channels (", in_channels,
             ") must be positive and divisible by groups (", groups, ")");
  KILN_CHECK(out_channels > 0 && out_channels % groups == 0, name, "out_channels (", out_channels,
             ") must be positive and divisible by groups (", groups, ")");
  KILN_CHECK(!kernel_size.empty() && kernel_size[0] > 0 && kernel_size[1] > 0, name,
             "kernel_size must be positive, got ", kernel_size.shape());
}

// kaiming_uniform_(a = sqrt(5)) for the weight, U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for the bias.
void reset_conv(Tensor& weight, Tensor& bias) {
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (bias.defined()) {
    auto [fan_in, fan_out] = init::calculate_fan_in_and_fan_out(weight);
    double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
    init::uniform_(bias, -bound, bound);
  }
}
}  // namespace

Conv2dImpl::Conv2dImpl(int64_t in_channels, int64_t out_channels, ExpandingArray<2> kernel_size,
                       Conv2dOptions options)
    : in_channels(in_channels), out_channels(out_channels), kernel_size(kernel_size), options(options) {
  check_sizes("Conv2d", in_channels, out_channels, kernel_size, options.groups);
  weight = register_parameter(
      "weight", empty({out_channels, in_channels / options.groups, kernel_size[0], kernel_size[1]}));
  if (options.bias) bias = register_parameter("bias", empty({out_channels}));
  reset_parameters();
}

void Conv2dImpl::reset_parameters() { reset_conv(weight, bias); }

Tensor Conv2dImpl::forward(const Tensor& x) {
  return kiln::conv2d(x, weight, bias, options.stride, options.padding, options.dilation, options.groups);
}

namespace {
std::ostream& pair(std::ostream& os, const ExpandingArray<2>& a) { return os << "(" << a[0] << ", " << a[1] << ")"; }

// Like PyTorch (_ConvNd.extra_repr): non-default options only; output_padding is the transposed
// convolution's (0 for Conv2d).
void print_conv(std::ostream& os, const char* name, int64_t in, int64_t out, const ExpandingArray<2>& kernel_size,
                const ExpandingArray<2>& stride, const ExpandingArray<2>& padding, const ExpandingArray<2>& dilation,
                const ExpandingArray<2>& output_padding, int64_t groups, bool bias) {
  os << name << "(" << in << ", " << out << ", kernel_size=";
  pair(os, kernel_size) << ", stride=";
  pair(os, stride);
  if (padding != ExpandingArray<2>(0)) pair(os << ", padding=", padding);
  if (dilation != ExpandingArray<2>(1)) pair(os << ", dilation=", dilation);
  if (output_padding != ExpandingArray<2>(0)) pair(os << ", output_padding=", output_padding);
  if (groups != 1) os << ", groups=" << groups;
  if (!bias) os << ", bias=False";
  os << ")";
}
}  // namespace

void Conv2dImpl::pretty_print(std::ostream& os) const {
  print_conv(os, "Conv2d", in_channels, out_channels, kernel_size, options.stride, options.padding, options.dilation,
             ExpandingArray<2>(0), options.groups, options.bias);
}

ConvTranspose2dImpl::ConvTranspose2dImpl(int64_t in_channels, int64_t out_channels, ExpandingArray<2> kernel_size,
                                         ConvTranspose2dOptions options)
    : in_channels(in_channels), out_channels(out_channels), kernel_size(kernel_size), options(options) {
  check_sizes("ConvTranspose2d", in_channels, out_channels, kernel_size, options.groups);
  for (int i = 0; i < 2; ++i)
    KILN_CHECK(options.output_padding[i] < options.stride[i] || options.output_padding[i] < options.dilation[i],
               "ConvTranspose2d", "output_padding ", options.output_padding.shape(),
               " must be smaller than either stride ", options.stride.shape(), " or dilation ",
               options.dilation.shape());
  weight = register_parameter(
      "weight", empty({in_channels, out_channels / options.groups, kernel_size[0], kernel_size[1]}));
  if (options.bias) bias = register_parameter("bias", empty({out_channels}));
  reset_parameters();
}

void ConvTranspose2dImpl::reset_parameters() { reset_conv(weight, bias); }

Tensor ConvTranspose2dImpl::forward(const Tensor& x) {
  return kiln::conv_transpose2d(x, weight, bias, options.stride, options.padding, options.output_padding,
                                options.groups, options.dilation);
}

void ConvTranspose2dImpl::pretty_print(std::ostream& os) const {
  print_conv(os, "ConvTranspose2d", in_channels, out_channels, kernel_size, options.stride, options.padding,
             options.dilation, options.output_padding, options.groups, options.bias);
}

}  // namespace kiln::nn
