// The CPU kernels of leaky_relu, elu, softplus and hardtanh and their gradients
// (backend/activation_math.h's functors in the elementwise loops).
#include "backend/activation_math.h"
#include "backend/cpu/loops.h"
#include "backend/dispatch.h"

namespace kiln::backend::cpu {
namespace {

void activation(KernelArgs& a) {
  const auto& attrs = *static_cast<const ActivationAttrs*>(a.attrs);
  visit_float_dtype(a.inputs[0].dtype(), "activation", [&]<class T>() {
    math::with_activation<compute_t<T>>(attrs, [&](auto f) { unary_loop<T, T>(a.outputs[0], a.inputs[0], f); });
  });
}

void activation_backward(KernelArgs& a) {
  const auto& attrs = *static_cast<const ActivationAttrs*>(a.attrs);
  visit_float_dtype(a.inputs[0].dtype(), "activation", [&]<class T>() {
    math::with_activation_backward<compute_t<T>>(
        attrs, [&](auto f) { binary_loop<T, T, T>(a.outputs[0], a.inputs[0], a.inputs[1], f); });
  });
}

KILN_REGISTER_KERNEL(Op::Activation, DeviceType::CPU, activation);
KILN_REGISTER_KERNEL(Op::ActivationBackward, DeviceType::CPU, activation_backward);

}  // namespace
}  // namespace kiln::backend::cpu
