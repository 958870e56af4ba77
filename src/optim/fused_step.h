// The fused optimizer steps as ops: checks, layout fix-ups, and one kernel dispatch per list.
#pragma once

#include <map>
#include <span>
#include <string>
#include <vector>

#include "backend/dispatch.h"
#include "kiln/optim/optimizer.h"
#include "kiln/tensor.h"

namespace kiln::optim::detail {

// A parameter's state "step" advanced by one and read back: PyTorch counts in a 0-d float32 CPU
// tensor (made at the first step) and reads it as a Python float.
double advance_step(std::map<std::string, Tensor>& state);

// Whether a and b have one shape and put every element at the same offset.
bool same_layout(const Tensor& a, const Tensor& b);

// t itself when it has p's strides, else a copy laid out like p (p is dense: row-major or
// channels-last), so the kernels can walk every tensor of a parameter with one index.
Tensor like_param(const Tensor& t, const Tensor& p);

// The checks on the parameters alone (floating, dense, one device and dtype), for callers to
// run before they change any state.
void check_step_params(std::span<const Tensor> params, const char* where);

// One Adam/AdamW update of every listed parameter in place (and of its state). All tensors:
// one device and floating dtype, each state tensor and gradient shaped and laid out like its
// parameter. max_exp_avg_sqs is empty unless attrs.amsgrad. `where` names the caller in errors.
void adam_step(std::span<Tensor> params, std::span<const Tensor> grads, std::span<Tensor> exp_avgs,
               std::span<Tensor> exp_avg_sqs, std::span<Tensor> max_exp_avg_sqs,
               const backend::AdamStepAttrs& attrs, const char* where);

// One SGD update; momentum_buffers is empty when attrs.momentum == 0.
void sgd_step(std::span<Tensor> params, std::span<const Tensor> grads, std::span<Tensor> momentum_buffers,
              const backend::SgdStepAttrs& attrs, const char* where);

// GradScaler's unscale: every gradient multiplied by inv_scale in place (in float for 16-bit
// ones), one dispatch per (device, dtype); returns whether any held an inf or NaN before (one
// host round trip per device).
bool unscale_grads(std::span<const Tensor> grads, double inv_scale, const char* where);

// Gradient clipping's multi-tensor ops (torch's _foreach_norm and _foreach_mul_), over tensors of
// one device and floating dtype: the norm of order p of each, as a vector [n] in float32
// (float64 for float64 tensors); and each multiplied in place by `scale`, one element on their
// device (in float for 16-bit tensors). One kernel launch per 48 tensors instead of one per tensor.
Tensor foreach_norm(std::span<const Tensor> ts, double p, const char* where);
void foreach_mul_(std::span<const Tensor> ts, const Tensor& scale, const char* where);

// The defined tensors among ts bucketed by (device, dtype), in the order each pair first
// appears: each bucket is one multi-tensor dispatch. Indices point into ts.
struct StepBucket {
  Device device;
  ScalarType dtype;
  std::vector<size_t> index;
  std::vector<Tensor> tensors;  // ts[index[k]]
};
std::vector<StepBucket> bucket_by_device_and_dtype(std::span<const Tensor> ts);
// The parameters of a group that have gradients, bucketed so.
std::vector<StepBucket> bucket_params(const std::vector<Tensor>& params);

// Every param group's bucket_params, with everything the fused step would refuse checked in all
// of them (the parameters as check_step_params, and each gradient's shape, dtype and device)
// before the optimizer creates state or updates anything: a step that throws changes nothing.
std::vector<std::vector<StepBucket>> checked_buckets(const std::vector<OptimizerParamGroup>& groups, const char* where);

}  // namespace kiln::optim::detail
