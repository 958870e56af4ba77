// nll_loss and cross_entropy (class indices or probabilities, weights, ignore_index, label
// smoothing): [N, C] cross_entropy through one fused kernel each way, the rest built from
// gather/index ops so that no one-hot [N, C] tensor is ever made.
#include <cmath>
#include <limits>

#include "ops/autocast_policy.h"
#include "ops/op_util.h"

namespace kiln {
namespace {

// The checked pieces of a class-index loss on [N, C, d1, ...] input (1-D input and 0-d target
// are batched as [1, C] and [1] by the caller).
struct IndexTarget {
  Tensor valid;   // bool, target's shape: not ignore_index
  Tensor safe;    // int64, target's shape: the class, 0 where ignored (a valid index)
  Tensor weight;  // the per-target weight, 0 where ignored, input's dtype
};

void check_weight(const Tensor& input, const Tensor& weight, int64_t classes, const char* op) {
  if (!weight.defined()) return;
  ops::common_device({&input, &weight}, op);
  KILN_CHECK(weight.dim() == 1 && weight.numel() == classes, op, "weight must have shape [", classes,
             "] (one per class), got ", weight.shape());
  KILN_CHECK(weight.dtype() == input.dtype(), op, "weight has dtype ", weight.dtype(), " but input has ",
             input.dtype());
}

// With class-index targets the weights are constants of the loss (torch's nll_loss has no
// gradient for them): a weight that wants one is an error, not silently left without.
void check_index_weight(const Tensor& weight, const char* op) {
  KILN_CHECK(!(weight.defined() && weight.requires_grad() && autograd::is_grad_enabled()), op,
             "is not differentiable with respect to weight with class-index targets; pass weight.detach()");
}

void check_index_shapes(const Tensor& input, const Tensor& target, const char* op) {
  KILN_CHECK(input.dim() >= 1, op, "input must have at least 1 dim (classes), got shape ", input.shape());
  KILN_CHECK(target.dtype() == kInt64 || target.dtype() == kInt32, op,
             "target must hold class indices (int64), got ", target.dtype());
  Shape want = input.shape();
  want.erase(want.begin() + (input.dim() == 1 ? 0 : 1));
  KILN_CHECK(target.shape() == want, op, "input of shape ", input.shape(), " needs a target of shape ", want,
             ", got ", target.shape());
}

// Validates the targets (one host sync: out-of-range classes are an error, as in PyTorch on the
// CPU) and gathers the per-target weights. input is [N, C, ...].
IndexTarget prepare_targets(const Tensor& input, const Tensor& target, const Tensor& weight, int64_t ignore_index,
                            const char* op) {
  NoGradGuard ng;
  const int64_t classes = input.size(1);
  Tensor t = ops::cast(target, kInt64);
  IndexTarget r;
  r.valid = ne(t, ignore_index);
  Tensor bad = logical_and(r.valid, logical_or(lt(t, 0), ge(t, classes)));
  if (t.numel() > 0 && any(bad).item<bool>()) {
    for (int64_t v : t.to_vector<int64_t>())
      KILN_CHECK(v == ignore_index || (v >= 0 && v < classes), op, "target ", v, " is out of range for ", classes,
                 " classes");
  }
  r.safe = where(r.valid, t, 0);
  if (weight.defined()) {
    Tensor w = index_select(weight.detach(), 0, r.safe.reshape({-1})).reshape(t.shape());
    r.weight = where(r.valid, w, 0);
  } else {
    r.weight = r.valid.to(input.dtype());
  }
  return r;
}

// Per-target -log p[target] (0 where ignored), times the class weight. logp is [N, C, ...].
Tensor picked_loss(const Tensor& logp, const IndexTarget& t, bool weighted) {
  Tensor picked = gather(logp, 1, t.safe.unsqueeze(1)).squeeze(1);
  // where, not a multiply by 0: an ignored target's logp may be -inf.
  Tensor l = where(t.valid, neg(picked), 0);
  return weighted ? l * t.weight : l;
}

// The sum of all of t in float32 for 16-bit t (float64 for float64): a float16 sum of 8192
// losses near 10 would pass float16's 65504, and a bfloat16 count of targets would round.
Tensor acc_sum(const Tensor& t) { return sum(t, {}, false, t.dtype() == kFloat64 ? kFloat64 : kFloat32); }

// Sum or mean of the per-target losses, accumulated and divided in float32 for 16-bit losses
// (as PyTorch's kernels accumulate) and rounded once to their dtype. weight_sum is acc_sum's.
Tensor reduce(const Tensor& per_target, Reduction reduction, const Tensor& weight_sum) {
  if (reduction == Reduction::None) return per_target;
  Tensor total = acc_sum(per_target);
  // PyTorch's weighted mean: the sum of the weights of the targets not ignored (0/0 = NaN when
  // all are ignored, as in PyTorch).
  if (reduction == Reduction::Mean) total = div(total, weight_sum);
  return ops::cast(total, per_target.dtype());
}

// input [C] with a 0-d target is one sample: batch it, and unbatch an unreduced result.
bool batch_single(Tensor& input, Tensor& target) {
  if (input.dim() != 1) return false;
  input = input.unsqueeze(0);
  target = target.unsqueeze(0);
  return true;
}

Tensor unbatch(const Tensor& loss, bool batched, Reduction reduction) {
  return batched && reduction == Reduction::None ? loss.squeeze(0) : loss;
}

// Reduction::BatchMean is kl_div's only (torch refuses "batchmean" for the other losses too).
void check_reduction(Reduction reduction, const char* op) {
  KILN_CHECK(reduction != Reduction::BatchMean, op, "BatchMean is a reduction of kl_div only; use Mean or Sum");
}

void check_input(const Tensor& input, const Tensor& target, const char* op) {
  ops::check_defined(input, op);
  ops::check_defined(target, op);
  ops::common_device({&input, &target}, op);
  KILN_CHECK(input.is_floating_point(), op, "input must be floating point, got ", input.dtype());
}

// cross_entropy with class-probability targets (target has the input's shape).
Tensor cross_entropy_probs(const Tensor& input, const Tensor& target, const Tensor& weight, Reduction reduction,
                           int64_t ignore_index, double label_smoothing) {
  const char* op = "cross_entropy";
  KILN_CHECK(target.is_floating_point(), op, "a target of the input's shape ", target.shape(),
             " holds class probabilities and must be floating point, got ", target.dtype());
  KILN_CHECK(ignore_index < 0, op, "ignore_index (", ignore_index,
             ") is not supported with class-probability targets");
  const int64_t cdim = input.dim() == 1 ? 0 : 1;
  const int64_t classes = input.size(cdim);
  check_weight(input, weight, classes, op);
  Tensor logp = log_softmax(input, cdim);
  Tensor tgt = target;
  if (label_smoothing > 0) tgt = tgt * (1.0 - label_smoothing) + label_smoothing / static_cast<double>(classes);
  Tensor prod = logp * tgt;
  if (weight.defined()) {
    Shape ws(static_cast<size_t>(input.dim()), 1);
    ws[static_cast<size_t>(cdim)] = classes;
    prod = prod * weight.reshape(ws);  // differentiable in the weight, as torch's composite
  }
  if (reduction == Reduction::None) return neg(sum(prod, {cdim}));
  Tensor total = neg(acc_sum(prod));
  // PyTorch divides by the number of samples (N * d1 * ...), whatever the weights.
  const int64_t samples = classes == 0 ? 0 : input.numel() / classes;
  if (reduction == Reduction::Mean)
    total = samples == 0 ? mul(total, std::numeric_limits<double>::quiet_NaN())
                         : div(total, static_cast<double>(samples));
  return ops::cast(total, prod.dtype());
}

// The fused cross-entropy's input gradient under create_graph, in differentiable ops:
// (softmax(x) - onehot(t)) times the row's gradient and class weight; ignored rows get 0.
Tensor cross_entropy_backward_composite(const Tensor& g, const Tensor& x, const Tensor& t, const Tensor& w,
                                        int64_t ignore_index) {
  const Tensor valid = t != ignore_index, picked = where(valid, t, 0);
  const Tensor onehot = (arange(x.size(1), TensorOptions(kInt64).device(t.device())).unsqueeze(0) == picked.unsqueeze(1));
  Tensor scale = g * valid.to(x.dtype());
  if (w.defined()) scale = scale * index_select(w, 0, picked);
  return (softmax(x, 1) - onehot.to(x.dtype())) * scale.unsqueeze(1);
}

// cross_entropy on [N, C] logits with class targets and no label smoothing: one fused kernel
// (log-softmax and the picked term per row) whose backward writes softmax - onehot directly, so
// neither log-probabilities nor a scattered one-hot [N, C] tensor are ever made.
Tensor fused_cross_entropy(const Tensor& input, const Tensor& target, const Tensor& weight, Reduction reduction,
                           int64_t ignore_index) {
  const Device dev = input.device();
  const int64_t n = input.size(0);
  Tensor x = input.detach().contiguous();
  Tensor t = ops::cast(target, kInt64).contiguous();
  Tensor w = weight.defined() ? weight.detach().contiguous() : Tensor();
  const ScalarType stat = x.dtype() == kFloat64 ? kFloat64 : kFloat32;
  std::vector<Tensor> outs{make_empty({n}, x.dtype(), dev), make_empty({n, 2}, stat, dev)};
  backend::CrossEntropyAttrs attrs{ignore_index, w.defined()};
  {
    std::vector<Tensor> in{x, t};
    if (w.defined()) in.push_back(w);
    backend::run(backend::Op::CrossEntropy, dev, in, outs, &attrs);
  }
  Tensor per_target = outs[0];
  if (autograd::needs_grad({&input}))
    autograd::record("CrossEntropyBackward", {&input}, per_target,
                     [sx = autograd::SavedTensor(input), st = autograd::SavedTensor(t), stats = outs[1], w,
                      attrs](const Tensor& g_in) -> TensorList {
                       Tensor xs = sx.get("CrossEntropyBackward"), ts = st.get("CrossEntropyBackward");
                       Tensor g = ops::cast(g_in, xs.dtype());
                       if (autograd::needs_grad({&g, &xs}))  // create_graph
                         return {cross_entropy_backward_composite(g, xs, ts, w, attrs.ignore_index)};
                       xs = xs.contiguous();
                       g = g.contiguous();
                       Tensor gx = make_empty(xs.shape(), xs.dtype(), xs.device());
                       std::vector<Tensor> in{g, xs, ts, stats};
                       if (w.defined()) in.push_back(w);
                       backend::run(backend::Op::CrossEntropyBackward, xs.device(), in, std::span<Tensor>(&gx, 1),
                                    &attrs);
                       return {gx};
                     });
  if (reduction != Reduction::Mean) return reduce(per_target, reduction, Tensor());
  Tensor weight_sum;
  {
    // PyTorch's weighted mean: over the targets not ignored, each counted with its class weight
    NoGradGuard ng;
    Tensor valid = ne(t, ignore_index);
    weight_sum = w.defined() ? acc_sum(where(valid, index_select(w, 0, where(valid, t, 0)), 0))
                             : acc_sum(valid.to(x.dtype()));
  }
  return reduce(per_target, reduction, weight_sum);
}

}  // namespace

static Tensor nll_loss_body(const Tensor& input_, const Tensor& target_, const Tensor& weight, Reduction reduction,
                            int64_t ignore_index) {
  const char* op = "nll_loss";
  check_input(input_, target_, op);
  check_index_shapes(input_, target_, op);
  check_index_weight(weight, op);
  Tensor input = input_, target = target_;
  const bool batched = batch_single(input, target);
  check_weight(input, weight, input.size(1), op);
  IndexTarget t = prepare_targets(input, target, weight, ignore_index, op);
  Tensor per_target = picked_loss(input, t, weight.defined());
  Tensor weight_sum = reduction == Reduction::Mean ? acc_sum(t.weight) : Tensor();
  return unbatch(reduce(per_target, reduction, weight_sum), batched, reduction);
}

static Tensor cross_entropy_body(const Tensor& input_, const Tensor& target_, const Tensor& weight,
                                 Reduction reduction, int64_t ignore_index, double label_smoothing) {
  const char* op = "cross_entropy";
  check_input(input_, target_, op);
  KILN_CHECK(label_smoothing >= 0.0 && label_smoothing <= 1.0, op, "label_smoothing must be in [0, 1], got ",
             label_smoothing);
  KILN_CHECK(input_.dim() >= 1, op, "input must have at least 1 dim (classes), got shape ", input_.shape());
  // As in PyTorch, a target of the input's shape holds probabilities; otherwise class indices.
  if (target_.shape() == input_.shape())
    return cross_entropy_probs(input_, target_, weight, reduction, ignore_index, label_smoothing);
  KILN_CHECK(!target_.is_floating_point(), op, "a class-probability target must have the input's shape ",
             input_.shape(), ", got ", target_.shape());
  check_index_shapes(input_, target_, op);
  check_index_weight(weight, op);
  Tensor input = input_, target = target_;
  const bool batched = batch_single(input, target);
  const int64_t classes = input.size(1);
  check_weight(input, weight, classes, op);
  if (input.dim() == 2 && label_smoothing == 0)
    return unbatch(fused_cross_entropy(input, target, weight, reduction, ignore_index), batched, reduction);
  IndexTarget t = prepare_targets(input, target, weight, ignore_index, op);
  Tensor logp = log_softmax(input, 1);
  Tensor per_target = picked_loss(logp, t, weight.defined());
  Tensor weight_sum = reduction == Reduction::Mean ? acc_sum(t.weight) : Tensor();
  Tensor loss = reduce(per_target, reduction, weight_sum);
  if (label_smoothing > 0) {
    // PyTorch: (1 - eps) * nll + eps / C * smooth, smooth = -sum_c w_c logp_c per target (0 where
    // ignored), reduced like nll (the mean over the same weight sum).
    Tensor smooth;
    if (weight.defined()) {
      // w over the class dim as a matrix-vector product: no [N, C, ...] temporary for 2-D input.
      Shape order{0};
      for (int64_t d = 2; d < logp.dim(); ++d) order.push_back(d);
      order.push_back(1);  // [N, d1, ..., C]
      Tensor lp = input.dim() == 2 ? logp : logp.permute(order);
      smooth = neg(matmul(lp, weight.detach()));
    } else {
      smooth = neg(sum(logp, {1}));
    }
    smooth = where(t.valid, smooth, 0);
    loss = loss * (1.0 - label_smoothing) +
           reduce(smooth, reduction, weight_sum) * (label_smoothing / static_cast<double>(classes));
  }
  return unbatch(loss, batched, reduction);
}

// The public losses: float32 under autocast (inputs, weights and probability targets cast up).
Tensor nll_loss(const Tensor& input, const Tensor& target, const Tensor& weight, Reduction reduction,
                int64_t ignore_index) {
  check_reduction(reduction, "nll_loss");
  if (!autocast_enabled()) return nll_loss_body(input, target, weight, reduction, ignore_index);
  Tensor x = ops::autocast_float32(input), t = ops::autocast_float32(target), w = ops::autocast_float32(weight);
  ops::AutocastOff off;
  return nll_loss_body(x, t, w, reduction, ignore_index);
}

Tensor cross_entropy(const Tensor& input, const Tensor& target, const Tensor& weight, Reduction reduction,
                     int64_t ignore_index, double label_smoothing) {
  check_reduction(reduction, "cross_entropy");
  if (!autocast_enabled()) return cross_entropy_body(input, target, weight, reduction, ignore_index, label_smoothing);
  Tensor x = ops::autocast_float32(input), t = ops::autocast_float32(target), w = ops::autocast_float32(weight);
  ops::AutocastOff off;
  return cross_entropy_body(x, t, w, reduction, ignore_index, label_smoothing);
}

namespace {
// An elementwise loss's reduction: reduce's, with the mean over every element.
Tensor reduce_loss(const Tensor& loss, Reduction reduction) {
  return reduction == Reduction::Mean ? loss.mean() : reduce(loss, reduction, Tensor());
}

// input - target of a regression loss: both floating point, the target broadcasting to the input's
// shape. The losses are on torch.autocast's float32 list: 16-bit operands are taken in float32
// there, and the ops after run with autocast off. `widen`: 16-bit operands subtracted in float32
// (smooth_l1's and huber's kernels compute in float32 and round the loss once).
struct Difference {
  Tensor d;
  ScalarType dtype;  // the loss's
};
Difference regression_difference(const Tensor& input_in, const Tensor& target_in, const char* name,
                                 Reduction reduction, bool widen = false) {
  check_reduction(reduction, name);
  ops::check_defined(input_in, name);
  ops::check_defined(target_in, name);
  const Tensor input = ops::autocast_float32(input_in), target = ops::autocast_float32(target_in);
  ops::AutocastOff off;
  KILN_CHECK(input.is_floating_point() && target.is_floating_point(), name,
             "expected floating-point input and target, got ", input.dtype(), " and ", target.dtype());
  KILN_CHECK(broadcast_shapes(input.shape(), target.shape(), name) == input.shape(), name, "target shape ",
             target.shape(), " does not broadcast to the input's ", input.shape());
  const ScalarType t = promote_types(input.dtype(), target.dtype());
  const bool half = t == kFloat16 || t == kBFloat16;
  return {widen && half ? input.to(kFloat32) - target.to(kFloat32) : input - target, t};
}

// |d| below `limit` as 0.5 d^2 / scale, from it on (|d| - 0.5 limit) limit / scale: smooth_l1
// (scale = limit = beta) and huber (scale 1, limit delta); at |d| = limit the linear branch, whose
// gradient there is torch's. 16-bit differences in float32, rounded once (torch's opmath). The
// quadratic branch takes d clamped to the limit and divides d by the scale before squaring, so its
// gradient stays finite where 1 / beta overflows or the linear branch is taken (where() passes
// zero there, and zero times inf would be NaN). The loss is rounded to `dtype`.
Tensor quadratic_then_linear(const Tensor& d, double limit, double scale, ScalarType dtype) {
  const Tensor a = abs(d), dq = clamp(d, -limit, limit), linear = a - 0.5 * limit;
  const Tensor out = where(a < limit, scale == 1 ? dq * dq * 0.5 : dq * (dq / scale) * 0.5,
                           limit == scale ? linear : linear * (limit / scale));
  return out.to(dtype);
}

}  // namespace

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  const Tensor d = regression_difference(input, target, "mse_loss", reduction).d;
  ops::AutocastOff off;
  return reduce_loss(d.square(), reduction);
}

