// Device checks, type promotion and reduction geometry shared by the ops.
#include "ops/op_util.h"

#include <cmath>
#include <optional>

namespace kiln::ops {

Device common_device(std::initializer_list<const Tensor*> ts, const char* op) {
  std::optional<Device> dev;
  for (const Tensor* t : ts) {
    check_defined(*t, op);
    if (t->dim() == 0 && t->device().is_cpu()) continue;
    if (!dev) dev = t->device();
    else KILN_CHECK(*dev == t->device(), op, "expected all tensors on one device, got ", dev->str(),
                    " and ", t->device().str());
  }
  return dev.value_or(Device::cpu());
}

Tensor wrap_scalar(Scalar s, ScalarType dtype) {
  Tensor t = make_empty({}, dtype, Device::cpu());
  backend::ScalarAttrs attrs{s};
  run1(Op::Fill, Device::cpu(), {}, t, &attrs);
  t.impl()->wrapped_number = true;
  return t;
}


namespace {
enum Category { kCatBool, kCatInt, kCatFloat };
Category category(ScalarType t) {
  return t == kBool ? kCatBool : is_floating_point(t) ? kCatFloat : kCatInt;
}
// PyTorch's combine_categories: the higher-priority tier wins unless the lower one is of a
// higher category.
std::optional<ScalarType> combine(std::optional<ScalarType> higher, std::optional<ScalarType> lower) {
  if (!higher) return lower;
  if (!lower) return higher;
  if (category(*higher) == kCatFloat) return higher;
  if (*higher == kBool || category(*lower) == kCatFloat) return promote_types(*higher, *lower);
  return higher;
}
void update(std::optional<ScalarType>& tier, ScalarType t) { tier = tier ? promote_types(*tier, t) : t; }
}  // namespace

ScalarType result_type_of(std::initializer_list<const Tensor*> ts) {
  std::optional<ScalarType> dimmed, zero_dim, wrapped;
  for (const Tensor* t : ts) {
    if (t->impl()->wrapped_number) update(wrapped, is_floating_point(t->dtype()) ? kDefaultFloat : t->dtype());
    else if (t->dim() == 0) update(zero_dim, t->dtype());
    else update(dimmed, t->dtype());
  }
  return combine(dimmed, combine(zero_dim, wrapped)).value_or(kDefaultFloat);
}

ScalarType result_type_of(const Tensor& t, Scalar s) {
  // The number is alone in the lowest tier; t is above it (dimensioned or 0-d alike) unless
  // it is a wrapped number too.
  const ScalarType number = s.natural_dtype();
  if (t.impl()->wrapped_number) return promote_types(is_floating_point(t.dtype()) ? kDefaultFloat : t.dtype(), number);
  return *combine(t.dtype(), number);
}

bool exact_in(double v, ScalarType t) {
  if (v != v) return true;
  const float f = static_cast<float>(v);
  if (t == kFloat16) return static_cast<double>(static_cast<float>(Half(f))) == v;
  if (t == kBFloat16) return static_cast<double>(static_cast<float>(BFloat16(f))) == v;
  return true;
}

void check_fill_value(Scalar v, ScalarType t, const char* op) {
  if (t == kBool || t == kFloat64 || v.is_bool()) return;
  const double d = v.to_double();
  if (is_floating_point(t)) {  // the largest finite value; inf and NaN fill as they are
    const double max = t == kFloat32 ? 3.4028234663852886e38 : t == kFloat16 ? 65504.0 : 3.3895313892515355e38;
    KILN_CHECK(!(std::isfinite(d) && std::abs(d) > max), op, "value ", d, " cannot be converted to ", t,
               " without overflow");
    return;
  }
  // Integers: PyTorch's ranges (an integer into uint8 may be -255..255, wrapping as in C; a float
  // may not be negative).
  const double lo = t == kUInt8 ? (v.is_integral() ? -255.0 : 0.0) : t == kInt32 ? -2147483648.0 : -9223372036854775808.0;
  const double hi = t == kUInt8 ? 255.0 : t == kInt32 ? 2147483647.0 : 9223372036854775807.0;
  const bool fits = v.is_integral() ? (t == kInt64 || (v.to_int() >= static_cast<int64_t>(lo) &&
                                                        v.to_int() <= static_cast<int64_t>(hi)))
                                    : std::isfinite(d) && (t == kUInt8 ? d >= 0 : std::trunc(d) >= lo) &&
                                          std::trunc(d) < hi + 1;
  KILN_CHECK(fits, op, "value ", d, " cannot be converted to ", t, " without overflow");
}

Tensor wrap_for(const Tensor& t, Scalar s) {
  const ScalarType rt = result_type_of(t, s);
  // A number with no exact 16-bit value stays float32 (a wrapped number's dtype does not change
  // the result's): mul and div compute with it there, as PyTorch's opmath does (binary.cpp);
  // the other ops round it to the result's dtype, as before and as PyTorch.
  if ((rt == kFloat16 || rt == kBFloat16) && !s.is_bool() && !exact_in(s.to_double(), rt))
    return wrap_scalar(s, kFloat32);
  return wrap_scalar(s, rt);
}

namespace {
// The node recording a backward helper under create_graph, and f'' of the activation in terms of
// what its backward saved (the output y for tanh, sigmoid and relu; the input x for the others):
// backward_helper(op, g, s) = g * f'(s), so its gradient in s is gg * g * d f'(s) / ds.
const char* helper_node(Op op) {
  switch (op) {
    case Op::TanhBackward: return "TanhBackwardBackward";
    case Op::SigmoidBackward: return "SigmoidBackwardBackward";
    case Op::ReluBackward: return "ReluBackwardBackward";
    case Op::GeluErfBackward: return "GeluBackwardBackward";
    case Op::GeluTanhBackward: return "GeluBackwardBackward";
    case Op::SiluBackward: return "SiluBackwardBackward";
    default: KILN_FAIL("backward", "no second derivative for backward kernel ", static_cast<int>(op));
  }
}

Tensor helper_derivative(Op op, const Tensor& s) {
  switch (op) {
    case Op::TanhBackward: return s * -2.0;              // f' = 1 - y^2, in y
    case Op::SigmoidBackward: return 1.0 - s * 2.0;      // f' = y (1 - y), in y
    case Op::ReluBackward: return Tensor();              // f' = [y > 0]: 0 in y
    case Op::GeluErfBackward: {                          // f'' = phi(x) (2 - x^2)
      const double inv_sqrt_2pi = 0.3989422804014327;
      return exp(s * s * -0.5) * inv_sqrt_2pi * (2.0 - s * s);
    }
    case Op::GeluTanhBackward: {  // u = k (x + c x^3), t = tanh u: f'' = (1 - t^2)(u' - x t u'^2 + x u'' / 2)
      const double k = 0.7978845608028654, c = 0.044715;
      const Tensor t = tanh((s + s * s * s * c) * k), du = (s * s * (3 * c) + 1.0) * k, ddu = s * (6 * c * k);
      return (1.0 - t * t) * (du - s * t * du * du + s * ddu * 0.5);
    }
    case Op::SiluBackward: {  // f'' = sig (1 - sig) (2 + x (1 - 2 sig))
      const Tensor sg = sigmoid(s);
      return sg * (1.0 - sg) * (2.0 + s * (1.0 - sg * 2.0));
    }
    default: return Tensor();
  }
}
}  // namespace

std::vector<Tensor> recomputed_gradients(const std::function<Tensor(const std::vector<Tensor>&)>& forward,
                                         const std::vector<Tensor>& inputs, const Tensor& g) {
  std::vector<Tensor> wrt, out(inputs.size()), args = inputs;
  std::vector<size_t> at;
  AutoGradMode on(true);
  // Each input through an alias of its own (a view, recorded): the gradients are the op's partial
  // derivatives in each argument, also where one input is another (attention of x, x, x) or
  // depends on it (a batch norm's input made with its own weight), which the inputs' own total
  // derivatives would count twice.
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].defined() && inputs[i].requires_grad()) {
      args[i] = inputs[i].view(inputs[i].shape());
      wrt.push_back(args[i]);
      at.push_back(i);
    }
  if (wrt.empty()) return out;
  const std::vector<Tensor> grads =
      autograd::grad({forward(args)}, wrt, {g}, false, /*allow_unused=*/true, /*create_graph=*/true);
  for (size_t k = 0; k < at.size(); ++k) out[at[k]] = grads[k];
  return out;
}

