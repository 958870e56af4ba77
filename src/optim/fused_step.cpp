// The fused optimizer steps' op layer: everything the kernels assume is checked here.
#include "optim/fused_step.h"

#include <algorithm>

#include "ops/op_util.h"

namespace kiln::optim::detail {
namespace {

bool is_dense(const Tensor& p) { return p.is_contiguous() || (p.dim() == 4 && p.is_contiguous(MemoryFormat::ChannelsLast)); }

// Each list has one tensor per parameter, with the parameter's shape, dtype, device and strides.
void check_list(std::span<const Tensor> params, std::span<const Tensor> list, const char* what, const char* where) {
  KILN_CHECK(list.size() == params.size(), where, "got ", params.size(), " parameters but ", list.size(), " ", what);
  for (size_t i = 0; i < list.size(); ++i) {
    const Tensor& t = list[i];
    const Tensor& p = params[i];
    KILN_CHECK(t.defined(), where, what, " ", i, " is an undefined tensor");
    KILN_CHECK(t.shape() == p.shape(), where, what, " ", i, " has shape ", t.shape(), " but its parameter has shape ",
               p.shape());
    KILN_CHECK(t.dtype() == p.dtype(), where, what, " ", i, " has dtype ", t.dtype(),
               " but its parameter has dtype ", p.dtype());
    KILN_CHECK(t.device() == p.device(), where, what, " ", i, " is on ", t.device().str(),
               " but its parameter is on ", p.device().str());
    KILN_CHECK(same_layout(t, p), where, what, " ", i, " has strides ", t.strides(),
               " but its parameter has strides ", p.strides());
  }
}

void bump_all(std::span<Tensor> ts) {
  for (const Tensor& t : ts) ops::bump_version(t);
}

}  // namespace

void check_step_params(std::span<const Tensor> params, const char* where) {
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& p = params[i];
    KILN_CHECK(p.defined(), where, "parameter ", i, " is an undefined tensor");
    KILN_CHECK(p.is_floating_point(), where, "parameter ", i, " has dtype ", p.dtype(),
               "; parameters must be floating point");
    KILN_CHECK(is_dense(p), where, "parameter ", i, " of shape ", p.shape(), " has strides ", p.strides(),
               "; parameters must be contiguous (row-major or channels-last)");
    KILN_CHECK(p.device() == params[0].device(), where, "parameter ", i, " is on ", p.device().str(),
               " but parameter 0 is on ", params[0].device().str());
    KILN_CHECK(p.dtype() == params[0].dtype(), where, "parameter ", i, " has dtype ", p.dtype(),
               " but parameter 0 has ", params[0].dtype());
  }
}

namespace {
void check_step_inputs(const StepBucket& bucket, size_t group, const char* where) {
  check_step_params(bucket.tensors, where);
  for (size_t k = 0; k < bucket.tensors.size(); ++k) {
    const Tensor& p = bucket.tensors[k];
    const Tensor g = p.grad();
    const size_t i = bucket.index[k];
    KILN_CHECK(g.shape() == p.shape(), where, "the gradient of parameter ", i, " of param group ", group,
               " has shape ", g.shape(), " but the parameter has shape ", p.shape());
    KILN_CHECK(g.dtype() == p.dtype(), where, "the gradient of parameter ", i, " of param group ", group,
               " has dtype ", g.dtype(), " but the parameter has dtype ", p.dtype());
    KILN_CHECK(g.device() == p.device(), where, "the gradient of parameter ", i, " of param group ", group,
               " is on ", g.device().str(), " but the parameter is on ", p.device().str());
  }
}
}  // namespace

std::vector<std::vector<StepBucket>> checked_buckets(const std::vector<OptimizerParamGroup>& groups, const char* where) {
  std::vector<std::vector<StepBucket>> out;
  for (size_t g = 0; g < groups.size(); ++g) {
    out.push_back(bucket_params(groups[g].params()));
    for (const StepBucket& bucket : out.back()) check_step_inputs(bucket, g, where);
  }
  return out;
}

