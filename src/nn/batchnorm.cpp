// BatchNorm1d and BatchNorm2d: parameters, running statistics and the train/eval behaviour of
// PyTorch's modules.
#include "kiln/nn/batchnorm.h"

#include "kiln/autograd.h"
#include "kiln/nn/init.h"
#include "kiln/ops.h"
#include "nn/python_float.h"

namespace kiln::nn {

BatchNormImplBase::BatchNormImplBase(int64_t num_features, BatchNormOptions options, const char* name, int64_t min_dim,
                                     int64_t max_dim)
    : num_features(num_features), options(options), name_(name), min_dim_(min_dim), max_dim_(max_dim) {
  KILN_CHECK(num_features > 0, name, "num_features must be positive, got ", num_features);
  if (options.affine) {
    weight = register_parameter("weight", empty({num_features}));
    if (options.bias) bias = register_parameter("bias", empty({num_features}));
  }
  if (options.track_running_stats) {
    running_mean = register_buffer("running_mean", zeros({num_features}));
    running_var = register_buffer("running_var", ones({num_features}));
    num_batches_tracked = register_buffer("num_batches_tracked", zeros({}, kInt64));
  }
  reset_parameters();
}

void BatchNormImplBase::reset_running_stats() {
  if (!options.track_running_stats) return;
  init::zeros_(running_mean);
  init::ones_(running_var);
  init::zeros_(num_batches_tracked);
}

void BatchNormImplBase::reset_parameters() {
  reset_running_stats();
  if (options.affine) {
    init::ones_(weight);
    if (bias.defined()) init::zeros_(bias);
  }
}

Tensor BatchNormImplBase::forward(const Tensor& x) { return run(x, false); }

Tensor BatchNormImplBase::run(const Tensor& x, bool relu) {
  const int64_t rank = x.defined() ? x.dim() : 0;
  KILN_CHECK(rank >= min_dim_ && rank <= max_dim_, name_, "expected ", min_dim_,
             min_dim_ == max_dim_ ? "D" : "D or " + std::to_string(max_dim_) + "D", " input, got ", rank, "D input");
  double momentum = options.momentum.value_or(0.0);
  // options.track_running_stats is read here, at call time, as PyTorch reads the attribute:
  // turned off after construction, training updates no buffers.
  if (is_training() && options.track_running_stats && num_batches_tracked.defined()) {
    {
      NoGradGuard no_grad;
      num_batches_tracked.add_(1);
    }
    // momentum = None: the running statistics are the average over all batches seen.
    if (!options.momentum) momentum = 1.0 / num_batches_tracked.item<double>();
  }
  // Training passes the buffers only while tracking; eval passes them whenever they exist.
  // Without running statistics (undefined buffers) even eval mode uses batch statistics.
  const bool pass_stats = !is_training() || options.track_running_stats;
  const Tensor stats_mean = pass_stats ? running_mean : Tensor();
  const Tensor stats_var = pass_stats ? running_var : Tensor();
  const bool use_batch_stats = is_training() || !running_mean.defined();
  return (relu ? kiln::batch_norm_relu : kiln::batch_norm)(x, stats_mean, stats_var, weight, bias, use_batch_stats,
                                                           momentum, options.eps);
}

void BatchNormImplBase::pretty_print(std::ostream& os) const {
  os << name_ << "(" << num_features << ", eps=" << detail::python_float(options.eps) << ", momentum=";
  if (options.momentum) {
    os << detail::python_float(*options.momentum);
  } else {
    os << "None";
  }
  os << ", affine=" << (options.affine ? "True" : "False")
     << ", bias=" << (options.affine && options.bias ? "True" : "False")
     << ", track_running_stats=" << (options.track_running_stats ? "True" : "False") << ")";
}

}  // namespace kiln::nn
