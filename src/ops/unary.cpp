// One-operand elementwise ops, clamp, where and masked_fill, with their gradients and in-place forms.
#include <numbers>

#include "ops/autocast_policy.h"
#include "ops/op_util.h"

namespace kiln {
namespace {

using autograd::SavedTensor;
using ops::Op;

using ops::backward_helper;

enum class Domain { Same, Float, Bool };  // the result dtype: input's, float, or bool

struct UnaryDef {
  Op op;
  const char* name;
  const char* node;  // the autograd node's name, "<Op>Backward" like the other ops'
  Domain domain;
  // gradient from (g, x, out); nullptr when not differentiable
  Tensor (*grad)(const Tensor& g, const Tensor& x, const Tensor& out);
  bool saves_x, saves_out;
};

// The dtypes an op is defined for: no bool for arithmetic, no floats for bitwise_not.
void check_dtype(const UnaryDef& d, const Tensor& x, const char* name) {
  const bool numeric = d.op == Op::Neg || d.op == Op::Abs || d.op == Op::Sign || d.op == Op::Floor ||
                       d.op == Op::Ceil || d.op == Op::Round || d.op == Op::Trunc;
  KILN_CHECK(!(x.dtype() == kBool && numeric), name, "is not defined for bool tensors");
  KILN_CHECK(!(d.op == Op::BitwiseNot && x.is_floating_point()), name, "expects integer or bool tensors, got ",
             x.dtype());
}

Tensor unary(const UnaryDef& d, const Tensor& x) {
  ops::check_defined(x, d.name);
  check_dtype(d, x, d.name);
  ScalarType t = d.domain == Domain::Float ? ops::float_type(x.dtype()) : x.dtype();
  Tensor in = ops::cast(x, t);
  Tensor out = make_empty_like(x, x.shape(), d.domain == Domain::Bool ? kBool : t, x.device());
  ops::run1(d.op, x.device(), {in}, out);
  if (d.grad && autograd::needs_grad({&x})) {
    autograd::record(d.node, {&x}, out,
                     [&d, sx = SavedTensor(d.saves_x ? x : Tensor()), so = SavedTensor(d.saves_out ? out : Tensor())](
                         const Tensor& g) -> TensorList {
                       return {d.grad(g, sx.get(d.node), so.get(d.node))};
                     });
  }
  return out;
}

// `name` is the in-place op's own name ("exp_"), for messages.
Tensor& unary_(const UnaryDef& d, Tensor& self, const char* name) {
  ops::check_defined(self, name);
  check_dtype(d, self, name);
  KILN_CHECK(d.domain != Domain::Float || self.is_floating_point(), name,
             "the result is floating point and cannot be written into a ", self.dtype(), " tensor");
  const bool rec = d.grad && autograd::needs_grad({&self});
  autograd::check_inplace(self, name);
  Tensor before = rec && d.saves_x ? self.clone() : self;
  ops::run1(d.op, self.device(), {self}, self);
  ops::bump_version(self);
  if (rec) {
    autograd::record_inplace(d.node, self, {&before},
                     [&d, sx = SavedTensor(d.saves_x ? before : Tensor()), so = SavedTensor(d.saves_out ? self : Tensor())](
                         const Tensor& g) -> TensorList { return {d.grad(g, sx.get(d.node), so.get(d.node))}; });
  }
  return self;
}

using T = const Tensor&;
const UnaryDef kNeg{Op::Neg, "neg", "NegBackward", Domain::Same, [](T g, T, T) { return neg(g); }, false, false};
const UnaryDef kAbs{Op::Abs, "abs", "AbsBackward", Domain::Same, [](T g, T x, T) { return g * sign(x); }, true, false};
const UnaryDef kSign{Op::Sign, "sign", "SignBackward", Domain::Same, [](T g, T, T) { return zeros_like(g); }, false, false};
const UnaryDef kExp{Op::Exp, "exp", "ExpBackward", Domain::Float, [](T g, T, T y) { return g * y; }, false, true};
const UnaryDef kLog{Op::Log, "log", "LogBackward", Domain::Float, [](T g, T x, T) { return g / x; }, true, false};
const UnaryDef kLog1p{Op::Log1p, "log1p", "Log1pBackward", Domain::Float, [](T g, T x, T) { return g / (x + 1); }, true, false};
const UnaryDef kExpm1{Op::Expm1, "expm1", "Expm1Backward", Domain::Float, [](T g, T, T y) { return g * (y + 1); }, false, true};
const UnaryDef kSqrt{Op::Sqrt, "sqrt", "SqrtBackward", Domain::Float, [](T g, T, T y) { return g / (y * 2); }, false, true};
const UnaryDef kRsqrt{Op::Rsqrt, "rsqrt", "RsqrtBackward", Domain::Float, [](T g, T x, T y) { return g * y * -0.5 / x; }, true, true};
const UnaryDef kSquare{Op::Square, "square", "SquareBackward", Domain::Same, [](T g, T x, T) { return g * x * 2; }, true, false};
const UnaryDef kReciprocal{Op::Reciprocal, "reciprocal", "ReciprocalBackward", Domain::Float, [](T g, T, T y) { return neg(g) * y * y; }, false, true};
const UnaryDef kTanh{Op::Tanh, "tanh", "TanhBackward", Domain::Float, [](T g, T, T y) { return backward_helper(Op::TanhBackward, g, y); }, false, true};
const UnaryDef kSigmoid{Op::Sigmoid, "sigmoid", "SigmoidBackward", Domain::Float, [](T g, T, T y) { return backward_helper(Op::SigmoidBackward, g, y); }, false, true};
const UnaryDef kRelu{Op::Relu, "relu", "ReluBackward", Domain::Same, [](T g, T, T y) { return backward_helper(Op::ReluBackward, g, y); }, false, true};
const UnaryDef kGeluErf{Op::GeluErf, "gelu", "GeluBackward", Domain::Float, [](T g, T x, T) { return backward_helper(Op::GeluErfBackward, g, x); }, true, false};
const UnaryDef kGeluTanh{Op::GeluTanh, "gelu", "GeluBackward", Domain::Float, [](T g, T x, T) { return backward_helper(Op::GeluTanhBackward, g, x); }, true, false};
const UnaryDef kSilu{Op::Silu, "silu", "SiluBackward", Domain::Float, [](T g, T x, T) { return backward_helper(Op::SiluBackward, g, x); }, true, false};
const UnaryDef kSin{Op::Sin, "sin", "SinBackward", Domain::Float, [](T g, T x, T) { return g * cos(x); }, true, false};
const UnaryDef kCos{Op::Cos, "cos", "CosBackward", Domain::Float, [](T g, T x, T) { return neg(g) * sin(x); }, true, false};
const UnaryDef kLogicalNot{Op::LogicalNot, "logical_not", "LogicalNotBackward", Domain::Bool, nullptr, false, false};
// d/dx erf(x) = 2 / sqrt(pi) * exp(-x^2); log2, log10, exp2 through ln 2 and ln 10.
const UnaryDef kErf{Op::Erf, "erf", "ErfBackward", Domain::Float, [](T g, T x, T) { return g * exp(neg(square(x))) * (2 * std::numbers::inv_sqrtpi); }, true, false};
const UnaryDef kLog2{Op::Log2, "log2", "Log2Backward", Domain::Float, [](T g, T x, T) { return g / (x * std::numbers::ln2); }, true, false};
const UnaryDef kLog10{Op::Log10, "log10", "Log10Backward", Domain::Float, [](T g, T x, T) { return g / (x * std::numbers::ln10); }, true, false};
const UnaryDef kExp2{Op::Exp2, "exp2", "Exp2Backward", Domain::Float, [](T g, T, T y) { return g * y * std::numbers::ln2; }, false, true};
// Piecewise constant: a zero gradient, as torch's.
Tensor zero_grad(T g, T, T) { return zeros_like(g); }
const UnaryDef kFloor{Op::Floor, "floor", "FloorBackward", Domain::Same, zero_grad, false, false};
const UnaryDef kCeil{Op::Ceil, "ceil", "CeilBackward", Domain::Same, zero_grad, false, false};
const UnaryDef kRound{Op::Round, "round", "RoundBackward", Domain::Same, zero_grad, false, false};
const UnaryDef kTrunc{Op::Trunc, "trunc", "TruncBackward", Domain::Same, zero_grad, false, false};
const UnaryDef kIsNan{Op::IsNan, "isnan", "IsNanBackward", Domain::Bool, nullptr, false, false};
const UnaryDef kIsInf{Op::IsInf, "isinf", "IsInfBackward", Domain::Bool, nullptr, false, false};
const UnaryDef kBitwiseNot{Op::BitwiseNot, "bitwise_not", "BitwiseNotBackward", Domain::Same, nullptr, false, false};
const UnaryDef kIsFinite{Op::IsFinite, "isfinite", "IsFiniteBackward", Domain::Bool, nullptr, false, false};

// `result` is the type the kernel clamps in: integer bounds for an integer result must fit it
// (PyTorch: "value cannot be converted to type uint8_t without overflow").
backend::ClampAttrs clamp_attrs(std::optional<Scalar> lo, std::optional<Scalar> hi, ScalarType result,
                                const char* name) {
  KILN_CHECK(lo || hi, name, "at least one of min and max must be given");
  backend::ClampAttrs a;
  a.has_min = lo.has_value();
  a.has_max = hi.has_value();
  a.min = lo ? lo->to_double() : 0;
  a.max = hi ? hi->to_double() : 0;
  a.imin = lo ? lo->to_int() : 0;
  a.imax = hi ? hi->to_int() : 0;
  if (!is_floating_point(result) && result != kBool) {
    const auto [low, high] = ops::integer_range(result);
    for (const auto& b : {lo, hi})
      KILN_CHECK(!b || (b->to_int() >= low && b->to_int() <= high), name, "the bound ", b->to_int(),
                 " does not fit a ", result, " tensor");
  }
  return a;
}

autograd::BackwardFn clamp_backward(const Tensor& x, backend::ClampAttrs a) {
  return [sx = SavedTensor(x), a](const Tensor& g) -> TensorList {
    Tensor xv = sx.get("ClampBackward");
    // Strictly inside the bounds, as torch 2.15: an element at a bound (a pixel at exactly 0 or
    // 1) gets no gradient, as relu's at 0.
    Tensor pass = ones_like(xv, kBool);
    if (a.has_min) pass = logical_and(pass, xv > a.min);
    if (a.has_max) pass = logical_and(pass, xv < a.max);
    return {where(pass, g, zeros_like(g))};
  };
}

}  // namespace

Tensor neg(const Tensor& x) { return unary(kNeg, x); }
Tensor abs(const Tensor& x) { return unary(kAbs, x); }
Tensor sign(const Tensor& x) { return unary(kSign, x); }
// exp, log, log1p, expm1, rsqrt and reciprocal are on torch.autocast's float32 list: a 16-bit
// input runs in float32 under autocast (exp overflows float16 past 11).
Tensor exp(const Tensor& x) { return unary(kExp, ops::autocast_float32(x)); }
Tensor log(const Tensor& x) { return unary(kLog, ops::autocast_float32(x)); }
Tensor log1p(const Tensor& x) { return unary(kLog1p, ops::autocast_float32(x)); }
Tensor expm1(const Tensor& x) { return unary(kExpm1, ops::autocast_float32(x)); }
Tensor sqrt(const Tensor& x) { return unary(kSqrt, x); }
Tensor rsqrt(const Tensor& x) { return unary(kRsqrt, ops::autocast_float32(x)); }
Tensor square(const Tensor& x) { return unary(kSquare, x); }
Tensor reciprocal(const Tensor& x) { return unary(kReciprocal, ops::autocast_float32(x)); }
Tensor tanh(const Tensor& x) { return unary(kTanh, x); }
Tensor sigmoid(const Tensor& x) { return unary(kSigmoid, x); }
Tensor relu(const Tensor& x) { return unary(kRelu, x); }
Tensor silu(const Tensor& x) { return unary(kSilu, x); }
Tensor sin(const Tensor& x) { return unary(kSin, x); }
Tensor cos(const Tensor& x) { return unary(kCos, x); }
Tensor logical_not(const Tensor& x) { return unary(kLogicalNot, x); }
Tensor erf(const Tensor& x) { return unary(kErf, x); }
// log2 and log10 are on torch.autocast's float32 list, as log.
Tensor log2(const Tensor& x) { return unary(kLog2, ops::autocast_float32(x)); }
Tensor log10(const Tensor& x) { return unary(kLog10, ops::autocast_float32(x)); }
Tensor exp2(const Tensor& x) { return unary(kExp2, x); }
Tensor floor(const Tensor& x) { return unary(kFloor, x); }
Tensor ceil(const Tensor& x) { return unary(kCeil, x); }
Tensor round(const Tensor& x) { return unary(kRound, x); }
Tensor trunc(const Tensor& x) { return unary(kTrunc, x); }
Tensor isnan(const Tensor& x) { return unary(kIsNan, x); }
Tensor isinf(const Tensor& x) { return unary(kIsInf, x); }
Tensor isfinite(const Tensor& x) { return unary(kIsFinite, x); }
Tensor operator-(const Tensor& a) { return neg(a); }
Tensor operator!(const Tensor& a) { return logical_not(a); }
Tensor bitwise_not(const Tensor& x) { return unary(kBitwiseNot, x); }
Tensor operator~(const Tensor& a) { return bitwise_not(a); }

Tensor gelu(const Tensor& x, const std::string& approximate) {
  KILN_CHECK(approximate == "none" || approximate == "tanh", "gelu", "approximate must be \"none\" or \"tanh\", got \"",
             approximate, "\"");
  return unary(approximate == "none" ? kGeluErf : kGeluTanh, x);
}

Tensor& Tensor::relu_() { return unary_(kRelu, *this, "relu_"); }
Tensor& Tensor::neg_() { return unary_(kNeg, *this, "neg_"); }
Tensor& Tensor::exp_() { return unary_(kExp, *this, "exp_"); }
Tensor& Tensor::sqrt_() { return unary_(kSqrt, *this, "sqrt_"); }
Tensor& Tensor::abs_() { return unary_(kAbs, *this, "abs_"); }
Tensor& Tensor::sign_() { return unary_(kSign, *this, "sign_"); }
Tensor& Tensor::log_() { return unary_(kLog, *this, "log_"); }
Tensor& Tensor::log1p_() { return unary_(kLog1p, *this, "log1p_"); }
Tensor& Tensor::expm1_() { return unary_(kExpm1, *this, "expm1_"); }
Tensor& Tensor::rsqrt_() { return unary_(kRsqrt, *this, "rsqrt_"); }
Tensor& Tensor::square_() { return unary_(kSquare, *this, "square_"); }
Tensor& Tensor::reciprocal_() { return unary_(kReciprocal, *this, "reciprocal_"); }
Tensor& Tensor::tanh_() { return unary_(kTanh, *this, "tanh_"); }
Tensor& Tensor::sigmoid_() { return unary_(kSigmoid, *this, "sigmoid_"); }
Tensor& Tensor::sin_() { return unary_(kSin, *this, "sin_"); }
Tensor& Tensor::cos_() { return unary_(kCos, *this, "cos_"); }
Tensor& Tensor::floor_() { return unary_(kFloor, *this, "floor_"); }
Tensor& Tensor::ceil_() { return unary_(kCeil, *this, "ceil_"); }
Tensor& Tensor::round_() { return unary_(kRound, *this, "round_"); }
Tensor& Tensor::trunc_() { return unary_(kTrunc, *this, "trunc_"); }

Tensor clamp(const Tensor& x, std::optional<Scalar> lo, std::optional<Scalar> hi) {
  ops::check_defined(x, "clamp");
  ScalarType t = x.dtype();
  if ((lo && lo->is_floating_point()) || (hi && hi->is_floating_point())) t = ops::float_type(t);
  backend::ClampAttrs a = clamp_attrs(lo, hi, t, "clamp");
  Tensor in = ops::cast(x, t);
  Tensor out = make_empty_like(x, x.shape(), t, x.device());
  ops::run1(Op::Clamp, x.device(), {in}, out, &a);
  if (autograd::needs_grad({&x})) autograd::record("ClampBackward", {&x}, out, clamp_backward(x, a));
  return out;
}
Tensor clamp_min(const Tensor& x, Scalar lo) { return clamp(x, lo, std::nullopt); }
Tensor clamp_max(const Tensor& x, Scalar hi) { return clamp(x, std::nullopt, hi); }

Tensor& Tensor::clamp_(std::optional<Scalar> lo, std::optional<Scalar> hi) {
  ops::check_defined(*this, "clamp_");
  // Float bounds make clamp's result floating point (PyTorch's rule), which an integer tensor
  // cannot hold; the kernel would otherwise truncate the bounds.
  KILN_CHECK(is_floating_point() || !((lo && lo->is_floating_point()) || (hi && hi->is_floating_point())), "clamp_",
             "floating-point bounds give a floating-point result, which cannot be written into a ", dtype(),
             " tensor");
  backend::ClampAttrs a = clamp_attrs(lo, hi, dtype(), "clamp_");
  const bool rec = autograd::needs_grad({this});
  autograd::check_inplace(*this, "clamp_");
  Tensor before = rec ? clone() : *this;
  ops::run1(Op::Clamp, device(), {*this}, *this, &a);
  ops::bump_version(*this);
  if (rec) autograd::record_inplace("ClampBackward", *this, {&before}, clamp_backward(before, a));
  return *this;
}

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  Device dev = ops::common_device({&cond, &a, &b}, "where");
  KILN_CHECK(cond.dtype() == kBool, "where", "the condition must be a bool tensor, got ", cond.dtype());
  ScalarType t = ops::result_type_of({&a, &b});
  Shape shape = broadcast_shapes(broadcast_shapes(cond.shape(), a.shape(), "where"), b.shape(), "where");
  Tensor out = make_empty_like(a.shape() == shape ? a : b, shape, t, dev);
  Tensor ac = ops::cast(a, t), bc = ops::cast(b, t);
  backend::run(Op::Where, dev, std::initializer_list<Tensor>{cond, ac, bc}, std::span<Tensor>(&out, 1));
  if (autograd::needs_grad({&a, &b})) {
    autograd::record("WhereBackward", {&cond, &a, &b}, out,
                     [sc = SavedTensor(cond), ma = autograd::InputMeta(a), mb = autograd::InputMeta(b)](
                         const Tensor& g) -> TensorList {
                       Tensor c = sc.get("WhereBackward");
                       Tensor z = zeros_like(g);
                       return {Tensor(), ma.needs ? ma(where(c, g, z)) : Tensor(), mb.needs ? mb(where(c, z, g)) : Tensor()};
                     });
  }
  return out;
}