Tensor backward_helper(Op op, const Tensor& g, const Tensor& saved) {
  Tensor gc = cast(g, saved.dtype());
  Tensor out =
      make_empty_like(saved, broadcast_shapes(gc.shape(), saved.shape(), "backward"), saved.dtype(), saved.device());
  run1(op, saved.device(), {gc, saved}, out);
  if (autograd::needs_grad({&gc, &saved})) {  // a backward pass with create_graph
    const char* node = helper_node(op);
    autograd::record(node, {&gc, &saved}, out,
                     [op, node, sg = autograd::SavedTensor(gc), ss = autograd::SavedTensor(saved),
                      gm = autograd::InputMeta(gc), sm = autograd::InputMeta(saved)](const Tensor& gg) -> TensorList {
                       const Tensor g = sg.get(node), s = ss.get(node);
                       const Tensor d = sm.needs ? helper_derivative(op, s) : Tensor();
                       return {gm(backward_helper(op, gg, s)), d.defined() ? sm(gg * g * d) : Tensor()};
                     });
  }
  return out;
}

ReduceDims reduce_dims(const Tensor& x, const Shape& dims, bool keepdim, const char* op) {
  ReduceDims r;
  const int64_t rank = x.dim();
  KILN_CHECK(rank <= kMaxDims, op, "tensors of rank ", rank, " exceed the limit of ", kMaxDims, " dims");
  if (dims.empty()) {
    r.mask = rank == 64 ? ~uint64_t{0} : (uint64_t{1} << rank) - 1;
  } else {
    for (int64_t d : dims) {
      int64_t w = wrap_dim(d, rank, op);
      if (rank == 0) continue;
      KILN_CHECK(!(r.mask >> w & 1), op, "dim ", w, " appears more than once in ", dims);
      r.mask |= uint64_t{1} << w;
    }
  }
  for (int64_t d = 0; d < rank; ++d) {
    bool red = r.mask >> d & 1;
    r.keep_shape.push_back(red ? 1 : x.shape()[d]);
    if (red) r.count *= x.shape()[d];
    if (!red || keepdim) r.out_shape.push_back(red ? 1 : x.shape()[d]);
  }
  return r;
}

