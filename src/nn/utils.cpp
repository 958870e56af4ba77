// Gradient clipping: clip_grad_norm_ and clip_grad_value_, in torch.nn.utils' arithmetic order.
#include "kiln/nn/utils.h"

#include <cmath>

#include "kiln/autograd.h"
#include "kiln/ops.h"
#include "optim/fused_step.h"

namespace kiln::nn::utils {

namespace {

// The gradients of `parameters` that exist (an undefined parameter is an error).
std::vector<Tensor> grads_of(const std::vector<Tensor>& parameters, const char* where) {
  std::vector<Tensor> grads;
  for (size_t i = 0; i < parameters.size(); ++i) {
    KILN_CHECK(parameters[i].defined(), where, "parameter ", i, " is an undefined tensor");
    if (Tensor g = parameters[i].grad(); g.defined()) grads.push_back(g);
  }
  return grads;
}

using optim::detail::StepBucket;

// Per-tensor norms, then the norm of those, on `device`, as torch's foreach path: the tensors
// grouped by device and dtype (`groups`, not empty), each group's norms in one kernel (rounded to
// the group's dtype, as torch's are; mixed dtypes promote).
Tensor total_norm(const std::vector<StepBucket>& groups, Device device, double norm_type, bool error_if_nonfinite,
                  const char* where) {
  ScalarType total_t = groups[0].dtype;
  for (const auto& group : groups) total_t = promote_types(total_t, group.dtype);
  std::vector<Tensor> norms;
  for (const auto& group : groups)
    norms.push_back(
        optim::detail::foreach_norm(group.tensors, norm_type, where).to(group.dtype).to(total_t).to(device));
  Tensor total = norm(cat(norms), norm_type);
  if (error_if_nonfinite) {  // checked before any gradient changes
    const double t = total.item<double>();
    KILN_CHECK(std::isfinite(t), where, "the total norm of order ", norm_type, " of the gradients is non-finite (", t,
               "), so it cannot be clipped; pass error_if_nonfinite = false to scale by it anyway");
  }
  return total;
}

// Each group's tensors times min(max_norm / (total + 1e-6), 1). The coefficient stays a tensor
// of the total's dtype, so float32 gradients are scaled by the same float32 number PyTorch computes.
void scale_by_norm(const std::vector<StepBucket>& groups, double max_norm, const Tensor& total, const char* where) {
  const Tensor coef = clamp_max(max_norm / (total + 1e-6), 1.0);
  for (const auto& group : groups) optim::detail::foreach_mul_(group.tensors, coef.to(group.device), where);
}

void check_norm_type(double norm_type, const char* where) {
  KILN_CHECK(norm_type >= 0, where, "norm_type must be >= 0 or inf, got ", norm_type);
}

void check_max_norm(double max_norm, const char* where) {
  KILN_CHECK(max_norm >= 0, where, "max_norm must be non-negative, got ", max_norm);
}

}  // namespace

double clip_grad_norm_(const std::vector<Tensor>& parameters, double max_norm, double norm_type,
                       bool error_if_nonfinite) {
  const char* where = "clip_grad_norm_";
  check_max_norm(max_norm, where);
  check_norm_type(norm_type, where);
  NoGradGuard no_grad;
  const std::vector<Tensor> grads = grads_of(parameters, where);
  if (grads.empty()) return 0.0;
  const std::vector<StepBucket> groups = optim::detail::bucket_by_device_and_dtype(grads);
  const Tensor total = total_norm(groups, grads[0].device(), norm_type, error_if_nonfinite, where);
  // On a GPU the scaling is queued before the total is read, so the device is not left idle
  // while the host launches it.
  scale_by_norm(groups, max_norm, total, where);
  return total.item<double>();
}

Tensor get_total_norm(const std::vector<Tensor>& tensors, double norm_type, bool error_if_nonfinite) {
  const char* where = "get_total_norm";
  check_norm_type(norm_type, where);
  NoGradGuard no_grad;
  std::vector<Tensor> defined;
  for (const Tensor& t : tensors)
    if (t.defined()) defined.push_back(t.detach());
  if (defined.empty()) return zeros({});
  return total_norm(optim::detail::bucket_by_device_and_dtype(defined), defined[0].device(), norm_type,
                    error_if_nonfinite, where);
}

void clip_grads_with_norm_(const std::vector<Tensor>& parameters, double max_norm, const Tensor& total_norm) {
  const char* where = "clip_grads_with_norm_";
  check_max_norm(max_norm, where);
  KILN_CHECK(total_norm.defined() && total_norm.numel() == 1 && is_floating_point(total_norm.dtype()), where,
             "total_norm must be a one-element floating-point tensor, got ",
             total_norm.defined() ? detail::cat(total_norm.dtype(), " ", total_norm.shape()) : "an undefined tensor");
  NoGradGuard no_grad;
  const std::vector<Tensor> grads = grads_of(parameters, where);
  if (grads.empty()) return;
  scale_by_norm(optim::detail::bucket_by_device_and_dtype(grads), max_norm,
                total_norm.detach().reshape({}).to(grads[0].device()), where);
}

void clip_grad_value_(const std::vector<Tensor>& parameters, double clip_value) {
  KILN_CHECK(clip_value >= 0, "clip_grad_value_", "clip_value must be non-negative, got ", clip_value);
  NoGradGuard no_grad;
  for (size_t i = 0; i < parameters.size(); ++i) {
    KILN_CHECK(parameters[i].defined(), "clip_grad_value_", "parameter ", i, " is an undefined tensor");
    if (Tensor g = parameters[i].grad(); g.defined()) g.clamp_(-clip_value, clip_value);
  }
}

}  // namespace kiln::nn::utils
