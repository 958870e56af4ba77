// CUDA kernels for the binary arithmetic ops, addcmul, addcdiv and lerp, and the activations'
// backward helpers; the math is backend/math.h's, shared with the CPU loops. (The elementwise
// kernels are three translation units, _binary, _compare and _unary, so that none of them is a
// long pole of a parallel build.)
#include "backend/cuda/device/elementwise.cuh"
#include "backend/math.h"

namespace kiln::backend::cuda {
namespace {

// pow with a number for exponent (a CPU operand): math.h's cases, as the CPU's, on the same
// bits; an exponent on the device goes through pow itself (reading it would wait for the GPU).
void pow_op(KernelArgs& a) {
  const Tensor& y = a.inputs[1];
  if (!y.device().is_cpu() || !is_floating_point(y.dtype())) return arith_op<math::Pow>(a);
  if (a.outputs[0].numel() == 0) return;
  visit_float_dtype(y.dtype(), "pow", [&]<class T>() {
    math::with_pow_exponent(host_number<T>(y), [&](auto f) { unary_kernel<T, T>(a, f, "pow"); });
  });
}

// addcmul and addcdiv: out = self + value * t1 (* or /) t2, all in out's dtype (the op layer casts).
// Addcmul with two inputs is torch's add(self, t1, alpha = value) (the CPU kernel's contract).
template <template <class> class F>
void addc(KernelArgs& a) {
  constexpr const char* name = std::is_same_v<F<float>, math::Addcmul<float>> ? "addcmul" : "addcdiv";
  const Tensor& out = a.outputs[0];
  const Scalar v = static_cast<const ScalarAttrs*>(a.attrs)->value;
  visit_dtype(out.dtype(), name, [&]<class T>() {
    using C = compute_t<T>;
    if (a.inputs.size() == 2)
      return launch_plan(make_plan<3>({&out, &a.inputs[0], &a.inputs[1]}),
                         BinaryFn<T, T, T, math::AddScaled<C>>{{static_cast<C>(v.to<T>())}}, stream_of(a), name);
    launch_plan(make_plan<4>({&out, &a.inputs[0], &a.inputs[1], &a.inputs[2]}), TernaryFn<T, F<C>>{{v.to<C>()}},
                stream_of(a), name);
  });
}

// lerp(start, end, weight): the weight a tensor (a third input) or one number (the attrs).
void lerp(KernelArgs& a) {
  const Tensor& out = a.outputs[0];
  visit_float_dtype(out.dtype(), "lerp", [&]<class T>() {
    using C = compute_t<T>;
    if (a.inputs.size() == 3)
      return launch_plan(make_plan<4>({&out, &a.inputs[0], &a.inputs[1], &a.inputs[2]}), TernaryFn<T, math::Lerp>{},
                         stream_of(a), "lerp");
    const C w = static_cast<const ScalarAttrs*>(a.attrs)->value.to<C>();
    launch_plan(make_plan<3>({&out, &a.inputs[0], &a.inputs[1]}), BinaryFn<T, T, T, math::LerpBy<C>>{{w}},
                stream_of(a), "lerp");
  });
}

constexpr DeviceType kCuda = DeviceType::CUDA;
KILN_REGISTER_KERNEL(Op::Addcmul, kCuda, addc<math::Addcmul>);
KILN_REGISTER_KERNEL(Op::Addcdiv, kCuda, addc<math::Addcdiv>);
KILN_REGISTER_KERNEL(Op::Lerp, kCuda, lerp);
KILN_REGISTER_KERNEL_TAKING_NUMBERS(Op::Add, kCuda, arith_op<math::Add>);
KILN_REGISTER_KERNEL_TAKING_NUMBERS(Op::Sub, kCuda, arith_op<math::Sub>);
KILN_REGISTER_KERNEL_TAKING_NUMBERS(Op::Mul, kCuda, arith_op<math::Mul>);
KILN_REGISTER_KERNEL_TAKING_NUMBERS(Op::Div, kCuda, arith_op<math::Div>);
KILN_REGISTER_KERNEL_TAKING_NUMBERS(Op::Pow, kCuda, pow_op);
KILN_REGISTER_KERNEL_TAKING_NUMBERS(Op::Maximum, kCuda, arith_op<math::Maximum>);
KILN_REGISTER_KERNEL_TAKING_NUMBERS(Op::Minimum, kCuda, arith_op<math::Minimum>);
KILN_REGISTER_KERNEL_TAKING_NUMBERS(Op::AddRelu, kCuda, arith_op<math::AddRelu>);
KILN_REGISTER_KERNEL_TAKING_NUMBERS(Op::FloorDivide, kCuda, arith_op<math::FloorDivide>);
KILN_REGISTER_KERNEL_TAKING_NUMBERS(Op::TruncDivide, kCuda, arith_op<math::TruncDivide>);
KILN_REGISTER_KERNEL_TAKING_NUMBERS(Op::Remainder, kCuda, arith_op<math::Remainder>);
KILN_REGISTER_KERNEL_TAKING_NUMBERS(Op::Fmod, kCuda, arith_op<math::Fmod>);
KILN_REGISTER_KERNEL_TAKING_NUMBERS(Op::Atan2, kCuda, arith_float_op<math::Atan2>);
KILN_REGISTER_KERNEL_TAKING_NUMBERS(Op::BitwiseAnd, kCuda, arith_op<math::BitwiseAnd>);
KILN_REGISTER_KERNEL_TAKING_NUMBERS(Op::BitwiseOr, kCuda, arith_op<math::BitwiseOr>);
KILN_REGISTER_KERNEL_TAKING_NUMBERS(Op::BitwiseXor, kCuda, arith_op<math::BitwiseXor>);
KILN_REGISTER_KERNEL_TAKING_NUMBERS(Op::ReluBackward, kCuda, arith_float_op<math::ReluBackward>);
KILN_REGISTER_KERNEL_TAKING_NUMBERS(Op::SigmoidBackward, kCuda, arith_float_op<math::SigmoidBackward>);
KILN_REGISTER_KERNEL_TAKING_NUMBERS(Op::TanhBackward, kCuda, arith_float_op<math::TanhBackward>);
KILN_REGISTER_KERNEL_TAKING_NUMBERS(Op::GeluErfBackward, kCuda, arith_float_op<math::GeluErfBackward>);
KILN_REGISTER_KERNEL_TAKING_NUMBERS(Op::GeluTanhBackward, kCuda, arith_float_op<math::GeluTanhBackward>);
KILN_REGISTER_KERNEL_TAKING_NUMBERS(Op::SiluBackward, kCuda, arith_float_op<math::SiluBackward>);

}  // namespace
}  // namespace kiln::backend::cuda