void run_as(Op op, std::span<const Tensor> in, Tensor& out, ScalarType kt, const void* attrs) {
  Tensor target = out.dtype() == kt ? out : make_empty(out.shape(), kt, out.device());
  backend::run(op, out.device(), in, std::span<Tensor>(&target, 1), attrs);
  if (!target.is_same(out)) run1(Op::Copy, out.device(), {target}, out);
}

void check_result_fits(const char* op, const Tensor& out, Device dev, ScalarType rt, const Shape& shape,
                       const char* what) {
  KILN_CHECK(out.device() == dev, op, "cannot write a ", dev.str(), " result into a ", out.device().str(), " tensor");
  KILN_CHECK((!is_floating_point(rt) || out.is_floating_point()) && (rt == kBool || out.dtype() != kBool), op,
             "result type ", rt, " cannot be written into a tensor of type ", out.dtype());
  KILN_CHECK(shape == out.shape(), op, "the result of shape ", shape, " does not fit the ", what, " of shape ",
             out.shape());
}

}  // namespace kiln::ops

namespace kiln {
ScalarType result_type(const Tensor& a, const Tensor& b) { return ops::result_type_of({&a, &b}); }
ScalarType result_type(const Tensor& a, Scalar b) { return ops::result_type_of(a, b); }
}  // namespace kiln
