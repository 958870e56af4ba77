// max_pool2d, avg_pool2d and adaptive_avg_pool2d: checks, PyTorch's output sizes, autograd.
#include "ops/op_util.h"

namespace kiln {
namespace {

using autograd::SavedTensor;
using backend::PoolAttrs;
using ops::Op;

// PyTorch's pooling_output_shape: with ceil_mode the last window must start inside the input
// or its left padding.
int64_t pooled_size(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil_mode) {
  const int64_t span = d * (k - 1) + 1, num = in + 2 * p - span + (ceil_mode ? s - 1 : 0);
  int64_t out = (num >= 0 ? num / s : -((-num + s - 1) / s)) + 1;
  if (ceil_mode && (out - 1) * s >= in + p) --out;
  return out;
}

// A 3-D [C, H, W] input is pooled as a batch of one, and every input channels-last (a copy, whose
// backward is the gradient's copy back, when it is not): the kernels read all channels of a
// window position at once. Input gradients get the canonical channels-last strides: x may have
// others on its size-1 dims.
Tensor check_input(const Tensor& x, const char* op) {
  ops::check_defined(x, op);
  KILN_CHECK(x.dim() == 3 || x.dim() == 4, op, "expected a 3-D [C, H, W] or 4-D [N, C, H, W] input, got shape ",
             x.shape());
  KILN_CHECK(x.is_floating_point(), op, "expected a floating-point input, got ", x.dtype());
  Tensor x4 = x.dim() == 3 ? x.unsqueeze(0) : x;
  KILN_CHECK(x4.size(1) > 0 && x4.size(2) > 0 && x4.size(3) > 0, op, "expected non-empty C, H and W, got shape ",
             x.shape());
  return x4.contiguous(MemoryFormat::ChannelsLast);
}

Tensor empty_pooled(const Tensor& x, int64_t oh, int64_t ow, ScalarType dtype) {
  const Shape s{x.size(0), x.size(1), oh, ow};
  return make_empty_strided(s, channels_last_strides(s), dtype, x.device());
}

Tensor finish(const Tensor& x_in, const Tensor& out) { return x_in.dim() == 3 ? out.squeeze(0) : out; }

// Sets kernel, stride and padding (stride defaults to the kernel) and the output size.
void window_params(const char* op, const Tensor& x, const Shape& kernel_size, const Shape& stride,
                   const Shape& padding, PoolAttrs& a, bool ceil_mode, int64_t out_hw[2]) {
  ops::pair_param(op, kernel_size, "kernel_size", a.kernel, 1);
  ops::pair_param(op, stride.empty() ? kernel_size : stride, "stride", a.stride, 1);
  ops::pair_param(op, padding, "padding", a.padding, 0);
  for (int i = 0; i < 2; ++i) {
    // PyTorch's rule, on the kernel size without dilation (a window wholly in the padding would
    // have no input element)
    KILN_CHECK(a.padding[i] <= a.kernel[i] / 2, op, "padding ", padding, " must be at most half of kernel_size ",
               kernel_size);
    out_hw[i] = pooled_size(x.size(2 + i), a.kernel[i], a.stride[i], a.padding[i], a.dilation[i], ceil_mode);
    KILN_CHECK(out_hw[i] > 0, op, "input ", x.shape(), " is too small for kernel_size ", kernel_size,
               " (output would be empty)");
  }
}

Tensor avg_pool(const Tensor& x_in, const Tensor& x, PoolAttrs a, int64_t oh, int64_t ow, const char* node);

// Avg pooling's input gradient (of shape xs) from the output's: its kernel, and, under
// create_graph, a node whose own derivative is the pooling itself (the gradient is linear in g).
Tensor avg_pool_backward(const Tensor& g, PoolAttrs a, const Shape& xs, const char* node) {
  Tensor gx = make_empty_strided(xs, channels_last_strides(xs), g.dtype(), g.device());
  if (gx.numel() > 0) ops::run1(Op::AvgPool2dBackward, g.device(), {g}, gx, &a);
  if (autograd::needs_grad({&g}))
    autograd::record("AvgPool2DBackwardBackward", {&g}, gx,
                     [a, node, oh = g.size(2), ow = g.size(3)](const Tensor& gg) -> TensorList {
                       const Tensor ggc = gg.contiguous(MemoryFormat::ChannelsLast);
                       return {avg_pool(ggc, ggc, a, oh, ow, node)};
                     });
  return gx;
}

// Avg-style pooling (plain or adaptive): forward kernel, and a backward node using the
// backward kernel with the same attributes.
Tensor avg_pool(const Tensor& x_in, const Tensor& x, PoolAttrs a, int64_t oh, int64_t ow, const char* node) {
  Tensor out = empty_pooled(x, oh, ow, x.dtype());
  if (out.numel() > 0) ops::run1(Op::AvgPool2d, x.device(), {x}, out, &a);
  if (autograd::needs_grad({&x}))
    autograd::record(node, {&x}, out, [a, node, xs = x.shape()](const Tensor& g) -> TensorList {
      return {avg_pool_backward(g, a, xs, node)};
    });
  return finish(x_in, out);
}

}  // namespace

Tensor max_pool2d(const Tensor& x_in, const Shape& kernel_size, const Shape& stride, const Shape& padding,
                  const Shape& dilation, bool ceil_mode) {
  Tensor x = check_input(x_in, "max_pool2d");
  PoolAttrs a;
  a.kind = PoolAttrs::Max;
  ops::pair_param("max_pool2d", dilation, "dilation", a.dilation, 1);
  int64_t o[2];
  window_params("max_pool2d", x, kernel_size, stride, padding, a, ceil_mode, o);
  Tensor out = empty_pooled(x, o[0], o[1], x.dtype());
  // The indices of the maxima only for a backward pass (evaluation writes none, as PyTorch's).
  const bool grad = autograd::needs_grad({&x});
  Tensor idx = grad ? empty_pooled(x, o[0], o[1], kInt64) : Tensor();
  if (out.numel() > 0) {
    std::vector<Tensor> outs{out};
    if (grad) outs.push_back(idx);
    backend::run(Op::MaxPool2d, x.device(), std::initializer_list<Tensor>{x}, std::span<Tensor>(outs), &a);
  }
  if (grad)
    autograd::record("MaxPool2DWithIndicesBackward", {&x}, out,
                     [a, si = autograd::SavedTensor(idx), xs = x.shape()](const Tensor& g) -> TensorList {
                       if (autograd::needs_grad({&g})) {  // create_graph: scatter_add at the maxima (h * W + w)
                         const Tensor idx = si.get("MaxPool2DWithIndicesBackward");
                         const Tensor flat = scatter_add(zeros({xs[0], xs[1], xs[2] * xs[3]}, g.options()), 2,
                                                         idx.reshape({xs[0], xs[1], -1}), g.reshape({xs[0], xs[1], -1}));
                         return {flat.view(xs).contiguous(MemoryFormat::ChannelsLast)};
                       }
                       Tensor gx = make_empty_strided(xs, channels_last_strides(xs), g.dtype(), g.device());
                       if (gx.numel() > 0)
                         ops::run1(Op::MaxPool2dBackward, g.device(), {g, si.get("MaxPool2DWithIndicesBackward")}, gx, &a);
                       return {gx};
                     });
  return finish(x_in, out);
}

Tensor avg_pool2d(const Tensor& x_in, const Shape& kernel_size, const Shape& stride, const Shape& padding,
                  bool ceil_mode, bool count_include_pad) {
  Tensor x = check_input(x_in, "avg_pool2d");
  PoolAttrs a;
  a.kind = PoolAttrs::Avg;
  a.count_include_pad = count_include_pad;
  int64_t o[2];
  window_params("avg_pool2d", x, kernel_size, stride, padding, a, ceil_mode, o);
  return avg_pool(x_in, x, a, o[0], o[1], "AvgPool2DBackward");
}

Tensor adaptive_avg_pool2d(const Tensor& x_in, const Shape& output_size) {
  Tensor x = check_input(x_in, "adaptive_avg_pool2d");
  KILN_CHECK(output_size.size() == 1 || output_size.size() == 2, "adaptive_avg_pool2d",
             "output_size must have 1 or 2 values, got ", output_size);
  const int64_t oh = output_size[0], ow = output_size.size() == 2 ? output_size[1] : output_size[0];
  KILN_CHECK(oh > 0 && ow > 0, "adaptive_avg_pool2d", "output_size must be positive, got ", output_size);
  PoolAttrs a;
  a.kind = PoolAttrs::AdaptiveAvg;
  return avg_pool(x_in, x, a, oh, ow, "AdaptiveAvgPool2DBackward");
}

}  // namespace kiln
