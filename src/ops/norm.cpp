// batch_norm (and batch_norm_relu, its ReLU fused into the kernels): batch or running
// statistics, the running-statistics update, and autograd; instance_norm through group_norm or,
// with running statistics, through batch_norm of the instances as channels (torch's way).
#include "ops/op_util.h"

namespace kiln {
namespace {

using autograd::SavedTensor;
using ops::Op;

void check_channel_param(const Tensor& t, int64_t c, const char* what, const Tensor& x, const char* op) {
  if (!t.defined()) return;
  KILN_CHECK(t.dim() == 1 && t.size(0) == c, op, "expected ", what, " of shape [", c, "] for input ", x.shape(),
             ", got ", t.shape());
  KILN_CHECK(t.is_floating_point(), op, what, " must be floating-point, got ", t.dtype());
}

// The kernels take x row-major or channels-last (dense either way).
Tensor dense_for_kernel(const Tensor& t) {
  if (t.dim() == 4 && t.is_contiguous(MemoryFormat::ChannelsLast)) return t;
  return t.contiguous();
}

// `like`'s layout for t (the gradient follows the input's layout).
Tensor same_layout(const Tensor& t, const Tensor& like) {
  if (like.dim() == 4 && !like.is_contiguous() && like.is_contiguous(MemoryFormat::ChannelsLast))
    return t.contiguous(MemoryFormat::ChannelsLast);
  return t.contiguous();
}

// batch_norm (and its ReLU) in differentiable ops over {x, weight, bias}, in the statistics'
// dtype: create_graph differentiates it (recomputed_gradients). Training normalises by the
// batch's statistics (recomputed: they depend on x), evaluation by the running ones.
Tensor batch_norm_composite(const std::vector<Tensor>& in, const Tensor& running_mean, const Tensor& running_var,
                            const backend::BatchNormAttrs& a, ScalarType acc) {
  const Tensor x = ops::cast(in[0], acc);
  Shape dims, channel(static_cast<size_t>(x.dim()), 1);
  for (int64_t d = 0; d < x.dim(); ++d)
    if (d != 1) dims.push_back(d);
  channel[1] = x.size(1);
  Tensor xhat;
  if (a.training) {
    const Tensor xc = x - mean(x, dims, true);
    xhat = xc * rsqrt(mean(xc * xc, dims, true) + a.eps);
  } else {
    xhat = (x - running_mean.view(channel)) * rsqrt(running_var.view(channel) + a.eps);
  }
  if (in[1].defined()) xhat = xhat * ops::cast(in[1], acc).view(channel);
  if (in[2].defined()) xhat = xhat + ops::cast(in[2], acc).view(channel);
  return (a.relu ? relu(xhat) : xhat).to(in[0].dtype());
}

Tensor batch_norm_impl(const Tensor& x_in, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                       const Tensor& bias, bool training, double momentum, double eps, bool relu) {
  const char* op = relu ? "batch_norm_relu" : "batch_norm";
  ops::check_defined(x_in, op);
  KILN_CHECK(x_in.dim() >= 2, op, "expected an input of rank 2 or more [N, C, ...], got shape ", x_in.shape());
  KILN_CHECK(x_in.is_floating_point(), op, "expected a floating-point input, got ", x_in.dtype());
  KILN_CHECK(eps > 0, op, "eps must be positive, got ", eps);
  const int64_t c = x_in.size(1);
  check_channel_param(running_mean, c, "running_mean", x_in, op);
  check_channel_param(running_var, c, "running_var", x_in, op);
  check_channel_param(weight, c, "weight", x_in, op);
  check_channel_param(bias, c, "bias", x_in, op);
  KILN_CHECK(running_mean.defined() == running_var.defined(), op,
             "running_mean and running_var must be both given or both omitted");
  KILN_CHECK(!running_mean.defined() || running_mean.dtype() == running_var.dtype(), op,
             "running_mean and running_var must have one dtype, got ", running_mean.dtype(), " and ",
             running_var.dtype());
  KILN_CHECK(training || running_mean.defined(), op, "evaluation (training=false) needs running_mean and running_var");
  const Device dev = ops::common_device(
      {&x_in, running_mean.defined() ? &running_mean : &x_in, running_var.defined() ? &running_var : &x_in,
       weight.defined() ? &weight : &x_in, bias.defined() ? &bias : &x_in},
      op);
  const int64_t per_channel = c == 0 ? 0 : x_in.numel() / c;
  // An empty batch (the last one split across processes) is an empty output, as in torch: no
  // statistics, running averages untouched.
  const bool empty = x_in.numel() == 0;
  if (training)
    KILN_CHECK(empty || per_channel > 1, op, "expected more than 1 value per channel when training, got input ",
               x_in.shape());

  const ScalarType acc = x_in.dtype() == kFloat64 ? kFloat64 : kFloat32;
  Tensor x = dense_for_kernel(x_in);
  Tensor mean, stat;  // per channel: the batch mean and invstd, or the running mean and variance
  {
    NoGradGuard ng;
    backend::BatchNormAttrs a{eps, training, relu, momentum};
    if (training && empty) {
      mean = zeros({c}, TensorOptions(acc).device(dev));
      stat = ones({c}, TensorOptions(acc).device(dev));
    } else if (training) {
      mean = make_empty({c}, acc, dev);
      stat = make_empty({c}, acc, dev);
      // The running statistics are updated by the kernel, in place (a strided buffer through a
      // dense copy, copied back).
      std::vector<Tensor> outs{mean, stat};
      if (running_mean.defined()) outs.insert(outs.end(), {running_mean.contiguous(), running_var.contiguous()});
      backend::run(Op::BatchNormStats, dev, std::initializer_list<Tensor>{x}, std::span<Tensor>(outs), &a);
      for (size_t i = 2; i < outs.size(); ++i) {
        Tensor buffer = i == 2 ? running_mean : running_var;
        if (outs[i].is_same(buffer))
          ops::bump_version(buffer);
        else
          buffer.copy_(outs[i]);
      }
    } else {
      // The kernels compute invstd from the running variance themselves (bn::invstd_of).
      mean = ops::cast(running_mean, acc);
      stat = ops::cast(running_var, acc);
    }
  }
  Tensor w = weight.defined() ? ops::cast(weight, acc) : ones({c}, TensorOptions(acc).device(dev));
  Tensor b = bias.defined() ? ops::cast(bias, acc) : zeros({c}, TensorOptions(acc).device(dev));
  Tensor out = make_empty_strided(x.shape(), x.strides(), x.dtype(), dev);
  backend::BatchNormAttrs a{eps, training, relu};
  if (out.numel() > 0) ops::run1(Op::BatchNormApply, dev, {x, mean, stat, w.detach(), b.detach()}, out, &a);

  if (autograd::needs_grad({&x_in, &weight, &bias}))
    autograd::record(relu ? "NativeBatchNormReluBackward" : "NativeBatchNormBackward", {&x_in, &weight, &bias}, out,
                     // The weight, and the bias where the ReLU mask reads it, saved with their
                     // versions: one changed in place before backward (an optimizer step between
                     // them) is an error, as torch's; without the ReLU the kernel ignores the bias.
                     [sx = SavedTensor(x), mean, stat, sw = SavedTensor(w.detach()), swo = SavedTensor(weight),
                      sbo = SavedTensor(bias), acc,
                      sb = relu ? SavedTensor(b.detach()) : SavedTensor(), b_plain = b.detach(), a,
                      mw = weight.defined() ? weight.dtype() : acc, need_x = x_in.requires_grad(),
                      need_w = weight.defined() && weight.requires_grad(),
                      need_b = bias.defined() && bias.requires_grad()](const Tensor& g_in) -> TensorList {
                       const char* node = a.relu ? "NativeBatchNormReluBackward" : "NativeBatchNormBackward";
                       Tensor xs = sx.get(node), w = sw.get(node), b = a.relu ? sb.get(node) : b_plain;
                       if (autograd::needs_grad({&g_in, &xs}) || ((need_w || need_b) && autograd::is_grad_enabled())) {
                         // create_graph: the op recomputed in differentiable ops and differentiated
                         const auto fwd = [&](const std::vector<Tensor>& in) {
                           return batch_norm_composite(in, mean, stat, a, acc);
                         };
                         std::vector<Tensor> r = ops::recomputed_gradients(fwd, {xs, swo.get(node), sbo.get(node)}, g_in);
                         return {need_x ? r[0] : Tensor(), need_w ? r[1] : Tensor(), need_b ? r[2] : Tensor()};
                       }
                       Tensor g = same_layout(ops::cast(g_in, xs.dtype()), xs);
                       const int64_t ch = mean.size(0);
                       std::vector<Tensor> outs{make_empty_strided(xs.shape(), xs.strides(), xs.dtype(), xs.device()),
                                                make_empty({ch}, mean.dtype(), xs.device()),
                                                make_empty({ch}, mean.dtype(), xs.device())};
                       if (xs.numel() > 0)
                         backend::run(Op::BatchNormBackward, xs.device(),
                                      std::initializer_list<Tensor>{g, xs, mean, stat, w, b}, std::span<Tensor>(outs),
                                      &a);
                       else  // an empty batch: no elements, zero weight and bias gradients
                         for (size_t i = 1; i < outs.size(); ++i) outs[i].zero_();
                       return {need_x ? outs[0] : Tensor(), need_w ? ops::cast(outs[1], mw) : Tensor(),
                               need_b ? ops::cast(outs[2], mw) : Tensor()};
                     });
  return out;
}

}  // namespace

Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                  const Tensor& bias, bool training, double momentum, double eps) {
  return batch_norm_impl(x, running_mean, running_var, weight, bias, training, momentum, eps, false);
}