Tensor where(const Tensor& cond, const Tensor& a, Scalar b) {
  ops::check_defined(a, "where");
  return where(cond, a, ops::wrap_for(a, b));
}
Tensor where(const Tensor& cond, Scalar a, const Tensor& b) {
  ops::check_defined(b, "where");
  return where(cond, ops::wrap_for(b, a), b);
}

namespace {
// The checks masked_fill and masked_fill_ share: a bool mask broadcasting with x, and a value
// tensor (when given) 0-d.
void check_mask(const Tensor& x, const Tensor& mask, const Tensor* value = nullptr) {
  ops::check_defined(x, "masked_fill");
  ops::check_defined(mask, "masked_fill");
  KILN_CHECK(mask.dtype() == kBool, "masked_fill", "the mask must be a bool tensor, got ", mask.dtype());
  (void)broadcast_shapes(x.shape(), mask.shape(), "masked_fill");
  if (!value) return;
  ops::check_defined(*value, "masked_fill");
  KILN_CHECK(value->dim() == 0, "masked_fill", "the value must be a 0-d tensor (or a number), got shape ",
             value->shape());
}

// x.masked_fill_(mask, value) as where(mask, value, x) written straight into x (one pass: the Where
// kernel reads each element before it writes it); value is 0-d, of x's dtype. The gradient is
// masked_fill's: x's where the mask is false, and value's the sum where it is true.
Tensor& fill_in_place(Tensor& x, const Tensor& mask, const Tensor& value) {
  const Device dev = ops::common_device({&x, &mask, &value}, "masked_fill_");
  KILN_CHECK(broadcast_shapes(x.shape(), mask.shape(), "masked_fill_") == x.shape(), "masked_fill_", "a mask of shape ",
             mask.shape(), " would make the result larger than the tensor's ", x.shape());
  const bool rec = autograd::needs_grad({&x, &value});
  autograd::check_inplace(x, "masked_fill_");
  // A mask sharing x's memory would be read after the kernel overwrote it.
  const Tensor m = mask.storage() == x.storage() ? mask.clone() : mask;
  const Tensor before = x;
  const Tensor v = ops::cast(value, x.dtype());
  backend::run(Op::Where, dev, std::initializer_list<Tensor>{m, v, x}, std::span<Tensor>(&x, 1));
  ops::bump_version(x);
  if (rec)
    autograd::record_inplace("MaskedFillBackward", x, {&before, &value},
                             [sm = SavedTensor(m), nx = before.requires_grad(), mv = autograd::InputMeta(value)](
                                 const Tensor& g) -> TensorList {
                               const Tensor c = sm.get("MaskedFillBackward");
                               return {nx ? where(c, zeros_like(g), g) : Tensor(),
                                       mv.needs ? mv(where(c, g, zeros_like(g))) : Tensor()};
                             });
  return x;
}
}  // namespace

Tensor masked_fill(const Tensor& x, const Tensor& mask, Scalar value) {
  check_mask(x, mask);
  ops::check_fill_value(value, x.dtype(), "masked_fill");
  return where(mask, ops::wrap_scalar(value, x.dtype()), x);
}

Tensor masked_fill(const Tensor& x, const Tensor& mask, const Tensor& value) {
  check_mask(x, mask, &value);
  return where(mask, value.to(x.dtype()), x);
}

Tensor& Tensor::masked_fill_(const Tensor& mask, Scalar value) {
  check_mask(*this, mask);
  ops::check_fill_value(value, dtype(), "masked_fill");
  return fill_in_place(*this, mask, ops::wrap_scalar(value, dtype()));
}

Tensor& Tensor::masked_fill_(const Tensor& mask, const Tensor& value) {
  check_mask(*this, mask, &value);
  return fill_in_place(*this, mask, value);
}

}  // namespace kiln
