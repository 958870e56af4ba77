// Gradient clipping: clip_grad_norm_ and clip_grad_value_, in torch.nn.utils' arithmetic order.
#include "kiln/nn/utils.h"

#include <cmath>

#include "kiln/autograd.h"
#include "kiln/ops.h"

namespace kiln::nn::utils {

double clip_grad_norm_(const std::vector<Tensor>& parameters, double max_norm, double norm_type,
                       bool error_if_nonfinite) {
  const char* where = "clip_grad_norm_";
  KILN_CHECK(max_norm >= 0, where, "max_norm must be non-negative, got ", max_norm);
  KILN_CHECK(norm_type >= 0, where, "norm_type must be >= 0 or inf, got ", norm_type);
  NoGradGuard no_grad;
  std::vector<Tensor> grads;
  for (size_t i = 0; i < parameters.size(); ++i) {
    KILN_CHECK(parameters[i].defined(), where, "parameter ", i, " is an undefined tensor");
    if (Tensor g = parameters[i].grad(); g.defined()) grads.push_back(g);
  }
  if (grads.empty()) return 0.0;
  // Per-gradient norms, then the norm of those, on the first gradient's device (PyTorch's
  // order; stacking promotes mixed dtypes).
  const Device device = grads[0].device();
  std::vector<Tensor> norms;
  for (const Tensor& g : grads) {
    Tensor n = g.numel() == 0 ? zeros({}, g.dtype()).to(g.device()) : norm(g, norm_type);
    norms.push_back(n.to(device));
  }
  const Tensor total = norm(stack(norms), norm_type);
  const double total_value = total.item<double>();
  KILN_CHECK(!error_if_nonfinite || std::isfinite(total_value), where, "the total norm of order ", norm_type,
             " of the gradients is non-finite (", total_value,
             "), so it cannot be clipped; pass error_if_nonfinite = false to scale by it anyway");
  // The coefficient stays a tensor of the total's dtype, so float32 gradients are scaled by
  // the same float32 number PyTorch computes.
  const Tensor coef = clamp_max(max_norm / (total + 1e-6), 1.0);
  for (Tensor& g : grads) g.mul_(coef.to(g.device()));
  return total_value;
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
