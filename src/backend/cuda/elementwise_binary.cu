// CUDA kernels for the binary arithmetic ops and the activations' backward helpers; the math is
// backend/math.h's, shared with the CPU loops. (The elementwise kernels are three translation
// units, _binary, _compare and _unary, so that none of them is a long pole of a parallel build.)
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

constexpr DeviceType kCuda = DeviceType::CUDA;
KILN_REGISTER_KERNEL_TAKING_NUMBERS(Op::Add, kCuda, arith_op<math::Add>);
KILN_REGISTER_KERNEL_TAKING_NUMBERS(Op::Sub, kCuda, arith_op<math::Sub>);
KILN_REGISTER_KERNEL_TAKING_NUMBERS(Op::Mul, kCuda, arith_op<math::Mul>);
KILN_REGISTER_KERNEL_TAKING_NUMBERS(Op::Div, kCuda, arith_op<math::Div>);
KILN_REGISTER_KERNEL_TAKING_NUMBERS(Op::Pow, kCuda, pow_op);
KILN_REGISTER_KERNEL_TAKING_NUMBERS(Op::Maximum, kCuda, arith_op<math::Maximum>);
KILN_REGISTER_KERNEL_TAKING_NUMBERS(Op::Minimum, kCuda, arith_op<math::Minimum>);
KILN_REGISTER_KERNEL_TAKING_NUMBERS(Op::AddRelu, kCuda, arith_op<math::AddRelu>);
KILN_REGISTER_KERNEL_TAKING_NUMBERS(Op::ReluBackward, kCuda, arith_float_op<math::ReluBackward>);
KILN_REGISTER_KERNEL_TAKING_NUMBERS(Op::SigmoidBackward, kCuda, arith_float_op<math::SigmoidBackward>);
KILN_REGISTER_KERNEL_TAKING_NUMBERS(Op::TanhBackward, kCuda, arith_float_op<math::TanhBackward>);
KILN_REGISTER_KERNEL_TAKING_NUMBERS(Op::GeluErfBackward, kCuda, arith_float_op<math::GeluErfBackward>);
KILN_REGISTER_KERNEL_TAKING_NUMBERS(Op::GeluTanhBackward, kCuda, arith_float_op<math::GeluTanhBackward>);
KILN_REGISTER_KERNEL_TAKING_NUMBERS(Op::SiluBackward, kCuda, arith_float_op<math::SiluBackward>);

}  // namespace
}  // namespace kiln::backend::cuda
