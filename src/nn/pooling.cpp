// MaxPool2d, AvgPool2d, AdaptiveAvgPool2d: forward and printing.
#include "kiln/nn/pooling.h"

#include "kiln/ops.h"

namespace kiln::nn {
namespace {
// PyTorch prints an int when both values agree ("kernel_size=2") and a tuple otherwise.
std::ostream& print(std::ostream& os, const ExpandingArray<2>& a) {
  if (a[0] == a[1]) return os << a[0];
  return os << "(" << a[0] << ", " << a[1] << ")";
}
const ExpandingArray<2>& stride_or_kernel(const ExpandingArray<2>& stride, const ExpandingArray<2>& kernel) {
  return stride.empty() ? kernel : stride;
}
}  // namespace

MaxPool2dImpl::MaxPool2dImpl(ExpandingArray<2> kernel_size, MaxPool2dOptions options)
    : kernel_size(kernel_size), options(options) {
  KILN_CHECK(!kernel_size.empty(), "MaxPool2d", "kernel_size must be given");
}

Tensor MaxPool2dImpl::forward(const Tensor& x) {
  return kiln::max_pool2d(x, kernel_size, options.stride, options.padding, options.dilation, options.ceil_mode);
}

void MaxPool2dImpl::pretty_print(std::ostream& os) const {
  print(os << "MaxPool2d(kernel_size=", kernel_size) << ", stride=";
  print(os, stride_or_kernel(options.stride, kernel_size)) << ", padding=";
  print(os, options.padding) << ", dilation=";
  print(os, options.dilation) << ", ceil_mode=" << (options.ceil_mode ? "True" : "False") << ")";
}

AvgPool2dImpl::AvgPool2dImpl(ExpandingArray<2> kernel_size, AvgPool2dOptions options)
    : kernel_size(kernel_size), options(options) {
  KILN_CHECK(!kernel_size.empty(), "AvgPool2d", "kernel_size must be given");
}

Tensor AvgPool2dImpl::forward(const Tensor& x) {
  return kiln::avg_pool2d(x, kernel_size, options.stride, options.padding, options.ceil_mode,
                          options.count_include_pad);
}

void AvgPool2dImpl::pretty_print(std::ostream& os) const {
  print(os << "AvgPool2d(kernel_size=", kernel_size) << ", stride=";
  print(os, stride_or_kernel(options.stride, kernel_size)) << ", padding=";
  print(os, options.padding) << ")";
}

Tensor AdaptiveAvgPool2dImpl::forward(const Tensor& x) { return kiln::adaptive_avg_pool2d(x, output_size); }

void AdaptiveAvgPool2dImpl::pretty_print(std::ostream& os) const {
  os << "AdaptiveAvgPool2d(output_size=(" << output_size[0] << ", " << output_size[1] << "))";
}

}  // namespace kiln::nn
