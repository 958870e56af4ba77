// CUDA kernels for the unary math ops and the activations with parameters (leaky_relu, elu,
// softplus, hardtanh, and their gradients); the math is backend/math.h's and
// backend/activation_math.h's, shared with the CPU loops.
#include "backend/activation_math.h"
#include "backend/cuda/device/elementwise.cuh"
#include "backend/math.h"

namespace kiln::backend::cuda {
namespace {

void activation(KernelArgs& a) {
  const auto& attrs = *static_cast<const ActivationAttrs*>(a.attrs);
  visit_float_dtype(a.inputs[0].dtype(), "activation", [&]<class T>() {
    math::with_activation<compute_t<T>>(attrs, [&](auto f) { unary_kernel<T, T>(a, f, "activation"); });
  });
}

void activation_backward(KernelArgs& a) {
  const auto& attrs = *static_cast<const ActivationAttrs*>(a.attrs);
  visit_float_dtype(a.inputs[0].dtype(), "activation", [&]<class T>() {
    math::with_activation_backward<compute_t<T>>(attrs,
                                                 [&](auto f) { binary_kernel<T, T, T>(a, f, "activation_backward"); });
  });
}

constexpr DeviceType kCuda = DeviceType::CUDA;
KILN_REGISTER_KERNEL(Op::Neg, kCuda, unary_op<math::Neg>);
KILN_REGISTER_KERNEL(Op::BitwiseNot, kCuda, unary_op<math::BitwiseNot>);
KILN_REGISTER_KERNEL(Op::Abs, kCuda, unary_op<math::Abs>);
KILN_REGISTER_KERNEL(Op::Sign, kCuda, unary_op<math::Sign>);
KILN_REGISTER_KERNEL(Op::Square, kCuda, unary_op<math::Square>);
KILN_REGISTER_KERNEL(Op::Relu, kCuda, unary_op<math::Relu>);
KILN_REGISTER_KERNEL(Op::Exp, kCuda, unary_float_op<math::Exp>);
KILN_REGISTER_KERNEL(Op::Log, kCuda, unary_float_op<math::Log>);
KILN_REGISTER_KERNEL(Op::Log1p, kCuda, unary_float_op<math::Log1p>);
KILN_REGISTER_KERNEL(Op::Expm1, kCuda, unary_float_op<math::Expm1>);
KILN_REGISTER_KERNEL(Op::Sqrt, kCuda, unary_float_op<math::Sqrt>);
KILN_REGISTER_KERNEL(Op::Rsqrt, kCuda, unary_float_op<math::Rsqrt>);
KILN_REGISTER_KERNEL(Op::Reciprocal, kCuda, unary_float_op<math::Reciprocal>);
KILN_REGISTER_KERNEL(Op::Tanh, kCuda, unary_float_op<math::Tanh>);
KILN_REGISTER_KERNEL(Op::Sigmoid, kCuda, unary_float_op<math::Sigmoid>);
KILN_REGISTER_KERNEL(Op::GeluErf, kCuda, unary_float_op<math::GeluErf>);
KILN_REGISTER_KERNEL(Op::GeluTanh, kCuda, unary_float_op<math::GeluTanh>);
KILN_REGISTER_KERNEL(Op::Silu, kCuda, unary_float_op<math::Silu>);
KILN_REGISTER_KERNEL(Op::Sin, kCuda, unary_float_op<math::Sin>);
KILN_REGISTER_KERNEL(Op::Cos, kCuda, unary_float_op<math::Cos>);
KILN_REGISTER_KERNEL(Op::Erf, kCuda, unary_float_op<math::Erf>);
KILN_REGISTER_KERNEL(Op::Log2, kCuda, unary_float_op<math::Log2>);
KILN_REGISTER_KERNEL(Op::Log10, kCuda, unary_float_op<math::Log10>);
KILN_REGISTER_KERNEL(Op::Exp2, kCuda, unary_float_op<math::Exp2>);
KILN_REGISTER_KERNEL(Op::Floor, kCuda, unary_op<math::Floor>);
KILN_REGISTER_KERNEL(Op::Ceil, kCuda, unary_op<math::Ceil>);
KILN_REGISTER_KERNEL(Op::Round, kCuda, unary_op<math::Round>);
KILN_REGISTER_KERNEL(Op::Trunc, kCuda, unary_op<math::Trunc>);
KILN_REGISTER_KERNEL(Op::Activation, kCuda, activation);
KILN_REGISTER_KERNEL(Op::ActivationBackward, kCuda, activation_backward);

}  // namespace
}  // namespace kiln::backend::cuda