double advance_step(std::map<std::string, Tensor>& state) {
  Tensor& t = state["step"];
  if (!t.defined()) t = scalar_tensor(0.0, kFloat32);
  t.add_(1);
  return static_cast<double>(t.item<float>());
}

bool same_layout(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape()) return false;
  for (int64_t d = 0; d < a.dim(); ++d)  // a size-1 dim's stride does not move any element
    if (a.shape()[d] != 1 && a.strides()[d] != b.strides()[d]) return false;
  return true;
}

Tensor like_param(const Tensor& t, const Tensor& p) {
  if (same_layout(t, p)) return t;
  Tensor out = empty_like(p);
  out.copy_(t);
  return out;
}

std::vector<StepBucket> bucket_by_device_and_dtype(std::span<const Tensor> ts) {
  std::vector<StepBucket> buckets;
  for (size_t i = 0; i < ts.size(); ++i) {
    const Tensor& t = ts[i];
    if (!t.defined()) continue;
    auto it = std::find_if(buckets.begin(), buckets.end(),
                           [&](const StepBucket& b) { return b.device == t.device() && b.dtype == t.dtype(); });
    if (it == buckets.end()) it = buckets.insert(buckets.end(), StepBucket{t.device(), t.dtype(), {}, {}});
    it->index.push_back(i);
    it->tensors.push_back(t);
  }
  return buckets;
}

std::vector<StepBucket> bucket_params(const std::vector<Tensor>& params) {
  std::vector<Tensor> with_grad;  // undefined where a parameter has no gradient
  for (const Tensor& p : params) with_grad.push_back(p.grad().defined() ? p : Tensor());
  return bucket_by_device_and_dtype(with_grad);
}

void adam_step(std::span<Tensor> params, std::span<const Tensor> grads, std::span<Tensor> exp_avgs,
               std::span<Tensor> exp_avg_sqs, std::span<Tensor> max_exp_avg_sqs,
               const backend::AdamStepAttrs& attrs, const char* where) {
  if (params.empty()) return;
  check_step_params(params, where);
  check_list(params, grads, "gradient", where);
  check_list(params, exp_avgs, "exp_avg", where);
  check_list(params, exp_avg_sqs, "exp_avg_sq", where);
  if (attrs.amsgrad) check_list(params, max_exp_avg_sqs, "max_exp_avg_sq", where);
  KILN_CHECK(attrs.step_size.size() == params.size() && attrs.bias_correction2_sqrt.size() == params.size(), where,
             "got ", params.size(), " parameters but ", attrs.step_size.size(), " step sizes");
  std::vector<Tensor> outs;
  outs.reserve(params.size() * (attrs.amsgrad ? 4 : 3));
  outs.insert(outs.end(), params.begin(), params.end());
  outs.insert(outs.end(), exp_avgs.begin(), exp_avgs.end());
  outs.insert(outs.end(), exp_avg_sqs.begin(), exp_avg_sqs.end());
  if (attrs.amsgrad) outs.insert(outs.end(), max_exp_avg_sqs.begin(), max_exp_avg_sqs.end());
  backend::run(backend::Op::AdamStep, params[0].device(), grads, outs, &attrs);
  bump_all(outs);
}

void sgd_step(std::span<Tensor> params, std::span<const Tensor> grads, std::span<Tensor> momentum_buffers,
              const backend::SgdStepAttrs& attrs, const char* where) {
  if (params.empty()) return;
  check_step_params(params, where);
  check_list(params, grads, "gradient", where);
  std::vector<Tensor> outs(params.begin(), params.end());
  if (attrs.momentum != 0) {
    check_list(params, momentum_buffers, "momentum_buffer", where);
    KILN_CHECK(attrs.fresh_buffer.size() == params.size(), where, "got ", params.size(), " parameters but ",
               attrs.fresh_buffer.size(), " fresh-buffer flags");
    outs.insert(outs.end(), momentum_buffers.begin(), momentum_buffers.end());
  }
  backend::run(backend::Op::SgdStep, params[0].device(), grads, outs, &attrs);
  bump_all(outs);
}

