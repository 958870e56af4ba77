// kiln::nn::init: PyTorch's initialisers, drawn from Kiln's Philox generator.
#include "kiln/nn/init.h"

#include <cmath>

#include "kiln/autograd.h"

namespace kiln::nn::init {
namespace {
void check_defined(const Tensor& t, const char* where) {
  KILN_CHECK(t.defined(), where, "the tensor is undefined");
  KILN_CHECK(t.is_floating_point(), where, "expected a floating-point tensor, got ", t.dtype());
}

double fan(const Tensor& t, FanMode mode, const char* where) {
  KILN_CHECK(t.defined(), where, "the tensor is undefined");
  auto [fan_in, fan_out] = calculate_fan_in_and_fan_out(t);
  return static_cast<double>(mode == FanMode::FanIn ? fan_in : fan_out);
}
}  // namespace

double calculate_gain(Nonlinearity nonlinearity, std::optional<double> param) {
  switch (nonlinearity) {
    case Nonlinearity::Linear:
    case Nonlinearity::Conv2d:
    case Nonlinearity::Sigmoid: return 1.0;
    case Nonlinearity::Tanh: return 5.0 / 3.0;
    case Nonlinearity::ReLU: return std::sqrt(2.0);
    case Nonlinearity::LeakyReLU: {
      const double slope = param.value_or(0.01);
      return std::sqrt(2.0 / (1.0 + slope * slope));
    }
    case Nonlinearity::SELU: return 0.75;
  }
  return 1.0;
}

std::pair<int64_t, int64_t> calculate_fan_in_and_fan_out(const Tensor& tensor) {
  KILN_CHECK(tensor.defined(), "calculate_fan_in_and_fan_out", "the tensor is undefined");
  KILN_CHECK(tensor.dim() >= 2, "calculate_fan_in_and_fan_out",
             "fan in and fan out need a tensor with at least 2 dims, got shape ", tensor.shape());
  int64_t receptive = 1;
  for (int64_t d = 2; d < tensor.dim(); ++d) receptive *= tensor.size(d);
  return {tensor.size(1) * receptive, tensor.size(0) * receptive};
}

Tensor uniform_(Tensor tensor, double low, double high) {
  check_defined(tensor, "init::uniform_");
  NoGradGuard no_grad;
  tensor.uniform_(low, high);
  return tensor;
}

Tensor normal_(Tensor tensor, double mean, double std) {
  check_defined(tensor, "init::normal_");
  NoGradGuard no_grad;
  tensor.normal_(mean, std);
  return tensor;
}

Tensor constant_(Tensor tensor, Scalar value) {
  KILN_CHECK(tensor.defined(), "init::constant_", "the tensor is undefined");
  NoGradGuard no_grad;
  tensor.fill_(value);
  return tensor;
}

Tensor zeros_(Tensor tensor) { return constant_(std::move(tensor), 0); }
Tensor ones_(Tensor tensor) { return constant_(std::move(tensor), 1); }

Tensor kaiming_uniform_(Tensor tensor, double a, FanMode mode, Nonlinearity nonlinearity) {
  check_defined(tensor, "init::kaiming_uniform_");
  if (tensor.numel() == 0) return tensor;  // a no-op, as in PyTorch
  double std = calculate_gain(nonlinearity, a) / std::sqrt(fan(tensor, mode, "init::kaiming_uniform_"));
  double bound = std::sqrt(3.0) * std;
  return uniform_(std::move(tensor), -bound, bound);
}

Tensor kaiming_normal_(Tensor tensor, double a, FanMode mode, Nonlinearity nonlinearity) {
  check_defined(tensor, "init::kaiming_normal_");
  if (tensor.numel() == 0) return tensor;  // a no-op, as in PyTorch
  double std = calculate_gain(nonlinearity, a) / std::sqrt(fan(tensor, mode, "init::kaiming_normal_"));
  return normal_(std::move(tensor), 0.0, std);
}

Tensor xavier_uniform_(Tensor tensor, double gain) {
  check_defined(tensor, "init::xavier_uniform_");
  if (tensor.numel() == 0) return tensor;  // a no-op, as in PyTorch
  fan(tensor, FanMode::FanIn, "init::xavier_uniform_");
  auto [fan_in, fan_out] = calculate_fan_in_and_fan_out(tensor);
  double bound = gain * std::sqrt(6.0 / static_cast<double>(fan_in + fan_out));
  return uniform_(std::move(tensor), -bound, bound);
}

Tensor xavier_normal_(Tensor tensor, double gain) {
  check_defined(tensor, "init::xavier_normal_");
  if (tensor.numel() == 0) return tensor;  // a no-op, as in PyTorch
  fan(tensor, FanMode::FanIn, "init::xavier_normal_");
  auto [fan_in, fan_out] = calculate_fan_in_and_fan_out(tensor);
  return normal_(std::move(tensor), 0.0, gain * std::sqrt(2.0 / static_cast<double>(fan_in + fan_out)));
}

}  // namespace kiln::nn::init
