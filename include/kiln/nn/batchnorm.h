// BatchNorm1d and BatchNorm2d (torch::nn::BatchNorm1d, BatchNorm2d) and their options.
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

// Normalises over dim 1 of [N, C, ...]. Parameters weight (1) and bias (0) when affine (bias
// only with options.bias);
// buffers running_mean (0), running_var (1) and num_batches_tracked (int64 0-d) when
// tracking running statistics — the names and dtypes of PyTorch's state_dict. What BatchNorm1d
// and BatchNorm2d share; they differ in the ranks they take.
class BatchNormImplBase : public Module {
 public:
  void reset_running_stats();
  void reset_parameters();
  Tensor forward(const Tensor& x);
  void pretty_print(std::ostream& os) const override;

  int64_t num_features;
  BatchNormOptions options;
  Tensor weight, bias;
  Tensor running_mean, running_var, num_batches_tracked;

 protected:
  // `name` for errors and printing; inputs of rank `min_dim` to `max_dim`.
  BatchNormImplBase(int64_t num_features, BatchNormOptions options, const char* name, int64_t min_dim, int64_t max_dim);
  Tensor run(const Tensor& x, bool relu);

 private:
  const char* name_;
  int64_t min_dim_, max_dim_;
};

// [N, C] or [N, C, L] (torch::nn::BatchNorm1d).
class BatchNorm1dImpl : public BatchNormImplBase {
 public:
  explicit BatchNorm1dImpl(int64_t num_features, BatchNormOptions options = {})
      : BatchNormImplBase(num_features, options, "BatchNorm1d", 2, 3) {}
};

// [N, C, H, W] (torch::nn::BatchNorm2d).
class BatchNorm2dImpl : public BatchNormImplBase {
 public:
  explicit BatchNorm2dImpl(int64_t num_features, BatchNormOptions options = {})
      : BatchNormImplBase(num_features, options, "BatchNorm2d", 4, 4) {}
  // relu(forward(x)) through batch_norm_relu: one pass over the activation instead of two.
  // Sequential uses it for a BatchNorm2d followed by a ReLU.
  Tensor forward_relu(const Tensor& x) { return run(x, true); }
};

class BatchNorm1d : public ModuleHolder<BatchNorm1dImpl> {
 public:
  using ModuleHolder<BatchNorm1dImpl>::ModuleHolder;
  BatchNorm1d(int64_t num_features, BatchNormOptions options)
      : ModuleHolder(std::make_shared<BatchNorm1dImpl>(num_features, options)) {}
};

class BatchNorm2d : public ModuleHolder<BatchNorm2dImpl> {
 public:
  using ModuleHolder<BatchNorm2dImpl>::ModuleHolder;
  BatchNorm2d(int64_t num_features, BatchNormOptions options)
      : ModuleHolder(std::make_shared<BatchNorm2dImpl>(num_features, options)) {}
};

}  // namespace kiln::nn
