// CUDA kernels for the binary arithmetic ops and the activations' backward helpers; the math is
// backend/math.h's, shared with the CPU loops. (The elementwise kernels are three translation
// units, _binary, _compare and _unary, so that none of them is a long pole of a parallel build.)
#include "backend/cuda/device/elementwise.cuh"
#include "backend/math.h"

namespace kiln::backend::cuda {
namespace {

constexpr DeviceType kCuda = DeviceType::CUDA;
KILN_REGISTER_KERNEL_TAKING_NUMBERS(Op::Add, kCuda, arith_op<math::Add>);
KILN_REGISTER_KERNEL_TAKING_NUMBERS(Op::Sub, kCuda, arith_op<math::Sub>);
KILN_REGISTER_KERNEL_TAKING_NUMBERS(Op::Mul, kCuda, arith_op<math::Mul>);
KILN_REGISTER_KERNEL_TAKING_NUMBERS(Op::Div, kCuda, arith_op<math::Div>);
KILN_REGISTER_KERNEL_TAKING_NUMBERS(Op::Pow, kCuda, arith_op<math::Pow>);
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