// The checks the foreach ops share: one device and floating dtype.
void check_foreach(std::span<const Tensor> ts, const char* where) {
  for (size_t i = 0; i < ts.size(); ++i) {
    KILN_CHECK(ts[i].defined() && ts[i].is_floating_point(), where, "tensor ", i,
               " must be a defined floating-point tensor");
    KILN_CHECK(ts[i].device() == ts[0].device() && ts[i].dtype() == ts[0].dtype(), where, "tensor ", i, " is ",
               ts[i].dtype(), " on ", ts[i].device().str(), " but tensor 0 is ", ts[0].dtype(), " on ",
               ts[0].device().str());
  }
}

Tensor foreach_norm(std::span<const Tensor> ts, double p, const char* where) {
  check_foreach(ts, where);
  KILN_CHECK(!ts.empty(), where, "needs at least one tensor");
  KILN_CHECK(p >= 0, where, "the norm's order p must be >= 0 or inf, got ", p);
  const Device device = ts[0].device();
  std::vector<Tensor> dense;  // the kernels read each tensor as one run of elements
  for (const Tensor& t : ts) dense.push_back(is_dense(t) ? t : t.contiguous());
  Tensor norms = empty({static_cast<int64_t>(ts.size())},
                       TensorOptions(ts[0].dtype() == kFloat64 ? kFloat64 : kFloat32).device(device));
  backend::ReduceAttrs attrs;
  attrs.p = p;
  Tensor out[1] = {norms};
  backend::run(backend::Op::ForeachNorm, device, dense, out, &attrs);
  return norms;
}

void foreach_mul_(std::span<const Tensor> ts, const Tensor& scale, const char* where) {
  check_foreach(ts, where);
  if (ts.empty()) return;
  KILN_CHECK(scale.numel() == 1 && scale.is_floating_point() && scale.device() == ts[0].device(), where,
             "the scale must be one floating-point element on ", ts[0].device().str());
  std::vector<Tensor> dense;
  for (const Tensor& t : ts) {
    if (is_dense(t))
      dense.push_back(t);
    else
      Tensor(t).mul_(scale.reshape({}));  // rare: a gradient that is a strided view
  }
  backend::run(backend::Op::ForeachMul, ts[0].device(), std::span<const Tensor>(&scale, 1), dense);
  bump_all(dense);
}

bool unscale_grads(std::span<const Tensor> grads, double inv_scale, const char* where) {
  for (size_t i = 0; i < grads.size(); ++i) {
    KILN_CHECK(grads[i].defined(), where, "gradient ", i, " is an undefined tensor");
    KILN_CHECK(grads[i].is_floating_point(), where, "gradient ", i, " has dtype ", grads[i].dtype(),
               "; gradients must be floating point");
  }
  std::vector<Tensor> found;  // one flag per device
  std::vector<std::pair<Tensor, Tensor>> dense_copies;  // (gradient, the copy the kernel scales)
  const backend::AmpUnscaleAttrs attrs{inv_scale};
  for (StepBucket& group : bucket_by_device_and_dtype(grads)) {
    for (Tensor& g : group.tensors)
      if (!is_dense(g)) {
        dense_copies.emplace_back(g, g.contiguous());
        g = dense_copies.back().second;
      }
    auto f = std::find_if(found.begin(), found.end(), [&](const Tensor& t) { return t.device() == group.device; });
    if (f == found.end()) f = found.insert(found.end(), zeros({1}, TensorOptions(kFloat32).device(group.device)));
    group.tensors.push_back(*f);
    backend::run(backend::Op::AmpUnscale, group.device, {}, group.tensors, &attrs);
    group.tensors.pop_back();
    bump_all(group.tensors);
  }
  for (auto& [g, d] : dense_copies) g.copy_(d);
  bool any = false;
  for (const Tensor& f : found) any = any || f.item<float>() != 0;
  return any;
}

}  // namespace kiln::optim::detail
