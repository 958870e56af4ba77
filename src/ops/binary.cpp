// Two-operand elementwise ops (arithmetic, comparisons, logical), their gradients, the in-place
// forms and the operators.
#include "ops/autocast_policy.h"
#include "ops/op_util.h"

namespace kiln {
namespace {

using autograd::InputMeta;
using autograd::SavedTensor;
using ops::Op;

bool is_differentiable(Op op) {
  switch (op) {
    case Op::Add: case Op::Sub: case Op::Mul: case Op::Div: case Op::Pow: case Op::Maximum: case Op::Minimum:
    case Op::AddRelu: case Op::FloorDivide: case Op::TruncDivide: case Op::Remainder: case Op::Fmod: case Op::Atan2:
      return true;
    default:
      return false;
  }
}

bool is_predicate(Op op) {
  switch (op) {
    case Op::Eq: case Op::Ne: case Op::Lt: case Op::Le: case Op::Gt: case Op::Ge: case Op::LogicalAnd:
    case Op::LogicalOr:
      return true;
    default:
      return false;
  }
}

const char* backward_name(Op op) {
  switch (op) {
    case Op::Add: return "AddBackward";
    case Op::Sub: return "SubBackward";
    case Op::Mul: return "MulBackward";
    case Op::Div: return "DivBackward";
    case Op::Pow: return "PowBackward";
    case Op::Maximum: return "MaximumBackward";
    case Op::AddRelu: return "AddReluBackward";
    case Op::FloorDivide: case Op::TruncDivide: return "DivBackward";
    case Op::Remainder: return "RemainderBackward";
    case Op::Fmod: return "FmodBackward";
    case Op::Atan2: return "Atan2Backward";
    default: return "MinimumBackward";
  }
}

// The gradient formulas; a and b are the (compute-dtype) operand values before the op.
autograd::BackwardFn make_backward(Op op, const Tensor& a, const Tensor& b, const Tensor& out,
                                   InputMeta ma, InputMeta mb) {
  switch (op) {
    case Op::Add:
      return [ma, mb](const Tensor& g) -> TensorList { return {ma(g), mb(g)}; };
    case Op::AddRelu:  // relu's gradient (g where the output is positive), then add's
      return [ma, mb, so = SavedTensor(out)](const Tensor& g) -> TensorList {
        const Tensor gr = ops::backward_helper(Op::ReluBackward, g, so.get("AddReluBackward"));
        return {ma(gr), mb(gr)};
      };
    case Op::Sub:
      return [ma, mb](const Tensor& g) -> TensorList { return {ma(g), mb.needs ? mb(neg(g)) : Tensor()}; };
    case Op::Mul:
      return [ma, mb, sa = SavedTensor(mb.needs ? a : Tensor()), sb = SavedTensor(ma.needs ? b : Tensor())](
                 const Tensor& g) -> TensorList {
        return {ma.needs ? ma(g * sb.get("MulBackward")) : Tensor(),
                mb.needs ? mb(g * sa.get("MulBackward")) : Tensor()};
      };
    case Op::Div:
      return [ma, mb, sa = SavedTensor(mb.needs ? a : Tensor()), sb = SavedTensor(b)](const Tensor& g) -> TensorList {
        Tensor bv = sb.get("DivBackward");
        Tensor gb;
        // -g * a / b^2 as torch forms it, (a / b) / b: b * b overflows float16 once |b| > 256.
        if (mb.needs) gb = mb(neg(g) * (sa.get("DivBackward") / bv) / bv);
        return {ma.needs ? ma(g / bv) : Tensor(), gb};
      };
    case Op::Pow:
      // One exponent on the host that needs no gradient (x.pow(2)): PyTorch's
      // grad * (e * x^(e-1)), x^(e-1) again through pow's scalar paths, and no where() pass.
      if (!mb.needs && b.dim() == 0 && b.device().is_cpu()) {
        const double e = b.item<double>();
        return [ma, sa = SavedTensor(a), e](const Tensor& g) -> TensorList {
          if (e == 0) return {ma(zeros_like(g)), Tensor()};
          return {ma(g * (pow(sa.get("PowBackward"), e - 1) * e)), Tensor()};
        };
      }
      return [ma, mb, sa = SavedTensor(a), sb = SavedTensor(b), so = SavedTensor(mb.needs ? out : Tensor())](
                 const Tensor& g) -> TensorList {
        Tensor av = sa.get("PowBackward"), bv = sb.get("PowBackward");
        Tensor ga, gb;
        if (ma.needs) {
          // d/da a^b = b a^(b-1); defined as 0 where b == 0 (PyTorch's convention).
          Tensor d = bv * pow(av, bv - 1);
          ga = ma(g * where(bv == 0, zeros_like(d), d));
        }
        if (mb.needs) {
          Tensor d = so.get("PowBackward") * log(av);
          gb = mb(g * where(logical_and(av == 0, bv >= 0), zeros_like(d), d));
        }
        return {ga, gb};
      };
    case Op::FloorDivide:
    case Op::TruncDivide:  // piecewise constant: zero, as torch's div with a rounding mode
      return [ma, mb](const Tensor& g) -> TensorList {
        const Tensor z = zeros_like(g);
        return {ma.needs ? ma(z) : Tensor(), mb.needs ? mb(z) : Tensor()};
      };
    case Op::Remainder:
    case Op::Fmod:  // a - b * q with q the rounded quotient: d/da 1, d/db -q (torch's)
      return [ma, mb, op, sa = SavedTensor(mb.needs ? a : Tensor()), sb = SavedTensor(mb.needs ? b : Tensor())](
                 const Tensor& g) -> TensorList {
        Tensor gb;
        if (mb.needs) {
          const char* name = op == Op::Fmod ? "FmodBackward" : "RemainderBackward";
          gb = mb(neg(g) * div(sa.get(name), sb.get(name), op == Op::Fmod ? "trunc" : "floor"));
        }
        return {ma(g), gb};
      };
    case Op::Atan2:  // torch's: recip = 1 / (a^2 + b^2) (0 where that is 0), g b recip and g (-a) recip
      return [ma, mb, sa = SavedTensor(a), sb = SavedTensor(b)](const Tensor& g) -> TensorList {
        const Tensor av = sa.get("Atan2Backward"), bv = sb.get("Atan2Backward");
        const Tensor denom = av * av + bv * bv;
        const Tensor recip = where(denom == 0, zeros_like(denom), reciprocal(denom));
        return {ma.needs ? ma(g * bv * recip) : Tensor(), mb.needs ? mb(g * neg(av) * recip) : Tensor()};
      };
    default: {  // Maximum, Minimum: the larger (smaller) input gets the gradient; ties split it;
      // where one is NaN (the result), both get it, as PyTorch's (neither loses a comparison).
      const bool is_max = op == Op::Maximum;
      return [ma, mb, is_max, sa = SavedTensor(a), sb = SavedTensor(b)](const Tensor& g) -> TensorList {
        Tensor av = sa.get("MaximumBackward"), bv = sb.get("MaximumBackward");
        const Tensor z = zeros_like(g), shared = where(eq(av, bv), g * 0.5, g);
        return {ma.needs ? ma(where(is_max ? lt(av, bv) : gt(av, bv), z, shared)) : Tensor(),
                mb.needs ? mb(where(is_max ? gt(av, bv) : lt(av, bv), z, shared)) : Tensor()};
      };
    }
  }
}

ScalarType compute_type(Op op, const Tensor& a, const Tensor& b, const char* name) {
  ScalarType ct = ops::result_type_of({&a, &b});
  if (op == Op::Div || op == Op::Atan2) ct = ops::float_type(ct);  // true division
  const bool rounded = op == Op::FloorDivide || op == Op::TruncDivide || op == Op::Remainder || op == Op::Fmod;
  KILN_CHECK(!(rounded && ct == kBool), name, "is not defined for bool tensors");
  const bool bitwise = op == Op::BitwiseAnd || op == Op::BitwiseOr || op == Op::BitwiseXor;
  KILN_CHECK(!(bitwise && is_floating_point(ct)), name, "expects integer or bool tensors, got ", ct);
  KILN_CHECK(!(op == Op::Sub && ct == kBool), name, "subtracting two bool tensors is not supported; "
             "use logical_xor or logical_not");
  return ct;
}

// The operands as the kernel takes them: in ct, except that PyTorch multiplies and divides 16-bit
// floats by a number in float32 (its opmath type), so that x / 65536 in float16 is not x / inf,
// nor x * 1e-8 zero: a number (or 0-d CPU tensor) with no exact 16-bit value stays float32, and
// the kernels (CPU and CUDA) read it as the float they compute the 16-bit elements in. The tensor
// is not copied; numbers that are exact (0.5, 0.125, 3) are cast as before.
std::pair<Tensor, Tensor> kernel_operands(Op op, ScalarType ct, const Tensor& a, const Tensor& b) {
  auto kept = [&](const Tensor& t) {
    return (op == Op::Mul || op == Op::Div) && (ct == kFloat16 || ct == kBFloat16) && t.dim() == 0 &&
           t.device().is_cpu() && t.dtype() != ct && t.dtype() != kBool && !ops::exact_in(t.item<double>(), ct);
  };
  // At most one is kept: a 16-bit ct needs an operand of that dtype, which is not.
  if (kept(b)) return {ops::cast(a, ct), ops::cast(b, kFloat32)};
  if (kept(a)) return {ops::cast(a, kFloat32), ops::cast(b, ct)};
  return {ops::cast(a, ct), ops::cast(b, ct)};
}

// out = ac op bc, the kernel computing in ct (bool for a predicate; ops::run_as).
void compute_into(Op op, Tensor& out, const Tensor& ac, const Tensor& bc, ScalarType ct) {
  const Tensor in[] = {ac, bc};
  ops::run_as(op, in, out, is_predicate(op) ? kBool : ct);
}

Tensor binary(Op op, const char* name, const Tensor& a, const Tensor& b) {
  Device dev = ops::common_device({&a, &b}, name);
  ScalarType ct = compute_type(op, a, b, name);
  Shape shape = broadcast_shapes(a.shape(), b.shape(), name);
  Tensor out = make_empty_like(a.shape() == shape ? a : b, shape, is_predicate(op) ? kBool : ct, dev);
  const auto [ac, bc] = kernel_operands(op, ct, a, b);
  compute_into(op, out, ac, bc, ct);
  if (is_differentiable(op) && autograd::needs_grad({&a, &b}))
    autograd::record(backward_name(op), {&a, &b}, out, make_backward(op, ac, bc, out, InputMeta(a), InputMeta(b)));
  return out;
}

// The checks of a result written into an existing tensor (in place, or out=; ops::check_result_fits).
// Returns the computation's dtype.
ScalarType check_into(Op op, const char* name, const Tensor& out, const Tensor& a, const Tensor& b) {
  ops::check_defined(out, name);
  const Device dev = ops::common_device({&a, &b}, name);
  const ScalarType ct = compute_type(op, a, b, name);
  ops::check_result_fits(name, out, dev, is_predicate(op) ? kBool : ct, broadcast_shapes(a.shape(), b.shape(), name),
                         "output tensor");
  return ct;
}

// compute_into an existing tensor, which changes its version.
void run_into(Op op, Tensor& out, const Tensor& ac, const Tensor& bc, ScalarType ct) {
  compute_into(op, out, ac, bc, ct);
  ops::bump_version(out);
}

Tensor& binary_(Op op, const char* name, Tensor& self, const Tensor& other) {
  const ScalarType ct = check_into(op, name, self, self, other);
  const bool rec = is_differentiable(op) && autograd::needs_grad({&self, &other});
  autograd::check_inplace(self, name);
  InputMeta ma(self), mb(other);
  Tensor a_before = rec && (op != Op::Add && op != Op::Sub) ? self.clone() : self;
  // An operand sharing self's memory (y.mul_(y), x.add_(x.t())) would be read after the kernel
  // overwrote it, and saved for backward with the new values: use a copy made first (a recorded
  // one, so that the gradient still reaches the operand).
  const Tensor b_before = other.storage() == self.storage() ? other.clone() : other;
  const auto [sc, bc] = kernel_operands(op, ct, self, b_before);
  run_into(op, self, sc, bc, ct);
  if (rec) {
    Tensor ac = ops::cast(a_before, sc.dtype());
    autograd::record_inplace(backward_name(op), self, {&a_before, &b_before}, make_backward(op, ac, bc, self, ma, mb));
  }
  return self;
}

// out = a op b, PyTorch's out= form: no new tensor, no autograd (an error when an operand needs
// a gradient, as in PyTorch). An operand overlapping out, other than out itself, is read from a
// copy made first.
Tensor& binary_out(Op op, const char* name, Tensor& out, const Tensor& a, const Tensor& b) {
  ops::check_defined(a, name);
  ops::check_defined(b, name);
  const ScalarType ct = check_into(op, name, out, a, b);
  KILN_CHECK(!autograd::needs_grad({&a, &b, &out}), name,
             "the out= form does not record a gradient, but an argument requires grad (use kiln::NoGradGuard, or "
             "the form that returns a new tensor)");
  autograd::check_inplace(out, name);  // out is written in place: the same rules
  auto apart = [&](const Tensor& t) { return t.storage() == out.storage() && !t.is_same(out) ? t.clone() : t; };
  const auto [ac, bc] = kernel_operands(op, ct, apart(a), apart(b));
  run_into(op, out, ac, bc, ct);
  return out;
}

}  // namespace

#define KILN_DEFINE_BINARY_OUT(fn, op)                                  \
  Tensor& fn##_out(Tensor& out, const Tensor& a, const Tensor& b) {     \
    return binary_out(Op::op, #fn "_out", out, a, b);                   \
  }                                                                     \
  Tensor& fn##_out(Tensor& out, const Tensor& a, Scalar b) {            \
    ops::check_defined(a, #fn "_out");                                  \
    return binary_out(Op::op, #fn "_out", out, a, ops::wrap_for(a, b)); \
  }
KILN_DEFINE_BINARY_OUT(add, Add)
KILN_DEFINE_BINARY_OUT(sub, Sub)
KILN_DEFINE_BINARY_OUT(mul, Mul)
KILN_DEFINE_BINARY_OUT(div, Div)
#undef KILN_DEFINE_BINARY_OUT

#define KILN_DEFINE_BINARY_TENSOR_FIRST(fn, op)                                                \
  Tensor fn(const Tensor& a, const Tensor& b) { return binary(Op::op, #fn, a, b); }           \
  Tensor fn(const Tensor& a, Scalar b) { ops::check_defined(a, #fn); return binary(Op::op, #fn, a, ops::wrap_for(a, b)); }
#define KILN_DEFINE_BINARY(fn, op)           \
  KILN_DEFINE_BINARY_TENSOR_FIRST(fn, op)    \
  Tensor fn(Scalar a, const Tensor& b) { ops::check_defined(b, #fn); return binary(Op::op, #fn, ops::wrap_for(b, a), b); }
KILN_DEFINE_BINARY(add, Add)
KILN_DEFINE_BINARY(sub, Sub)
KILN_DEFINE_BINARY(mul, Mul)
KILN_DEFINE_BINARY_TENSOR_FIRST(div, Div)
// number / tensor is torch's reciprocal(tensor) * number, on autocast's float32 list: 1 / h of a
// float16 h near 1e-5 is finite (it was inf, where reciprocal(h) was not).
Tensor div(Scalar a, const Tensor& b_in) {
  ops::check_defined(b_in, "div");
  const Tensor b = ops::autocast_float32(b_in);
  return binary(Op::Div, "div", ops::wrap_for(b, a), b);
}
KILN_DEFINE_BINARY(maximum, Maximum)
KILN_DEFINE_BINARY(minimum, Minimum)
KILN_DEFINE_BINARY(add_relu, AddRelu)
KILN_DEFINE_BINARY(floor_divide, FloorDivide)
KILN_DEFINE_BINARY(remainder, Remainder)
KILN_DEFINE_BINARY(fmod, Fmod)
KILN_DEFINE_BINARY(atan2, Atan2)
KILN_DEFINE_BINARY(bitwise_and, BitwiseAnd)
KILN_DEFINE_BINARY(bitwise_or, BitwiseOr)
KILN_DEFINE_BINARY(bitwise_xor, BitwiseXor)
KILN_DEFINE_BINARY(eq, Eq)
KILN_DEFINE_BINARY(ne, Ne)
KILN_DEFINE_BINARY(lt, Lt)
KILN_DEFINE_BINARY(le, Le)
KILN_DEFINE_BINARY(gt, Gt)
KILN_DEFINE_BINARY(ge, Ge)
KILN_DEFINE_BINARY(logical_and, LogicalAnd)
KILN_DEFINE_BINARY(logical_or, LogicalOr)
#undef KILN_DEFINE_BINARY
#undef KILN_DEFINE_BINARY_TENSOR_FIRST

namespace {
Op rounding_op(std::string_view mode) {
  if (mode == "trunc") return Op::TruncDivide;
  if (mode == "floor") return Op::FloorDivide;
  KILN_FAIL("div", "rounding_mode must be \"trunc\" or \"floor\", got \"", mode, "\"");
}
}  // namespace
Tensor div(const Tensor& a, const Tensor& b, std::string_view rounding_mode) {
  return binary(rounding_op(rounding_mode), "div", a, b);
}
Tensor div(const Tensor& a, Scalar b, std::string_view rounding_mode) {
  ops::check_defined(a, "div");
  return binary(rounding_op(rounding_mode), "div", a, ops::wrap_for(a, b));
}

// pow is on torch.autocast's float32 list: 16-bit operands run in float32 under autocast.
Tensor pow(const Tensor& a, const Tensor& b) {
  ops::check_defined(a, "pow");
  ops::check_defined(b, "pow");
  return binary(Op::Pow, "pow", ops::autocast_float32(a), ops::autocast_float32(b));
}
Tensor pow(const Tensor& a_in, Scalar b) {
  ops::check_defined(a_in, "pow");
  // PyTorch's rule for a number exponent (a tensor exponent follows powi: 0, 1 or -1).
  KILN_CHECK(a_in.is_floating_point() || b.is_floating_point() || b.to_int() >= 0, "pow",
             "integers to negative integer powers are not allowed (", a_in.dtype(), " tensor, exponent ", b.to_int(),
             ")");
  const Tensor a = ops::autocast_float32(a_in);
  return binary(Op::Pow, "pow", a, ops::wrap_for(a, b));
}
Tensor pow(Scalar a, const Tensor& b_in) {
  ops::check_defined(b_in, "pow");
  const Tensor b = ops::autocast_float32(b_in);
  return binary(Op::Pow, "pow", ops::wrap_for(b, a), b);
}

Tensor& Tensor::add_(const Tensor& o) { return binary_(Op::Add, "add_", *this, o); }
Tensor& Tensor::add_(Scalar o) { return binary_(Op::Add, "add_", *this, ops::wrap_for(*this, o)); }
Tensor& Tensor::sub_(const Tensor& o) { return binary_(Op::Sub, "sub_", *this, o); }
Tensor& Tensor::sub_(Scalar o) { return binary_(Op::Sub, "sub_", *this, ops::wrap_for(*this, o)); }
Tensor& Tensor::mul_(const Tensor& o) { return binary_(Op::Mul, "mul_", *this, o); }
Tensor& Tensor::mul_(Scalar o) { return binary_(Op::Mul, "mul_", *this, ops::wrap_for(*this, o)); }
Tensor& Tensor::div_(const Tensor& o) { return binary_(Op::Div, "div_", *this, o); }
Tensor& Tensor::div_(Scalar o) { return binary_(Op::Div, "div_", *this, ops::wrap_for(*this, o)); }
Tensor& Tensor::floor_divide_(const Tensor& o) { return binary_(Op::FloorDivide, "floor_divide_", *this, o); }
Tensor& Tensor::floor_divide_(Scalar o) {
  return binary_(Op::FloorDivide, "floor_divide_", *this, ops::wrap_for(*this, o));
}
Tensor& Tensor::remainder_(const Tensor& o) { return binary_(Op::Remainder, "remainder_", *this, o); }
Tensor& Tensor::remainder_(Scalar o) { return binary_(Op::Remainder, "remainder_", *this, ops::wrap_for(*this, o)); }
Tensor& Tensor::fmod_(const Tensor& o) { return binary_(Op::Fmod, "fmod_", *this, o); }
Tensor& Tensor::fmod_(Scalar o) { return binary_(Op::Fmod, "fmod_", *this, ops::wrap_for(*this, o)); }
Tensor& Tensor::bitwise_and_(const Tensor& o) { return binary_(Op::BitwiseAnd, "bitwise_and_", *this, o); }
Tensor& Tensor::bitwise_or_(const Tensor& o) { return binary_(Op::BitwiseOr, "bitwise_or_", *this, o); }
Tensor& Tensor::bitwise_xor_(const Tensor& o) { return binary_(Op::BitwiseXor, "bitwise_xor_", *this, o); }
Tensor& Tensor::bitwise_and_(Scalar o) {
  return binary_(Op::BitwiseAnd, "bitwise_and_", *this, ops::wrap_for(*this, o));
}
Tensor& Tensor::bitwise_or_(Scalar o) { return binary_(Op::BitwiseOr, "bitwise_or_", *this, ops::wrap_for(*this, o)); }
Tensor& Tensor::bitwise_xor_(Scalar o) {
  return binary_(Op::BitwiseXor, "bitwise_xor_", *this, ops::wrap_for(*this, o));
}

Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator+(const Tensor& a, Scalar b) { return add(a, b); }
Tensor operator+(Scalar a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator-(const Tensor& a, Scalar b) { return sub(a, b); }
Tensor operator-(Scalar a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator*(const Tensor& a, Scalar b) { return mul(a, b); }
Tensor operator*(Scalar a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator/(const Tensor& a, Scalar b) { return div(a, b); }
Tensor operator/(Scalar a, const Tensor& b) { return div(a, b); }
Tensor operator%(const Tensor& a, const Tensor& b) { return remainder(a, b); }
Tensor operator%(const Tensor& a, Scalar b) { return remainder(a, b); }
Tensor operator%(Scalar a, const Tensor& b) { return remainder(a, b); }
Tensor operator&(Scalar a, const Tensor& b) { return bitwise_and(a, b); }
Tensor operator|(Scalar a, const Tensor& b) { return bitwise_or(a, b); }
Tensor operator^(Scalar a, const Tensor& b) { return bitwise_xor(a, b); }
Tensor operator&(const Tensor& a, const Tensor& b) { return bitwise_and(a, b); }
Tensor operator&(const Tensor& a, Scalar b) { return bitwise_and(a, b); }
Tensor operator|(const Tensor& a, const Tensor& b) { return bitwise_or(a, b); }
Tensor operator|(const Tensor& a, Scalar b) { return bitwise_or(a, b); }
Tensor operator^(const Tensor& a, const Tensor& b) { return bitwise_xor(a, b); }
Tensor operator^(const Tensor& a, Scalar b) { return bitwise_xor(a, b); }
Tensor operator==(const Tensor& a, const Tensor& b) { return eq(a, b); }
Tensor operator==(const Tensor& a, Scalar b) { return eq(a, b); }
Tensor operator!=(const Tensor& a, const Tensor& b) { return ne(a, b); }
Tensor operator!=(const Tensor& a, Scalar b) { return ne(a, b); }
Tensor operator<(const Tensor& a, const Tensor& b) { return lt(a, b); }
Tensor operator<(const Tensor& a, Scalar b) { return lt(a, b); }
Tensor operator<=(const Tensor& a, const Tensor& b) { return le(a, b); }
Tensor operator<=(const Tensor& a, Scalar b) { return le(a, b); }
Tensor operator>(const Tensor& a, const Tensor& b) { return gt(a, b); }
Tensor operator>(const Tensor& a, Scalar b) { return gt(a, b); }
Tensor operator>=(const Tensor& a, const Tensor& b) { return ge(a, b); }
Tensor operator>=(const Tensor& a, Scalar b) { return ge(a, b); }
Tensor operator&&(const Tensor& a, const Tensor& b) { return logical_and(a, b); }
Tensor operator||(const Tensor& a, const Tensor& b) { return logical_or(a, b); }

}  // namespace kiln
