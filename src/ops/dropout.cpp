// dropout: one kernel draws the Philox keep-mask (bool, kept for backward) and scales the kept
// elements by 1/(1-p); backward is one kernel too (PyTorch's fused dropout).
#include "kiln/random.h"
#include "ops/op_util.h"

namespace kiln {

using autograd::SavedTensor;
using backend::Op;

namespace {

// grad_x = grad_y * scale where kept, in grad_y's dtype, row-major.
Tensor dropout_backward(const Tensor& g, const Tensor& keep, const backend::DropoutAttrs& attrs) {
  if (autograd::needs_grad({&g})) return where(keep, g * (1.0 / (1.0 - attrs.p)), 0);  // create_graph
  Tensor out = make_empty(g.shape(), g.dtype(), g.device());
  ops::run1(Op::DropoutBackward, g.device(), {g.contiguous(), keep}, out, &attrs);
  return out;
}

}  // namespace

Tensor dropout(const Tensor& x, double p, bool training) {
  ops::check_defined(x, "dropout");
  KILN_CHECK(p >= 0.0 && p <= 1.0, "dropout", "probability must be in [0, 1], got ", p);
  KILN_CHECK(x.is_floating_point(), "dropout", "expects a floating-point tensor, got ", x.dtype());
  // As in PyTorch: the input itself (no copy, no random numbers drawn).
  if (!training || p == 0.0 || x.numel() == 0) return x;
  // As in PyTorch, x * 0: zeros with a zero gradient (and NaN where x is inf or NaN).
  if (p == 1.0) return mul(x, 0);
  // The generator moves on as rand(x.shape()) would move it.
  return ops::dropout_with(x, p, detail::reserve_counters((static_cast<uint64_t>(x.numel()) + 3) / 4));
}

Tensor ops::dropout_with(const Tensor& x, double p, const GeneratorState& st) {
  // Element i in row-major order keeps when Philox word i of the counters from `st` says so
  // (dropout_math.h: float32 uniform >= p, 24 bits whatever x's dtype): the mask depends only on
  // the generator state and the shape, so the same seed gives the same mask on every device.
  const Device dev = x.device();
  const backend::DropoutAttrs attrs{st.seed, st.offset, p};
  Tensor y = make_empty(x.shape(), x.dtype(), dev), keep = make_empty(x.shape(), kBool, dev);
  {
    const Tensor in[1] = {x.contiguous()};
    Tensor outs[2] = {y, keep};
    backend::run(Op::Dropout, dev, in, outs, &attrs);
  }
  if (!x.is_contiguous()) {  // a dense layout (channels-last) is kept, as PyTorch keeps it
    Tensor like = make_empty_like(x, x.shape(), x.dtype(), dev);
    if (!like.is_contiguous()) {
      NoGradGuard ng;
      y = like.copy_(y);
    }
  }
  if (autograd::needs_grad({&x}))
    autograd::record("DropoutBackward", {&x}, y, [sk = SavedTensor(keep), attrs](const Tensor& g) -> TensorList {
      // The mask is kept as bool (one byte an element), not as a float copy.
      return {dropout_backward(g, sk.get("DropoutBackward"), attrs)};
    });
  return y;
}

}  // namespace kiln