Tensor l1_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  const Tensor d = regression_difference(input, target, "l1_loss", reduction).d;
  ops::AutocastOff off;
  return reduce_loss(abs(d), reduction);
}

Tensor smooth_l1_loss(const Tensor& input, const Tensor& target, Reduction reduction, double beta) {
  KILN_CHECK(beta >= 0, "smooth_l1_loss", "beta must not be negative, got ", beta);
  const auto [d, t] = regression_difference(input, target, "smooth_l1_loss", reduction, beta != 0);
  ops::AutocastOff off;
  return reduce_loss(beta == 0 ? abs(d) : quadratic_then_linear(d, beta, beta, t), reduction);
}

Tensor huber_loss(const Tensor& input, const Tensor& target, Reduction reduction, double delta) {
  KILN_CHECK(delta > 0, "huber_loss", "delta must be positive, got ", delta);
  const auto [d, t] = regression_difference(input, target, "huber_loss", reduction, true);
  ops::AutocastOff off;
  return reduce_loss(quadratic_then_linear(d, delta, 1.0, t), reduction);
}


// (1 - y) x + (1 + (pw - 1) y) softplus(-x), with softplus(-x) = log1p(exp(-|x|)) + max(-x, 0):
// no exp of a large number. |x| is spelled where(x >= 0, x, -x) so that its gradient at 0 is 1,
// not abs's 0: the composed gradient is then (1 - y) - (1 + (pw - 1) y) sigmoid(-x) everywhere
// (with abs it lost sigmoid's 1/2 at x = 0, a zero-initialised classifier's logits).
// On torch.autocast's float32 list.
Tensor binary_cross_entropy_with_logits(const Tensor& input_in, const Tensor& target_in, const Tensor& weight_in,
                                        const Tensor& pos_weight_in, Reduction reduction) {
  const char* where_ = "binary_cross_entropy_with_logits";
  check_reduction(reduction, where_);
  ops::check_defined(input_in, where_);
  ops::check_defined(target_in, where_);
  const Tensor x = ops::autocast_float32(input_in), y = ops::autocast_float32(target_in);
  const Tensor w = ops::autocast_float32(weight_in), pw = ops::autocast_float32(pos_weight_in);
  ops::AutocastOff off;
  KILN_CHECK(x.is_floating_point() && y.is_floating_point(), where_, "expected floating-point input and target, got ",
             x.dtype(), " and ", y.dtype());
  KILN_CHECK(x.shape() == y.shape(), where_, "the target's shape ", y.shape(), " must be the input's ", x.shape());
  for (const auto& [t, name] : {std::pair{&w, "weight"}, std::pair{&pw, "pos_weight"}})
    KILN_CHECK(!t->defined() || broadcast_shapes(x.shape(), t->shape(), where_) == x.shape(), where_, "the ", name,
               " of shape ", t->shape(), " does not broadcast to the input's ", x.shape());
  const Tensor softplus_neg = log1p(exp(-where(x >= 0, x, -x))) + relu(-x);
  const Tensor positive = pw.defined() ? (pw - 1) * y + 1 : Tensor();
  Tensor loss = (1 - y) * x + (positive.defined() ? positive * softplus_neg : softplus_neg);
  if (w.defined()) loss = loss * w;
  return reduce_loss(loss, reduction);
}

