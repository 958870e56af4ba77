// addcmul, addcdiv and lerp: elementwise ops of three operands (lerp with a number for weight:
// two), broadcast together, their gradients and their in-place forms; and add and sub with alpha,
// which are addcmul's two-operand form (self + alpha * other in one fused multiply-add).
#include "ops/op_util.h"

namespace kiln {
namespace {

using autograd::InputMeta;
using autograd::SavedTensor;
using ops::Op;

// One call: the op, its name, the operands as given (self or start first) and the number
// (addcmul's and addcdiv's value, add's alpha, or lerp's weight when it is a number).
struct Call {
  Op op;
  const char* name;
  std::vector<Tensor> operands;
  Scalar number;
  const char* number_name = "value";
};

const char* node_name(const Call& c) {
  if (c.op == Op::Addcmul) return c.operands.size() == 2 ? "AddBackward" : "AddcmulBackward";
  return c.op == Op::Addcdiv ? "AddcdivBackward" : "LerpBackward";
}

// The dtype the kernel computes in, with torch's checks: addcmul and addcdiv promote their
// operands (addcdiv refuses integer tensor1 and tensor2, whose division torch no longer defines);
// lerp takes floating-point operands of one dtype (a 0-d weight is cast first: lerp_weight). The
// number must fit the type it is converted to (torch's "cannot be converted without overflow"):
// float32 for addcmul/addcdiv on 16-bit tensors (their opmath), the tensors' dtype otherwise; a
// bool alpha is for bool results only, as torch's.
ScalarType compute_type(const Call& c) {
  const std::vector<Tensor>& t = c.operands;
  for (const Tensor& x : t) ops::check_defined(x, c.name);
  if (c.op == Op::Lerp) {
    KILN_CHECK(is_floating_point(t[0].dtype()), c.name, "needs floating-point tensors, got ", t[0].dtype());
    for (size_t i = 1; i < t.size(); ++i)
      KILN_CHECK(t[i].dtype() == t[0].dtype(), c.name, "expected dtype ", t[0].dtype(), " for `",
                 i == 1 ? "end" : "weight", "` but got dtype ", t[i].dtype());
    return t[0].dtype();
  }
  const bool three = t.size() == 3;
  const ScalarType ct = three ? ops::result_type_of({&t[0], &t[1], &t[2]}) : ops::result_type_of({&t[0], &t[1]});
  KILN_CHECK(ct != kBool, c.name, "is not implemented for bool tensors");
  KILN_CHECK(!(c.op == Op::Addcdiv && !is_floating_point(t[1].dtype()) && !is_floating_point(t[2].dtype())), c.name,
             "integer division is not supported (got ", t[1].dtype(), " and ", t[2].dtype(),
             " tensors): cast tensor1 or tensor2 to a floating-point type");
  KILN_CHECK(three || !c.number.is_bool(), c.name, "a bool ", c.number_name, " is only for bool tensors");
  KILN_CHECK(is_floating_point(ct) || !c.number.is_floating_point(), c.name, "for ", ct, " tensors the ",
             c.number_name, " must be an integer, got ", c.number.to_double());
  const bool opmath = three && (ct == kFloat16 || ct == kBFloat16);
  ops::check_fill_value(c.number, opmath ? kFloat32 : ct, c.name);
  return ct;
}

Device device_of(const Call& c) {
  const std::vector<Tensor>& t = c.operands;
  return t.size() == 3 ? ops::common_device({&t[0], &t[1], &t[2]}, c.name)
                       : ops::common_device({&t[0], &t[1]}, c.name);
}

Shape shape_of(const Call& c) {
  Shape shape = c.operands[0].shape();
  for (size_t i = 1; i < c.operands.size(); ++i) shape = broadcast_shapes(shape, c.operands[i].shape(), c.name);
  return shape;
}

std::vector<Tensor> cast_all(const std::vector<Tensor>& ts, ScalarType ct) {
  std::vector<Tensor> out;
  for (const Tensor& t : ts) out.push_back(ops::cast(t, ct));
  return out;
}

// out = the op of `values` (all of dtype ct; ops::run_as).
void compute_into(const Call& c, const std::vector<Tensor>& values, Tensor& out, ScalarType ct) {
  const backend::ScalarAttrs attrs{c.number};
  ops::run_as(c.op, values, out, ct, &attrs);
}

// The gradients, torch's formulas; `v` are the operands' values in the compute dtype, m what
// each operand's gradient becomes.
autograd::BackwardFn make_backward(const Call& c, const std::vector<Tensor>& v, const std::vector<InputMeta>& m) {
  const Scalar value = c.number;
  if (c.op == Op::Addcmul && v.size() == 2)
    return [m, value](const Tensor& g) -> TensorList { return {m[0](g), m[1].needs ? m[1](g * value) : Tensor()}; };
  if (c.op == Op::Addcmul)
    return [m, value, s1 = SavedTensor(m[2].needs ? v[1] : Tensor()), s2 = SavedTensor(m[1].needs ? v[2] : Tensor())](
               const Tensor& g) -> TensorList {
      return {m[0](g), m[1].needs ? m[1](g * (s2.get("AddcmulBackward") * value)) : Tensor(),
              m[2].needs ? m[2](g * (s1.get("AddcmulBackward") * value)) : Tensor()};
    };
  if (c.op == Op::Addcdiv)
    return [m, value, s1 = SavedTensor(m[2].needs ? v[1] : Tensor()),
            s2 = SavedTensor(m[1].needs || m[2].needs ? v[2] : Tensor())](const Tensor& g) -> TensorList {
      Tensor t2 = m[1].needs || m[2].needs ? s2.get("AddcdivBackward") : Tensor();
      // -g * value * t1 / t2^2, as ((value * t1) / t2) / t2: t2 * t2 overflows float16 past 256.
      return {m[0](g), m[1].needs ? m[1](g * (value / t2)) : Tensor(),
              m[2].needs ? m[2](neg(g) * ((s1.get("AddcdivBackward") * value / t2) / t2)) : Tensor()};
    };
  if (v.size() == 2) {
    const double w = value.to_double();
    return [m, w](const Tensor& g) -> TensorList {
      return {m[0].needs ? m[0](g * (1 - w)) : Tensor(), m[1].needs ? m[1](g * w) : Tensor()};
    };
  }
  const bool ends = m[0].needs || m[1].needs;
  return [m, ends, sw = SavedTensor(ends ? v[2] : Tensor()), ss = SavedTensor(m[2].needs ? v[0] : Tensor()),
          se = SavedTensor(m[2].needs ? v[1] : Tensor())](const Tensor& g) -> TensorList {
    Tensor w = ends ? sw.get("LerpBackward") : Tensor();
    return {m[0].needs ? m[0](g * (1 - w)) : Tensor(), m[1].needs ? m[1](g * w) : Tensor(),
            m[2].needs ? m[2](g * (se.get("LerpBackward") - ss.get("LerpBackward"))) : Tensor()};
  };
}

std::vector<InputMeta> metas_of(const std::vector<Tensor>& ts) {
  std::vector<InputMeta> m;
  for (const Tensor& t : ts) m.emplace_back(t);
  return m;
}

Tensor pointwise(const Call& c) {
  const ScalarType ct = compute_type(c);
  const Device dev = device_of(c);
  const Shape shape = shape_of(c);
  const Tensor* like = &c.operands[0];
  for (const Tensor& t : c.operands)
    if (t.shape() == shape) {
      like = &t;
      break;
    }
  Tensor out = make_empty_like(*like, shape, ct, dev);
  const std::vector<Tensor> values = cast_all(c.operands, ct);
  compute_into(c, values, out, ct);
  if (autograd::needs_grad(c.operands))
    autograd::record(node_name(c), c.operands, out, make_backward(c, values, metas_of(c.operands)));
  return out;
}

// The in-place form: c.operands[0] is self, which keeps its shape and dtype.
Tensor& pointwise_(Call c, Tensor& self) {
  const ScalarType ct = compute_type(c);
  ops::check_result_fits(c.name, self, device_of(c), ct, shape_of(c), "tensor");
  const bool rec = autograd::needs_grad(c.operands);
  autograd::check_inplace(self, c.name);
  const std::vector<InputMeta> metas = metas_of(c.operands);
  // An operand sharing self's memory (x.addcmul_(x, y)) would be read after the kernel overwrote
  // it, and saved with the new values: use a copy made first (a recorded one).
  for (size_t i = 1; i < c.operands.size(); ++i)
    if (c.operands[i].storage() == self.storage()) c.operands[i] = c.operands[i].clone();
  // Only lerp's weight gradient reads self's value before the op.
  const bool keep_self = rec && c.op == Op::Lerp && c.operands.size() == 3 && metas[2].needs;
  Tensor before = keep_self ? self.clone() : self;
  std::vector<Tensor> values = cast_all(c.operands, ct);
  compute_into(c, values, self, ct);
  ops::bump_version(self);
  if (rec) {
    if (keep_self) values[0] = ops::cast(before, ct);
    autograd::BackwardFn backward = make_backward(c, values, metas);
    const std::vector<Tensor>& t = c.operands;
    if (t.size() == 3)
      autograd::record_inplace(node_name(c), self, {&before, &t[1], &t[2]}, std::move(backward));
    else
      autograd::record_inplace(node_name(c), self, {&before, &t[1]}, std::move(backward));
  }
  return self;
}

// -alpha, an integer kept an integer (-INT64_MIN wraps to itself, as torch's); a bool is refused
// later by compute_type.
Scalar negated(Scalar alpha) {
  if (alpha.is_floating_point()) return Scalar(-alpha.to_double());
  if (alpha.is_bool()) return alpha;
  return Scalar(static_cast<int64_t>(uint64_t{0} - static_cast<uint64_t>(alpha.to_int())));
}

// alpha 1 is the plain op (which also takes bool tensors), once alpha passed torch's checks.
bool is_one(const Tensor& a, const Tensor& b, Scalar alpha, const char* name) {
  if (alpha.is_bool() || alpha.to_double() != 1.0) return false;
  ops::check_defined(a, name);
  ops::check_defined(b, name);
  KILN_CHECK(is_floating_point(ops::result_type_of({&a, &b})) || !alpha.is_floating_point(), name, "for ",
             ops::result_type_of({&a, &b}), " tensors the alpha must be an integer, got ", alpha.to_double());
  return true;
}

// lerp's weight: a 0-d tensor of another dtype is cast to start's (torch takes it).
Tensor lerp_weight(const Tensor& start, const Tensor& weight, const char* name) {
  ops::check_defined(start, name);
  ops::check_defined(weight, name);
  return weight.dim() == 0 && weight.dtype() != start.dtype() && is_floating_point(start.dtype())
             ? weight.to(start.dtype())
             : weight;
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b, Scalar alpha) {
  if (is_one(a, b, alpha, "add")) return add(a, b);
  return pointwise({Op::Addcmul, "add", {a, b}, alpha, "alpha"});
}
Tensor sub(const Tensor& a, const Tensor& b, Scalar alpha) {
  if (is_one(a, b, alpha, "sub")) return sub(a, b);
  return pointwise({Op::Addcmul, "sub", {a, b}, negated(alpha), "alpha"});
}
Tensor Tensor::add(const Tensor& o, Scalar alpha) const { return kiln::add(*this, o, alpha); }
Tensor Tensor::sub(const Tensor& o, Scalar alpha) const { return kiln::sub(*this, o, alpha); }
Tensor& Tensor::add_(const Tensor& o, Scalar alpha) {
  if (is_one(*this, o, alpha, "add_")) return add_(o);
  return pointwise_({Op::Addcmul, "add_", {*this, o}, alpha, "alpha"}, *this);
}
Tensor& Tensor::sub_(const Tensor& o, Scalar alpha) {
  if (is_one(*this, o, alpha, "sub_")) return sub_(o);
  return pointwise_({Op::Addcmul, "sub_", {*this, o}, negated(alpha), "alpha"}, *this);
}

Tensor addcmul(const Tensor& self, const Tensor& t1, const Tensor& t2, Scalar value) {
  return pointwise({Op::Addcmul, "addcmul", {self, t1, t2}, value});
}
Tensor addcdiv(const Tensor& self, const Tensor& t1, const Tensor& t2, Scalar value) {
  return pointwise({Op::Addcdiv, "addcdiv", {self, t1, t2}, value});
}
Tensor lerp(const Tensor& start, const Tensor& end, Scalar weight) {
  return pointwise({Op::Lerp, "lerp", {start, end}, weight});
}
Tensor lerp(const Tensor& start, const Tensor& end, const Tensor& weight) {
  return pointwise({Op::Lerp, "lerp", {start, end, lerp_weight(start, weight, "lerp")}, Scalar(0)});
}

Tensor& Tensor::addcmul_(const Tensor& t1, const Tensor& t2, Scalar value) {
  return pointwise_({Op::Addcmul, "addcmul_", {*this, t1, t2}, value}, *this);
}
Tensor& Tensor::addcdiv_(const Tensor& t1, const Tensor& t2, Scalar value) {
  return pointwise_({Op::Addcdiv, "addcdiv_", {*this, t1, t2}, value}, *this);
}
Tensor& Tensor::lerp_(const Tensor& end, Scalar weight) {
  return pointwise_({Op::Lerp, "lerp_", {*this, end}, weight}, *this);
}
Tensor& Tensor::lerp_(const Tensor& end, const Tensor& weight) {
  return pointwise_({Op::Lerp, "lerp_", {*this, end, lerp_weight(*this, weight, "lerp_")}, Scalar(0)}, *this);
}

}  // namespace kiln
