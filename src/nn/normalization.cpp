// LayerNorm, GroupNorm and InstanceNorm1d/2d: construction, forward and printing.
#include "kiln/nn/normalization.h"

#include "kiln/nn/init.h"
#include "kiln/ops.h"
#include "nn/python_float.h"

namespace kiln::nn {

LayerNormImpl::LayerNormImpl(Shape normalized_shape_, LayerNormOptions options)
    : normalized_shape(std::move(normalized_shape_)), options(options) {
  for (int64_t s : normalized_shape)
    KILN_CHECK(s >= 0, "LayerNorm", "normalized_shape must be non-negative, got ", normalized_shape);
  if (options.elementwise_affine) {
    weight = register_parameter("weight", empty(normalized_shape));
    if (options.bias) bias = register_parameter("bias", empty(normalized_shape));
  }
  reset_parameters();
}

void LayerNormImpl::reset_parameters() {
  if (weight.defined()) init::ones_(weight);
  if (bias.defined()) init::zeros_(bias);
}

Tensor LayerNormImpl::forward(const Tensor& x) {
  return kiln::layer_norm(x, normalized_shape, weight, bias, options.eps);
}

void LayerNormImpl::pretty_print(std::ostream& os) const {
  os << "LayerNorm((";
  for (size_t i = 0; i < normalized_shape.size(); ++i) os << (i ? ", " : "") << normalized_shape[i];
  os << (normalized_shape.size() == 1 ? ",)" : ")") << ", eps=" << detail::python_float(options.eps)
     << ", elementwise_affine=" << (options.elementwise_affine ? "True" : "False") << ")";
}

GroupNormImpl::GroupNormImpl(int64_t num_groups, int64_t num_channels, GroupNormOptions options)
    : num_groups(num_groups), num_channels(num_channels), options(options) {
  KILN_CHECK(num_groups > 0 && num_channels >= 0 && num_channels % num_groups == 0, "GroupNorm", "num_channels (",
             num_channels, ") must be divisible by num_groups (", num_groups, "), a positive number");
  if (options.affine) {
    weight = register_parameter("weight", empty({num_channels}));
    if (options.bias) bias = register_parameter("bias", empty({num_channels}));
  }
  reset_parameters();
}

void GroupNormImpl::reset_parameters() {
  if (weight.defined()) init::ones_(weight);
  if (bias.defined()) init::zeros_(bias);
}

Tensor GroupNormImpl::forward(const Tensor& x) { return kiln::group_norm(x, num_groups, weight, bias, options.eps); }

void GroupNormImpl::pretty_print(std::ostream& os) const {
  os << "GroupNorm(" << num_groups << ", " << num_channels << ", eps=" << detail::python_float(options.eps)
     << ", affine=" << (options.affine ? "True" : "False")
     << ", bias=" << (options.affine && options.bias ? "True" : "False") << ")";
}

InstanceNormImplBase::InstanceNormImplBase(int64_t num_features, InstanceNormOptions options, const char* name,
                                           int64_t rank)
    : num_features(num_features), options(options), name_(name), rank_(rank) {
  KILN_CHECK(num_features > 0, name, "num_features must be positive, got ", num_features);
  if (options.affine) {
    weight = register_parameter("weight", empty({num_features}));
    if (options.bias) bias = register_parameter("bias", empty({num_features}));
  }
  if (options.track_running_stats) {
    running_mean = register_buffer("running_mean", empty({num_features}));
    running_var = register_buffer("running_var", empty({num_features}));
    num_batches_tracked = register_buffer("num_batches_tracked", zeros({}, kInt64));
  }
  reset_parameters();
}

void InstanceNormImplBase::reset_running_stats() {
  if (!running_mean.defined()) return;
  init::zeros_(running_mean);
  init::ones_(running_var);
  init::zeros_(num_batches_tracked);
}

void InstanceNormImplBase::reset_parameters() {
  reset_running_stats();
  if (weight.defined()) init::ones_(weight);
  if (bias.defined()) init::zeros_(bias);
}

// As torch: an unbatched input is one instance; training or no running statistics normalise by
// the input's own.
Tensor InstanceNormImplBase::forward(const Tensor& x) {
  const int64_t r = x.defined() ? x.dim() : 0;
  KILN_CHECK(r == rank_ || r == rank_ - 1, name_, "expected ", rank_ - 1, "D (unbatched) or ", rank_,
             "D (batched) input, got ", r, "D input");
  if (r == rank_ - 1) return forward(x.unsqueeze(0)).squeeze(0);
  // (num_batches_tracked is in the state dict, as torch's, and stays 0: torch's InstanceNorm never
  // counts)
  const bool use_input_stats = is_training() || !options.track_running_stats;
  return kiln::instance_norm(x, running_mean, running_var, weight, bias, use_input_stats, options.momentum,
                             options.eps);
}

void InstanceNormImplBase::pretty_print(std::ostream& os) const {
  os << name_ << "(" << num_features << ", eps=" << detail::python_float(options.eps)
     << ", momentum=" << detail::python_float(options.momentum) << ", affine=" << (options.affine ? "True" : "False")
     << ", bias=" << (options.affine && options.bias ? "True" : "False")
     << ", track_running_stats=" << (options.track_running_stats ? "True" : "False") << ")";
}

}  // namespace kiln::nn
