// BatchNorm2d (torch::nn::BatchNorm2d) and its options.
#pragma once

#include <optional>

#include "kiln/nn/pimpl.h"

namespace kiln::nn {

// Fields in torch.nn.BatchNorm2d's argument order (bias is keyword-only there, PyTorch >= 2.10).
// momentum = std::nullopt averages all batches seen (cumulative moving average), as
// momentum=None does in PyTorch. bias = false (with affine) learns a scale only.
struct BatchNormOptions {
  double eps = 1e-5;
  std::optional<double> momentum = 0.1;
  bool affine = true;
  bool track_running_stats = true;
  bool bias = true;
};

// Normalises over dim 1 of [N, C, H, W]. Parameters weight (1) and bias (0) when affine (bias
// only with options.bias);
// buffers running_mean (0), running_var (1) and num_batches_tracked (int64 0-d) when
// tracking running statistics — the names and dtypes of PyTorch's state_dict.
class BatchNorm2dImpl : public Module {
 public:
  explicit BatchNorm2dImpl(int64_t num_features, BatchNormOptions options = {});
  void reset_running_stats();
  void reset_parameters();
  Tensor forward(const Tensor& x);
  // relu(forward(x)) through batch_norm_relu: one pass over the activation instead of two.
  // Sequential uses it for a BatchNorm2d followed by a ReLU.
  Tensor forward_relu(const Tensor& x);
  void pretty_print(std::ostream& os) const override;

  int64_t num_features;
  BatchNormOptions options;
  Tensor weight, bias;
  Tensor running_mean, running_var, num_batches_tracked;

 private:
  Tensor run(const Tensor& x, bool relu);
};

class BatchNorm2d : public ModuleHolder<BatchNorm2dImpl> {
 public:
  using ModuleHolder<BatchNorm2dImpl>::ModuleHolder;
  BatchNorm2d(int64_t num_features, BatchNormOptions options)
      : ModuleHolder(std::make_shared<BatchNorm2dImpl>(num_features, options)) {}
};

}  // namespace kiln::nn
