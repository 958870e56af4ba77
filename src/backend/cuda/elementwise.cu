// CUDA kernels for the elementwise ops: arithmetic, comparisons, unary math and their backward
// helpers; the math is backend/math.h's, shared with the CPU loops.
#include "backend/cuda/device/elementwise.cuh"
#include "backend/math.h"

namespace kiln::backend::cuda {
namespace {

// Inputs already have the compute dtype (the op layer casts); the output has it too. The binary
// kernels take C++ numbers (0-d CPU tensors) by value, with no copy to the device.
template <class F>
void arith(KernelArgs& a) {
  visit_dtype(a.inputs[0].dtype(), "elementwise", [&]<class T>() { binary_kernel<T, T, T>(a, F{}, "arith"); });
}
template <class F>
void arith_float(KernelArgs& a) {
  visit_float_dtype(a.inputs[0].dtype(), "elementwise", [&]<class T>() { binary_kernel<T, T, T>(a, F{}, "arith"); });
}
// Comparisons and logical ops: bool output.
template <class F>
void predicate(KernelArgs& a) {
  visit_dtype(a.inputs[0].dtype(), "elementwise", [&]<class T>() { binary_kernel<bool, T, T>(a, F{}, "predicate"); });
}
template <class F>
void unary(KernelArgs& a) {
  visit_dtype(a.inputs[0].dtype(), "elementwise", [&]<class T>() { unary_kernel<T, T>(a, F{}, "unary"); });
}
template <class F>
void unary_float(KernelArgs& a) {
  visit_float_dtype(a.inputs[0].dtype(), "elementwise", [&]<class T>() { unary_kernel<T, T>(a, F{}, "unary"); });
}

struct IsZero {
  template <class T>
  __device__ bool operator()(T x) const { return x == T(0); }
};
void logical_not(KernelArgs& a) {
  visit_dtype(a.inputs[0].dtype(), "logical_not", [&]<class T>() { unary_kernel<bool, T>(a, IsZero{}, "logical_not"); });
}

constexpr DeviceType kCuda = DeviceType::CUDA;
KILN_REGISTER_KERNEL_TAKING_NUMBERS(Op::Add, kCuda, arith<math::Add>);
KILN_REGISTER_KERNEL_TAKING_NUMBERS(Op::Sub, kCuda, arith<math::Sub>);
KILN_REGISTER_KERNEL_TAKING_NUMBERS(Op::Mul, kCuda, arith<math::Mul>);
KILN_REGISTER_KERNEL_TAKING_NUMBERS(Op::Div, kCuda, arith<math::Div>);
KILN_REGISTER_KERNEL_TAKING_NUMBERS(Op::Pow, kCuda, arith<math::Pow>);
KILN_REGISTER_KERNEL_TAKING_NUMBERS(Op::Maximum, kCuda, arith<math::Maximum>);
KILN_REGISTER_KERNEL_TAKING_NUMBERS(Op::Minimum, kCuda, arith<math::Minimum>);
KILN_REGISTER_KERNEL_TAKING_NUMBERS(Op::AddRelu, kCuda, arith<math::AddRelu>);
KILN_REGISTER_KERNEL_TAKING_NUMBERS(Op::Eq, kCuda, predicate<math::Eq>);
KILN_REGISTER_KERNEL_TAKING_NUMBERS(Op::Ne, kCuda, predicate<math::Ne>);
KILN_REGISTER_KERNEL_TAKING_NUMBERS(Op::Lt, kCuda, predicate<math::Lt>);
KILN_REGISTER_KERNEL_TAKING_NUMBERS(Op::Le, kCuda, predicate<math::Le>);
KILN_REGISTER_KERNEL_TAKING_NUMBERS(Op::Gt, kCuda, predicate<math::Gt>);
KILN_REGISTER_KERNEL_TAKING_NUMBERS(Op::Ge, kCuda, predicate<math::Ge>);
KILN_REGISTER_KERNEL_TAKING_NUMBERS(Op::LogicalAnd, kCuda, predicate<math::LogicalAnd>);
KILN_REGISTER_KERNEL_TAKING_NUMBERS(Op::LogicalOr, kCuda, predicate<math::LogicalOr>);
KILN_REGISTER_KERNEL_TAKING_NUMBERS(Op::ReluBackward, kCuda, arith_float<math::ReluBackward>);
KILN_REGISTER_KERNEL_TAKING_NUMBERS(Op::SigmoidBackward, kCuda, arith_float<math::SigmoidBackward>);
KILN_REGISTER_KERNEL_TAKING_NUMBERS(Op::TanhBackward, kCuda, arith_float<math::TanhBackward>);
KILN_REGISTER_KERNEL_TAKING_NUMBERS(Op::GeluErfBackward, kCuda, arith_float<math::GeluErfBackward>);
KILN_REGISTER_KERNEL_TAKING_NUMBERS(Op::GeluTanhBackward, kCuda, arith_float<math::GeluTanhBackward>);
KILN_REGISTER_KERNEL_TAKING_NUMBERS(Op::SiluBackward, kCuda, arith_float<math::SiluBackward>);
KILN_REGISTER_KERNEL(Op::Neg, kCuda, unary<math::Neg>);
KILN_REGISTER_KERNEL(Op::Abs, kCuda, unary<math::Abs>);
KILN_REGISTER_KERNEL(Op::Sign, kCuda, unary<math::Sign>);
KILN_REGISTER_KERNEL(Op::Square, kCuda, unary<math::Square>);
KILN_REGISTER_KERNEL(Op::Relu, kCuda, unary<math::Relu>);
KILN_REGISTER_KERNEL(Op::Exp, kCuda, unary_float<math::Exp>);
KILN_REGISTER_KERNEL(Op::Log, kCuda, unary_float<math::Log>);
KILN_REGISTER_KERNEL(Op::Log1p, kCuda, unary_float<math::Log1p>);
KILN_REGISTER_KERNEL(Op::Expm1, kCuda, unary_float<math::Expm1>);
KILN_REGISTER_KERNEL(Op::Sqrt, kCuda, unary_float<math::Sqrt>);
KILN_REGISTER_KERNEL(Op::Rsqrt, kCuda, unary_float<math::Rsqrt>);
KILN_REGISTER_KERNEL(Op::Reciprocal, kCuda, unary_float<math::Reciprocal>);
KILN_REGISTER_KERNEL(Op::Tanh, kCuda, unary_float<math::Tanh>);
KILN_REGISTER_KERNEL(Op::Sigmoid, kCuda, unary_float<math::Sigmoid>);
KILN_REGISTER_KERNEL(Op::GeluErf, kCuda, unary_float<math::GeluErf>);
KILN_REGISTER_KERNEL(Op::GeluTanh, kCuda, unary_float<math::GeluTanh>);
KILN_REGISTER_KERNEL(Op::Silu, kCuda, unary_float<math::Silu>);
KILN_REGISTER_KERNEL(Op::Sin, kCuda, unary_float<math::Sin>);
KILN_REGISTER_KERNEL(Op::Cos, kCuda, unary_float<math::Cos>);
KILN_REGISTER_KERNEL(Op::LogicalNot, kCuda, logical_not);


}  // namespace
}  // namespace kiln::backend::cuda