// torch's binary_cross_entropy on probabilities: -w [y max(log x, -100) + (1 - y) max(log(1 - x),
// -100)], 16-bit operands in float32 and the loss rounded once; its gradient is torch's formula,
// w (x - y) / max(x (1 - x), 1e-12), finite at x = 0 and 1 where the logarithms' is not (the
// target's, w (log(1 - x) - log x), is infinite there, as torch's). On
// torch.autocast's float32 list (torch's CUDA autocast refuses it instead). The weight is a
// constant, as torch's.
Tensor binary_cross_entropy(const Tensor& input_in, const Tensor& target_in, const Tensor& weight_in,
                            Reduction reduction) {
  const char* op = "binary_cross_entropy";
  check_reduction(reduction, op);
  ops::check_defined(input_in, op);
  ops::check_defined(target_in, op);
  const Tensor x = ops::autocast_float32(input_in), y = ops::autocast_float32(target_in),
               w = ops::autocast_float32(weight_in);
  ops::AutocastOff off;
  KILN_CHECK(x.is_floating_point() && y.dtype() == x.dtype(), op,
             "expected floating-point input and target of one dtype, got ", x.dtype(), " and ", y.dtype());
  KILN_CHECK(x.shape() == y.shape(), op, "the target's shape ", y.shape(), " must be the input's ", x.shape());
  KILN_CHECK(!w.defined() || broadcast_shapes(x.shape(), w.shape(), op) == x.shape(), op, "the weight of shape ",
             w.shape(), " does not broadcast to the input's ", x.shape());
  KILN_CHECK(!w.defined() || !w.requires_grad(), op, "the weight is a constant of the loss: detach it");
  ops::common_device({&x, &y, w.defined() ? &w : &x}, op);
  // On the CPU the probabilities are checked, input and target, as torch's CPU kernel does (a
  // device would wait).
  if (x.device().type == DeviceType::CPU && x.numel() > 0)
    for (const auto& [t, what] : {std::pair{&x, "input"}, std::pair{&y, "target"}})
      KILN_CHECK(!((*t < 0).logical_or(*t > 1).logical_or(isnan(*t))).any().item<bool>(), op, "all elements of ",
                 what, " should be between 0 and 1");
  const ScalarType wide = x.dtype() == kFloat16 || x.dtype() == kBFloat16 ? kFloat32 : x.dtype();
  Tensor loss;
  {
    NoGradGuard ng;
    const Tensor xw = ops::cast(x, wide), yw = ops::cast(y, wide);
    loss = (yw - 1) * clamp_min(log1p(-xw), -100) - yw * clamp_min(log(xw), -100);
    if (w.defined()) loss = loss * ops::cast(w, wide);
    loss = ops::cast(loss, x.dtype());
  }
  if (autograd::needs_grad({&x, &y}))
    autograd::record("BinaryCrossEntropyBackward", {&x, &y}, loss,
                     [sx = autograd::SavedTensor(x), sy = autograd::SavedTensor(y), w, nx = x.requires_grad(),
                      ny = y.requires_grad()](const Tensor& g_in) -> TensorList {
                       const char* node = "BinaryCrossEntropyBackward";
                       const Tensor xs = sx.get(node), ys = sy.get(node);
                       const Tensor g = w.defined() ? g_in * w : g_in;
                       // torch's epsilon is the float nearest 1e-12; its target gradient is not clamped
                       const double eps = static_cast<float>(1e-12);
                       return {nx ? g * (xs - ys) / clamp_min((1 - xs) * xs, eps) : Tensor(),
                               ny ? g * (log1p(-xs) - log(xs)) : Tensor()};
                     });
  return reduce_loss(loss, reduction);
}

// torch's formulas: xlogy(target, target) - target * input (target * log(target) spelled with a
// where, which gives torch's gradients too: NaN for the target at 0, -target for the input), or
// exp(target) * (target - input) with log_target. On torch.autocast's float32 list.
Tensor kl_div(const Tensor& input_in, const Tensor& target_in, Reduction reduction, bool log_target) {
  const char* op = "kl_div";
  ops::check_defined(input_in, op);
  ops::check_defined(target_in, op);
  const Tensor x = ops::autocast_float32(input_in), y = ops::autocast_float32(target_in);
  ops::AutocastOff off;
  KILN_CHECK(x.is_floating_point() && y.is_floating_point(), op, "expected floating-point input and target, got ",
             x.dtype(), " and ", y.dtype());
  ops::common_device({&x, &y}, op);
  const Tensor loss = log_target ? exp(y) * (y - x) : where(y == 0, 0.0, y * log(y)) - y * x;
  if (reduction != Reduction::BatchMean) return reduce_loss(loss, reduction);
  const Tensor total = reduce_loss(loss, Reduction::Sum);
  return x.dim() == 0 ? total : total / static_cast<double>(x.size(0));
}

}  // namespace kiln