Tensor batch_norm_relu(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                       const Tensor& bias, bool training, double momentum, double eps) {
  return batch_norm_impl(x, running_mean, running_var, weight, bias, training, momentum, eps, true);
}

Tensor instance_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                     const Tensor& bias, bool use_input_stats, double momentum, double eps) {
  const char* op = "instance_norm";
  ops::check_defined(x, op);
  KILN_CHECK(x.dim() >= 3, op, "expected an input [N, C, *] of rank 3 or more, got shape ", x.shape());
  KILN_CHECK(x.is_floating_point(), op, "expected a floating-point input, got ", x.dtype());
  const int64_t n = x.size(0), c = x.size(1);
  KILN_CHECK(c > 0, op, "expected an input with channels, got shape ", x.shape());
  check_channel_param(running_mean, c, "running_mean", x, op);
  check_channel_param(running_var, c, "running_var", x, op);
  KILN_CHECK(running_mean.defined() == running_var.defined(), op,
             "running_mean and running_var must be both given or both omitted");
  KILN_CHECK(use_input_stats || running_mean.defined(), op,
             "use_input_stats=false needs running_mean and running_var");
  if (use_input_stats)
    KILN_CHECK(x.numel() == 0 || x.numel() / (n * c) > 1, op,
               "expected more than 1 spatial element when training, got input ", x.shape());
  check_channel_param(weight, c, "weight", x, op);
  check_channel_param(bias, c, "bias", x, op);
  if (use_input_stats && !running_mean.defined()) return group_norm(x, c, weight, bias, eps);
  // x as one sample of N * C channels, the statistics and parameters repeated for each instance;
  // the running statistics then take the average of the instances' updates.
  Shape one = x.shape();
  one[0] = 1;
  one[1] = n * c;
  Tensor rm = repeat(running_mean, {n}), rv = repeat(running_var, {n});
  const Tensor out = batch_norm(x.reshape(one), rm, rv, weight.defined() ? repeat(weight, {n}) : Tensor(),
                                bias.defined() ? repeat(bias, {n}) : Tensor(), use_input_stats, momentum, eps)
                         .reshape(x.shape());
  if (use_input_stats && n > 0) {
    NoGradGuard ng;
    Tensor mean_of = running_mean, var_of = running_var;
    mean_of.copy_(mean(rm.view({n, c}), {0}));
    var_of.copy_(mean(rv.view({n, c}), {0}));
  }
  return out;
}

}  // namespace kiln
