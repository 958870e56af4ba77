// CPU kernels for the elementwise ops: arithmetic, comparisons, unary math and their backward helpers.
#include "backend/cpu/loops.h"
#include "backend/dispatch.h"
#include "backend/math.h"

namespace kiln::backend::cpu {
namespace {

// Inputs already have the compute dtype (the op layer casts); the output has it too.
template <class F>
void arith(KernelArgs& a) {
  visit_dtype(a.inputs[0].dtype(), "elementwise", [&]<class T>() {
    binary_loop<T, T, T>(a.outputs[0], a.inputs[0], a.inputs[1], F{});
  });
}
// Mul and Div: as arith, and a float16/bfloat16 tensor with a number the op layer kept in float32
// (PyTorch's opmath: x / 65536 in float16 is not x / inf), read as float by the same loops.
template <class F>
void arith_number(KernelArgs& a) {
  const ScalarType ta = a.inputs[0].dtype(), tb = a.inputs[1].dtype();
  if (ta == tb) return arith<F>(a);
  visit_dtype(a.outputs[0].dtype(), "elementwise", [&]<class T>() {
    if constexpr (std::is_same_v<compute_t<T>, float> && !std::is_same_v<T, float>) {
      if (ta == kFloat32) return binary_loop<T, float, T>(a.outputs[0], a.inputs[0], a.inputs[1], F{});
      if (tb == kFloat32) return binary_loop<T, T, float>(a.outputs[0], a.inputs[0], a.inputs[1], F{});
    }
    KILN_FAIL("elementwise", "operands of ", ta, " and ", tb, " for a ", a.outputs[0].dtype(), " result");
  });
}
template <class F>
void arith_float(KernelArgs& a) {
  visit_float_dtype(a.inputs[0].dtype(), "elementwise", [&]<class T>() {
    binary_loop<T, T, T>(a.outputs[0], a.inputs[0], a.inputs[1], F{});
  });
}
// Comparisons and logical ops: bool output.
template <class F>
void predicate(KernelArgs& a) {
  visit_dtype(a.inputs[0].dtype(), "elementwise", [&]<class T>() {
    binary_loop<bool, T, T>(a.outputs[0], a.inputs[0], a.inputs[1], F{});
  });
}
template <class F>
void unary(KernelArgs& a) {
  visit_dtype(a.inputs[0].dtype(), "elementwise", [&]<class T>() {
    unary_loop<T, T>(a.outputs[0], a.inputs[0], F{});
  });
}
template <class F>
void unary_float(KernelArgs& a) {
  visit_float_dtype(a.inputs[0].dtype(), "elementwise", [&]<class T>() {
    unary_loop<T, T>(a.outputs[0], a.inputs[0], F{});
  });
}

// pow with one exponent for all elements (a number, or a tensor of one element): math.h's cases.
void pow_kernel(KernelArgs& a) {
  const Tensor& b = a.inputs[1];
  if (b.numel() != 1 || !is_floating_point(b.dtype())) return arith<math::Pow>(a);
  visit_float_dtype(b.dtype(), "pow", [&]<class T>() {
    const auto e = static_cast<compute_t<T>>(*static_cast<const T*>(b.data_ptr()));
    math::with_pow_exponent(e, [&](auto f) { unary_loop<T, T>(a.outputs[0], a.inputs[0], f); });
  });
}

// logical_not, isnan, isinf, isfinite: bool output.
template <class F>
void classify(KernelArgs& a) {
  visit_dtype(a.inputs[0].dtype(), "elementwise", [&]<class T>() { unary_loop<bool, T>(a.outputs[0], a.inputs[0], F{}); });
}

// addcmul and addcdiv: out = self + value * t1 (* or /) t2, all in out's dtype (the op layer casts).
// Addcmul with two inputs is torch's add(self, t1, alpha = value), the value rounded to the
// tensors' dtype first (as torch's 16-bit add does).
template <template <class> class F>
void addc(KernelArgs& a) {
  const Scalar v = static_cast<const ScalarAttrs*>(a.attrs)->value;
  constexpr const char* name = std::is_same_v<F<float>, math::Addcmul<float>> ? "addcmul" : "addcdiv";
  visit_dtype(a.outputs[0].dtype(), name, [&]<class T>() {
    using C = compute_t<T>;
    if (a.inputs.size() == 2)
      return binary_loop<T, T, T>(a.outputs[0], a.inputs[0], a.inputs[1],
                                  math::AddScaled<C>{static_cast<C>(v.to<T>())});
    ternary_loop<T>(a.outputs[0], a.inputs[0], a.inputs[1], a.inputs[2], F<C>{v.to<C>()});
  });
}

// lerp(start, end, weight): the weight a tensor (a third input) or one number (the attrs).
void lerp(KernelArgs& a) {
  visit_float_dtype(a.outputs[0].dtype(), "lerp", [&]<class T>() {
    using C = compute_t<T>;
    if (a.inputs.size() == 3)
      return ternary_loop<T>(a.outputs[0], a.inputs[0], a.inputs[1], a.inputs[2], math::Lerp{});
    const C w = static_cast<const ScalarAttrs*>(a.attrs)->value.to<C>();
    binary_loop<T, T, T>(a.outputs[0], a.inputs[0], a.inputs[1], math::LerpBy<C>{w});
  });
}

constexpr DeviceType kCpu = DeviceType::CPU;
KILN_REGISTER_KERNEL(Op::Addcmul, kCpu, addc<math::Addcmul>);
KILN_REGISTER_KERNEL(Op::Addcdiv, kCpu, addc<math::Addcdiv>);
KILN_REGISTER_KERNEL(Op::Lerp, kCpu, lerp);
KILN_REGISTER_KERNEL(Op::Add, kCpu, arith<math::Add>);
KILN_REGISTER_KERNEL(Op::Sub, kCpu, arith<math::Sub>);
KILN_REGISTER_KERNEL(Op::Mul, kCpu, arith_number<math::Mul>);
KILN_REGISTER_KERNEL(Op::Div, kCpu, arith_number<math::Div>);
KILN_REGISTER_KERNEL(Op::Pow, kCpu, pow_kernel);
KILN_REGISTER_KERNEL(Op::Maximum, kCpu, arith<math::Maximum>);
KILN_REGISTER_KERNEL(Op::Minimum, kCpu, arith<math::Minimum>);
KILN_REGISTER_KERNEL(Op::AddRelu, kCpu, arith<math::AddRelu>);
KILN_REGISTER_KERNEL(Op::FloorDivide, kCpu, arith<math::FloorDivide>);
KILN_REGISTER_KERNEL(Op::TruncDivide, kCpu, arith<math::TruncDivide>);
KILN_REGISTER_KERNEL(Op::Remainder, kCpu, arith<math::Remainder>);
KILN_REGISTER_KERNEL(Op::Fmod, kCpu, arith<math::Fmod>);
KILN_REGISTER_KERNEL(Op::Atan2, kCpu, arith_float<math::Atan2>);
KILN_REGISTER_KERNEL(Op::BitwiseAnd, kCpu, arith<math::BitwiseAnd>);
KILN_REGISTER_KERNEL(Op::BitwiseOr, kCpu, arith<math::BitwiseOr>);
KILN_REGISTER_KERNEL(Op::BitwiseXor, kCpu, arith<math::BitwiseXor>);
KILN_REGISTER_KERNEL(Op::BitwiseNot, kCpu, unary<math::BitwiseNot>);
KILN_REGISTER_KERNEL(Op::Eq, kCpu, predicate<math::Eq>);
KILN_REGISTER_KERNEL(Op::Ne, kCpu, predicate<math::Ne>);
KILN_REGISTER_KERNEL(Op::Lt, kCpu, predicate<math::Lt>);
KILN_REGISTER_KERNEL(Op::Le, kCpu, predicate<math::Le>);
KILN_REGISTER_KERNEL(Op::Gt, kCpu, predicate<math::Gt>);
KILN_REGISTER_KERNEL(Op::Ge, kCpu, predicate<math::Ge>);
KILN_REGISTER_KERNEL(Op::LogicalAnd, kCpu, predicate<math::LogicalAnd>);
KILN_REGISTER_KERNEL(Op::LogicalOr, kCpu, predicate<math::LogicalOr>);
KILN_REGISTER_KERNEL(Op::ReluBackward, kCpu, arith_float<math::ReluBackward>);
KILN_REGISTER_KERNEL(Op::SigmoidBackward, kCpu, arith_float<math::SigmoidBackward>);
KILN_REGISTER_KERNEL(Op::TanhBackward, kCpu, arith_float<math::TanhBackward>);
KILN_REGISTER_KERNEL(Op::GeluErfBackward, kCpu, arith_float<math::GeluErfBackward>);
KILN_REGISTER_KERNEL(Op::GeluTanhBackward, kCpu, arith_float<math::GeluTanhBackward>);
KILN_REGISTER_KERNEL(Op::SiluBackward, kCpu, arith_float<math::SiluBackward>);
KILN_REGISTER_KERNEL(Op::Neg, kCpu, unary<math::Neg>);
KILN_REGISTER_KERNEL(Op::Abs, kCpu, unary<math::Abs>);
KILN_REGISTER_KERNEL(Op::Sign, kCpu, unary<math::Sign>);
KILN_REGISTER_KERNEL(Op::Square, kCpu, unary<math::Square>);
KILN_REGISTER_KERNEL(Op::Relu, kCpu, unary<math::Relu>);
KILN_REGISTER_KERNEL(Op::Exp, kCpu, unary_float<math::Exp>);
KILN_REGISTER_KERNEL(Op::Log, kCpu, unary_float<math::Log>);
KILN_REGISTER_KERNEL(Op::Log1p, kCpu, unary_float<math::Log1p>);
KILN_REGISTER_KERNEL(Op::Expm1, kCpu, unary_float<math::Expm1>);
KILN_REGISTER_KERNEL(Op::Sqrt, kCpu, unary_float<math::Sqrt>);
KILN_REGISTER_KERNEL(Op::Rsqrt, kCpu, unary_float<math::Rsqrt>);
KILN_REGISTER_KERNEL(Op::Reciprocal, kCpu, unary_float<math::Reciprocal>);
KILN_REGISTER_KERNEL(Op::Tanh, kCpu, unary_float<math::Tanh>);
KILN_REGISTER_KERNEL(Op::Sigmoid, kCpu, unary_float<math::Sigmoid>);
KILN_REGISTER_KERNEL(Op::GeluErf, kCpu, unary_float<math::GeluErf>);
KILN_REGISTER_KERNEL(Op::GeluTanh, kCpu, unary_float<math::GeluTanh>);
KILN_REGISTER_KERNEL(Op::Silu, kCpu, unary_float<math::Silu>);
KILN_REGISTER_KERNEL(Op::Sin, kCpu, unary_float<math::Sin>);
KILN_REGISTER_KERNEL(Op::Cos, kCpu, unary_float<math::Cos>);
KILN_REGISTER_KERNEL(Op::LogicalNot, kCpu, classify<math::LogicalNot>);
KILN_REGISTER_KERNEL(Op::Floor, kCpu, unary<math::Floor>);
KILN_REGISTER_KERNEL(Op::Ceil, kCpu, unary<math::Ceil>);
KILN_REGISTER_KERNEL(Op::Round, kCpu, unary<math::Round>);
KILN_REGISTER_KERNEL(Op::Trunc, kCpu, unary<math::Trunc>);
KILN_REGISTER_KERNEL(Op::IsNan, kCpu, classify<math::IsNan>);
KILN_REGISTER_KERNEL(Op::IsInf, kCpu, classify<math::IsInf>);
KILN_REGISTER_KERNEL(Op::IsFinite, kCpu, classify<math::IsFinite>);
KILN_REGISTER_KERNEL(Op::Erf, kCpu, unary_float<math::Erf>);
KILN_REGISTER_KERNEL(Op::Log2, kCpu, unary_float<math::Log2>);
KILN_REGISTER_KERNEL(Op::Log10, kCpu, unary_float<math::Log10>);
KILN_REGISTER_KERNEL(Op::Exp2, kCpu, unary_float<math::Exp2>);

}  // namespace
}  // namespace kiln::backend::cpu
