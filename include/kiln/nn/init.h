// kiln::nn::init (torch.nn.init): in-place initialisers with PyTorch's fan and gain rules.
#pragma once

#include <optional>

#include "kiln/tensor.h"

namespace kiln::nn::init {

enum class FanMode { FanIn, FanOut };
enum class Nonlinearity { Linear, Conv2d, Sigmoid, Tanh, ReLU, LeakyReLU, SELU };

// PyTorch's calculate_gain: 1 for linear/conv/sigmoid, 5/3 for tanh, sqrt(2) for relu,
// sqrt(2 / (1 + param^2)) for leaky_relu (param = negative slope, 0.01 when not given), 3/4 for selu.
double calculate_gain(Nonlinearity nonlinearity, std::optional<double> param = std::nullopt);
// fan_in = size(1) * receptive field, fan_out = size(0) * receptive field; needs dim >= 2.
std::pair<int64_t, int64_t> calculate_fan_in_and_fan_out(const Tensor& tensor);

// Each fills `tensor` in place without recording autograd and returns it.
Tensor uniform_(Tensor tensor, double low = 0.0, double high = 1.0);
Tensor normal_(Tensor tensor, double mean = 0.0, double std = 1.0);
Tensor constant_(Tensor tensor, Scalar value);
Tensor zeros_(Tensor tensor);
Tensor ones_(Tensor tensor);
// U(-b, b) with b = gain * sqrt(3 / fan), gain = calculate_gain(nonlinearity, a).
Tensor kaiming_uniform_(Tensor tensor, double a = 0.0, FanMode mode = FanMode::FanIn,
                        Nonlinearity nonlinearity = Nonlinearity::LeakyReLU);
// N(0, std^2) with std = gain / sqrt(fan).
Tensor kaiming_normal_(Tensor tensor, double a = 0.0, FanMode mode = FanMode::FanIn,
                       Nonlinearity nonlinearity = Nonlinearity::LeakyReLU);
// U(-b, b) with b = gain * sqrt(6 / (fan_in + fan_out)).
Tensor xavier_uniform_(Tensor tensor, double gain = 1.0);
// N(0, std^2) with std = gain * sqrt(2 / (fan_in + fan_out)).
Tensor xavier_normal_(Tensor tensor, double gain = 1.0);

}  // namespace kiln::nn::init
