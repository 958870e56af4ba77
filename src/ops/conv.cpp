// conv2d: checks, output shape, the kernels for forward and both gradients, and autograd.
#include <algorithm>
#include <atomic>
#include <climits>

#include "ops/autocast_policy.h"
#include "ops/op_util.h"

namespace kiln {
namespace {

using autograd::SavedTensor;
using ops::Op;

std::atomic<int64_t> g_split_elements{INT32_MAX};

// cuDNN takes sizes as int: a convolution whose input or output has more elements than that (an
// H200 holds VGG-16's first activations at batch 1024 in bfloat16) runs over chunks of the batch
// that fit, as PyTorch splits it, rather than on the CPU. f(first, count) for each chunk; one
// call for the whole batch where it fits.
template <class F>
void for_batch_chunks(const Tensor& x, int64_t out_numel, F&& f) {
  const int64_t n = x.size(0), limit = g_split_elements.load(std::memory_order_relaxed);
  if ((x.numel() <= limit && out_numel <= limit) || n <= 1) return f(int64_t{0}, n);
  const int64_t per_sample = std::max(x.numel(), out_numel) / n;
  const int64_t chunk = std::max<int64_t>(1, limit / std::max<int64_t>(per_sample, 1));
  for (int64_t s = 0; s < n; s += chunk) f(s, std::min(chunk, n - s));
}

// An input's gradient for g: laid out like x where x is dense (channels-last stays so).
Tensor empty_input_grad(const Tensor& x, const Tensor& g) { return make_empty_like(x, x.shape(), g.dtype(), g.device()); }

// The input's gradient for g into gx, whose shape is the convolution's input's.
Tensor conv_backward_input(const Tensor& g, const Tensor& w, const Tensor& gx, const backend::ConvAttrs& a) {
  if (gx.numel() == 0) return gx;
  for_batch_chunks(gx, g.numel(), [&](int64_t s, int64_t c) {
    Tensor part = c == gx.size(0) ? gx : gx.narrow(0, s, c);
    backend::run(Op::Conv2dBackwardInput, g.device(), std::initializer_list<Tensor>{c == gx.size(0) ? g : g.narrow(0, s, c), w},
                 std::span<Tensor>(&part, 1), &a);
  });
  return gx;
}

// The weight's gradient into outs[0] (and the bias's into outs[1]): chunks of the batch add up.
void conv_backward_weight(const Tensor& g, const Tensor& x, std::vector<Tensor>& outs, const backend::ConvAttrs& a) {
  bool first = true;
  for_batch_chunks(x, g.numel(), [&](int64_t s, int64_t c) {
    const bool whole = c == x.size(0);
    std::vector<Tensor> part;
    for (const Tensor& o : outs) part.push_back(first ? o : make_empty_like(o, o.shape(), o.dtype(), o.device()));
    backend::run(Op::Conv2dBackwardWeight, g.device(),
                 std::initializer_list<Tensor>{whole ? g : g.narrow(0, s, c), whole ? x : x.narrow(0, s, c)},
                 std::span<Tensor>(part), &a);
    if (!first)
      for (size_t i = 0; i < outs.size(); ++i) outs[i].add_(part[i]);
    first = false;
  });
}

// conv2d with the attributes of another (no bias).
Tensor conv_like(const Tensor& x, const Tensor& w, const backend::ConvAttrs& a) {
  return conv2d(x, w, {}, {a.stride[0], a.stride[1]}, {a.padding[0], a.padding[1]}, {a.dilation[0], a.dilation[1]},
                a.groups);
}

// conv2d's two gradients as differentiable ops, for backward passes with create_graph. Each is
// bilinear and its derivatives are the other convolutions: for y = conv(x, w) and gy,
//   gx = input_grad(gy, w):  in gy, gg -> conv(gg, w);  in w, gg -> weight_grad(gy, gg)
//   gw = weight_grad(gy, x): in gy, gg -> conv(x, gg);  in x, gg -> input_grad(gy, gg)
// (<gg, input_grad(gy, w)> = <gy, conv(gg, w)> = <weight_grad(gy, gg), w>, and likewise for gw).
Tensor conv_weight_grad(const Tensor& gy, const Tensor& x, const Tensor& w_like, const backend::ConvAttrs& a);

// A bias's gradient: g [N, C, H, W] summed over N, H and W, in float32 (float64 for float64).
Tensor bias_grad(const Tensor& g) {
  return sum(g, {0, 2, 3}, false, g.dtype() == kFloat64 ? kFloat64 : kFloat32).to(g.dtype());
}

// gx: where the result goes (empty, the convolution's input's shape). conv_transpose2d is this
// op plus a bias [C] (node: its name in the graph).
Tensor conv_input_grad(const Tensor& gy, const Tensor& w, const Tensor& gx_out, const backend::ConvAttrs& a,
                       const char* node_name = "ConvolutionBackwardInputBackward", const Tensor& bias = {}) {
  Tensor gx = conv_backward_input(gy.detach(), w.detach(), gx_out, a);
  if (bias.defined()) {
    NoGradGuard ng;
    gx.add_(bias.detach().view({1, bias.size(0), 1, 1}));
  }
  if (autograd::needs_grad({&gy, &w, &bias}))
    autograd::record(node_name, {&gy, &w, &bias}, gx,
                     [sg = SavedTensor(gy), sw = SavedTensor(w), a, node = node_name,
                      mg = autograd::InputMeta(gy), mw = autograd::InputMeta(w),
                      need_b = bias.defined() && bias.requires_grad()](const Tensor& gg) -> TensorList {
                       const Tensor g = sg.get(node), wv = sw.get(node);
                       const Tensor ggc = gg.contiguous(MemoryFormat::ChannelsLast);
                       return {mg.needs ? mg(conv_like(ggc, wv, a)) : Tensor(),
                               mw.needs ? mw(conv_weight_grad(g, ggc, wv, a)) : Tensor(),
                               need_b ? bias_grad(ggc) : Tensor()};
                     });
  return gx;
}

Tensor conv_weight_grad(const Tensor& gy, const Tensor& x, const Tensor& w_like, const backend::ConvAttrs& a) {
  std::vector<Tensor> outs{make_empty_like(w_like, w_like.shape(), w_like.dtype(), w_like.device())};
  if (x.numel() > 0) conv_backward_weight(gy.detach(), x.detach(), outs, a);
  else outs[0].zero_();
  if (autograd::needs_grad({&gy, &x}))
    autograd::record("ConvolutionBackwardWeightBackward", {&gy, &x}, outs[0],
                     [sg = SavedTensor(gy), sx = SavedTensor(x), a, mg = autograd::InputMeta(gy),
                      mx = autograd::InputMeta(x)](const Tensor& gg) -> TensorList {
                       const char* node = "ConvolutionBackwardWeightBackward";
                       const Tensor g = sg.get(node), xv = sx.get(node);
                       return {mg.needs ? mg(conv_like(xv, gg, a)) : Tensor(),
                               mx.needs ? mx(conv_input_grad(g, gg, empty_input_grad(xv, g), a)) : Tensor()};
                     });
  return outs[0];
}

}  // namespace

namespace ops {
int64_t set_conv_split_elements(int64_t elements) { return g_split_elements.exchange(elements); }
}  // namespace ops

Tensor conv2d(const Tensor& input_in, const Tensor& weight_in, const Tensor& bias_in, const Shape& stride,
              const Shape& padding, const Shape& dilation, int64_t groups) {
  const Tensor input = ops::autocast_lower(input_in), weight = ops::autocast_lower(weight_in),
               bias = ops::autocast_lower(bias_in);
  ops::check_defined(input, "conv2d");
  ops::check_defined(weight, "conv2d");
  KILN_CHECK(input.dim() == 4 || input.dim() == 3, "conv2d",
             "expected a 3-D [C, H, W] or 4-D [N, C, H, W] input, got shape ", input.shape());
  if (input.dim() == 3) return conv2d(input.unsqueeze(0), weight, bias, stride, padding, dilation, groups).squeeze(0);
  KILN_CHECK(weight.dim() == 4, "conv2d", "expected a 4-D weight [C_out, C_in / groups, kH, kW], got shape ",
             weight.shape());
  KILN_CHECK(groups >= 1, "conv2d", "groups must be positive, got ", groups);
  const int64_t n = input.size(0), c_in = input.size(1), h = input.size(2), wd = input.size(3);
  const int64_t c_out = weight.size(0), kh = weight.size(2), kw = weight.size(3);
  KILN_CHECK(c_in == weight.size(1) * groups, "conv2d", "input has ", c_in, " channels but weight ",
             weight.shape(), " with groups=", groups, " expects ", weight.size(1) * groups);
  KILN_CHECK(c_out % groups == 0, "conv2d", "weight has ", c_out, " output channels, not divisible by groups=",
             groups);
  KILN_CHECK(kh > 0 && kw > 0 && c_out > 0, "conv2d", "weight shape ", weight.shape(), " has an empty dim");
  KILN_CHECK(kh <= INT32_MAX && kw <= INT32_MAX, "conv2d", "kernel ", weight.shape(), " is too large");
  KILN_CHECK(input.is_floating_point(), "conv2d", "expected a floating-point input, got ", input.dtype());
  KILN_CHECK(weight.dtype() == input.dtype(), "conv2d", "input is ", input.dtype(), " but weight is ",
             weight.dtype());
  KILN_CHECK(n == 0 || c_in == 0 || (h > 0 && wd > 0), "conv2d",
             "only inputs with zero batch or zero channels may be empty (as PyTorch), got shape ", input.shape());
  if (bias.defined()) {
    KILN_CHECK(bias.dim() == 1 && bias.size(0) == c_out, "conv2d", "expected bias of shape [", c_out, "], got ",
               bias.shape());
    KILN_CHECK(bias.dtype() == input.dtype(), "conv2d", "input is ", input.dtype(), " but bias is ",
               bias.dtype());
  }
  Device dev = ops::common_device({&input, &weight, bias.defined() ? &bias : &input}, "conv2d");
  backend::ConvAttrs a;
  ops::pair_param("conv2d", stride, "stride", a.stride, 1);
  ops::pair_param("conv2d", padding, "padding", a.padding, 0);
  ops::pair_param("conv2d", dilation, "dilation", a.dilation, 1);
  a.groups = groups;
  int64_t out_hw[2];
  const int64_t in_hw[2] = {h, wd}, k[2] = {kh, kw};
  for (int i = 0; i < 2; ++i) {
    const int64_t span = a.dilation[i] * (k[i] - 1) + 1, padded = in_hw[i] + 2 * a.padding[i];
    KILN_CHECK(padded >= span, "conv2d", "kernel ", weight.shape(), " with dilation ", dilation,
               " is larger than the padded input ", input.shape(), " (padding ", padding, ")");
    out_hw[i] = (padded - span) / a.stride[i] + 1;
  }
  const bool grad = autograd::needs_grad({&input, &weight, &bias});
  a.inference = !grad;
  const Shape out_shape{n, c_out, out_hw[0], out_hw[1]};
  Tensor out = make_empty_strided(out_shape, channels_last_strides(out_shape), input.dtype(), dev);
  if (out.numel() > 0) {
    if (input.numel() == 0) {  // no input channels: the bias alone
      NoGradGuard ng;
      out.zero_();
      if (bias.defined()) out.add_(bias.view({1, c_out, 1, 1}));
    } else {
      // The kernels read the bias as a dense vector (oneDNN ignores a bias descriptor's strides).
      const Tensor b = bias.defined() ? bias.detach().contiguous() : Tensor();
      for_batch_chunks(input, out.numel(), [&](int64_t s, int64_t c) {
        const bool whole = c == n;
        const Tensor x = whole ? input : input.narrow(0, s, c);
        Tensor o = whole ? out : out.narrow(0, s, c);
        if (b.defined()) ops::run1(Op::Conv2d, dev, {x, weight, b}, o, &a);
        else ops::run1(Op::Conv2d, dev, {x, weight}, o, &a);
      });
    }
  }
  if (grad) {
    autograd::record("Conv2dBackward", {&input, &weight, &bias}, out,
                     [sx = SavedTensor(input), sw = SavedTensor(weight), a, has_bias = bias.defined(),
                      need_x = input.requires_grad(), need_w = weight.requires_grad(),
                      need_b = bias.defined() && bias.requires_grad()](const Tensor& g_in) -> TensorList {
                       Tensor x = sx.get("Conv2dBackward"), w = sw.get("Conv2dBackward");
                       // Gradients arrive in whatever layout the next op made; the kernels want
                       // them laid out like the output (channels-last).
                       Tensor g = g_in.contiguous(MemoryFormat::ChannelsLast);
                       if (autograd::needs_grad({&g, &x, &w}))  // create_graph
                         return {need_x ? conv_input_grad(g, w, empty_input_grad(x, g), a) : Tensor(),
                                 need_w ? conv_weight_grad(g, x, w, a) : Tensor(),
                                 need_b ? bias_grad(g) : Tensor()};
                       Tensor gx, gw, gb;
                       if (need_x) gx = conv_backward_input(g, w, empty_input_grad(x, g), a);
                       if (need_w) gw = make_empty_like(w, w.shape(), w.dtype(), w.device());  // w's layout
                       if (need_w && x.numel() > 0) {
                         std::vector<Tensor> outs{gw};
                         if (has_bias) outs.push_back(make_empty({w.size(0)}, w.dtype(), w.device()));
                         conv_backward_weight(g, x, outs, a);
                         if (has_bias) gb = outs[1];
                       } else {  // a frozen weight, or no input to weigh: the bias's gradient alone
                         if (need_w) gw.zero_();
                         if (need_b) gb = bias_grad(g);
                       }
                       return {gx, need_w ? gw : Tensor(), need_b ? gb : Tensor()};
                     });
  }
  return out;
}

// The gradient of a convolution's input, as an op: the convolution whose input's gradient this is
// takes an input of the output's size and gives one of x's (x is its output's gradient).
Tensor conv_transpose2d(const Tensor& input_in, const Tensor& weight_in, const Tensor& bias_in, const Shape& stride,
                        const Shape& padding, const Shape& output_padding, int64_t groups, const Shape& dilation) {
  const char* op = "conv_transpose2d";
  const Tensor input = ops::autocast_lower(input_in), weight = ops::autocast_lower(weight_in),
               bias = ops::autocast_lower(bias_in);
  ops::check_defined(input, op);
  ops::check_defined(weight, op);
  KILN_CHECK(input.dim() == 4 || input.dim() == 3, op, "expected a 3-D [C, H, W] or 4-D [N, C, H, W] input, got shape ",
             input.shape());
  if (input.dim() == 3)
    return conv_transpose2d(input.unsqueeze(0), weight, bias, stride, padding, output_padding, groups, dilation)
        .squeeze(0);
  KILN_CHECK(weight.dim() == 4, op, "expected a 4-D weight [C_in, C_out / groups, kH, kW], got shape ",
             weight.shape());
  KILN_CHECK(groups >= 1, op, "groups must be positive, got ", groups);
  const int64_t n = input.size(0), c_in = input.size(1), c_out = weight.size(1) * groups;
  KILN_CHECK(c_in == weight.size(0), op, "input has ", c_in, " channels but weight ", weight.shape(), " expects ",
             weight.size(0));
  KILN_CHECK(c_in % groups == 0, op, "input has ", c_in, " channels, not divisible by groups=", groups);
  KILN_CHECK(weight.size(1) > 0 && weight.size(2) > 0 && weight.size(3) > 0, op, "weight shape ", weight.shape(),
             " has an empty dim");
  KILN_CHECK(weight.size(2) <= INT32_MAX && weight.size(3) <= INT32_MAX, op, "kernel ", weight.shape(),
             " is too large");
  KILN_CHECK(input.is_floating_point(), op, "expected a floating-point input, got ", input.dtype());
  KILN_CHECK(weight.dtype() == input.dtype(), op, "input is ", input.dtype(), " but weight is ", weight.dtype());
  KILN_CHECK(n == 0 || c_in == 0 || (input.size(2) > 0 && input.size(3) > 0), op,
             "only inputs with zero batch or zero channels may be empty (as PyTorch), got shape ", input.shape());
  if (bias.defined()) {
    KILN_CHECK(bias.dim() == 1 && bias.size(0) == c_out, op, "expected bias of shape [", c_out, "], got ",
               bias.shape());
    KILN_CHECK(bias.dtype() == input.dtype(), op, "input is ", input.dtype(), " but bias is ", bias.dtype());
  }
  Device dev = ops::common_device({&input, &weight, bias.defined() ? &bias : &input}, op);
  backend::ConvAttrs a;
  int64_t out_pad[2];
  ops::pair_param(op, stride, "stride", a.stride, 1);
  ops::pair_param(op, padding, "padding", a.padding, 0);
  ops::pair_param(op, output_padding, "output_padding", out_pad, 0);
  ops::pair_param(op, dilation, "dilation", a.dilation, 1);
  a.groups = groups;
  int64_t out_hw[2], extra[2];
  for (int i = 0; i < 2; ++i) {
    KILN_CHECK(out_pad[i] < a.stride[i] || out_pad[i] < a.dilation[i], op, "output_padding ", output_padding,
               " must be smaller than either stride ", stride, " or dilation ", dilation);
    const int64_t span = a.dilation[i] * (weight.size(2 + i) - 1) + 1;
    out_hw[i] = (input.size(2 + i) - 1) * a.stride[i] - 2 * a.padding[i] + span + out_pad[i];
    KILN_CHECK(out_hw[i] > 0, op, "input ", input.shape(), " with kernel ", weight.shape(), ", stride ", stride,
               ", padding ", padding, " and dilation ", dilation, " gives an output of size ", out_hw[i]);
    // Where output_padding is at least the stride (allowed where it is less than the dilation),
    // the convolution has more outputs than x has rows: x is padded with zeros to its size.
    extra[i] = (out_hw[i] + 2 * a.padding[i] - span) / a.stride[i] + 1 - input.size(2 + i);
  }
  const bool grad = autograd::needs_grad({&input, &weight, &bias});
  a.inference = !grad;
  const Shape out_shape{n, c_out, out_hw[0], out_hw[1]};
  Tensor out = make_empty_strided(out_shape, channels_last_strides(out_shape), input.dtype(), dev);
  if (input.numel() == 0 || out.numel() == 0) {  // an empty batch, or no input channels: the bias alone
    {
      NoGradGuard ng;
      out.zero_();
      if (bias.defined()) out.add_(bias.detach().view({1, c_out, 1, 1}));
    }
    if (grad)
      autograd::record("ConvTranspose2dBackward", {&input, &weight, &bias}, out,
                       [xs = input.shape(), ws = weight.shape(), need_b = bias.defined()](const Tensor& g) -> TensorList {
                         return {zeros(xs, g.options()), zeros(ws, g.options()), need_b ? bias_grad(g) : Tensor()};
                       });
    return out;
  }
  const Tensor x = (extra[0] > 0 || extra[1] > 0 ? pad(input, {0, extra[1], 0, extra[0]}) : input)
                       .contiguous(MemoryFormat::ChannelsLast);
  return conv_input_grad(x, weight, out, a, "ConvTranspose2dBackward", bias);
}

}  // namespace kiln
