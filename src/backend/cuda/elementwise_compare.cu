// CUDA kernels for the comparisons, logical ops and isnan/isinf/isfinite (bool outputs); the math is
// backend/math.h's.
#include "backend/cuda/device/elementwise.cuh"
#include "backend/math.h"

namespace kiln::backend::cuda {
namespace {

// logical_not, isnan, isinf, isfinite.
template <class F>
void classify(KernelArgs& a) {
  visit_dtype(a.inputs[0].dtype(), "elementwise", [&]<class T>() { unary_kernel<bool, T>(a, F{}, "classify"); });
}

constexpr DeviceType kCuda = DeviceType::CUDA;
KILN_REGISTER_KERNEL_TAKING_NUMBERS(Op::Eq, kCuda, predicate_op<math::Eq>);
KILN_REGISTER_KERNEL_TAKING_NUMBERS(Op::Ne, kCuda, predicate_op<math::Ne>);
KILN_REGISTER_KERNEL_TAKING_NUMBERS(Op::Lt, kCuda, predicate_op<math::Lt>);
KILN_REGISTER_KERNEL_TAKING_NUMBERS(Op::Le, kCuda, predicate_op<math::Le>);
KILN_REGISTER_KERNEL_TAKING_NUMBERS(Op::Gt, kCuda, predicate_op<math::Gt>);
KILN_REGISTER_KERNEL_TAKING_NUMBERS(Op::Ge, kCuda, predicate_op<math::Ge>);
KILN_REGISTER_KERNEL_TAKING_NUMBERS(Op::LogicalAnd, kCuda, predicate_op<math::LogicalAnd>);
KILN_REGISTER_KERNEL_TAKING_NUMBERS(Op::LogicalOr, kCuda, predicate_op<math::LogicalOr>);
KILN_REGISTER_KERNEL(Op::LogicalNot, kCuda, classify<math::LogicalNot>);
KILN_REGISTER_KERNEL(Op::IsNan, kCuda, classify<math::IsNan>);
KILN_REGISTER_KERNEL(Op::IsInf, kCuda, classify<math::IsInf>);
KILN_REGISTER_KERNEL(Op::IsFinite, kCuda, classify<math::IsFinite>);

}  // namespace
}  // namespace kiln::backend::cuda
