// kiln::nn::utils: gradient clipping over a model's parameters (torch.nn.utils.clip_grad_*).
#pragma once

#include <vector>

#include "kiln/tensor.h"

namespace kiln::nn::utils {

// Scales the gradients of `parameters` in place so that their total norm (the norm of all
// gradients seen as one vector: the norm of the per-gradient norms) is at most max_norm:
// each grad *= min(max_norm / (total_norm + 1e-6), 1), as torch.nn.utils.clip_grad_norm_, the
// norms computed in the gradients' dtype. norm_type is p >= 0 or INFINITY (max |g|).
// Parameters without a gradient are ignored; with none, nothing changes and 0 is returned.
// Returns the total norm before clipping. error_if_nonfinite: a NaN or infinite total norm is
// an error (and nothing is scaled) instead of scaling every gradient by NaN or 0.
double clip_grad_norm_(const std::vector<Tensor>& parameters, double max_norm, double norm_type = 2.0,
                       bool error_if_nonfinite = false);

// clip_grad_norm_ in its two halves, as torch.nn.utils (2.6 on), for a training loop that should
// not wait for the GPU: clip_grad_norm_ returns a number, which on a GPU means waiting for the
// norms; these keep the total norm a tensor (on the first tensor's device), and scaling by it is
// queued like any op.
// The total norm of `tensors` (e.g. the gradients) seen as one vector, a 0-dim tensor in their
// (promoted) dtype; undefined tensors are skipped, and with none it is a float32 zero on the CPU.
// error_if_nonfinite reads the norm (waiting for a GPU) and throws when it is NaN or infinite.
Tensor get_total_norm(const std::vector<Tensor>& tensors, double norm_type = 2.0, bool error_if_nonfinite = false);
// Scales the gradients of `parameters` in place by min(max_norm / (total_norm + 1e-6), 1).
void clip_grads_with_norm_(const std::vector<Tensor>& parameters, double max_norm, const Tensor& total_norm);

// Clamps every gradient of `parameters` in place to [-clip_value, clip_value].
void clip_grad_value_(const std::vector<Tensor>& parameters, double clip_value);

}  // namespace kiln::nn::utils
