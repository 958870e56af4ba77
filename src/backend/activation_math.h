// leaky_relu, elu, softplus and hardtanh: torch's formulas with torch.nn.functional's parameters,
// as functors holding their parameters, which the CPU loops and the CUDA kernels both run. The
// kernels' contract: forward {x} -> {y}, backward {grad_y, x} -> {grad_x}, all of x's floating
// dtype (16-bit floats computed in float32, as the other elementwise ops).
#pragma once

#include <cstdint>

#include "backend/math.h"

namespace kiln::backend {

struct ActivationAttrs {
  enum Kind : uint8_t { LeakyRelu, Elu, Softplus, Hardtanh } kind = LeakyRelu;
  // leaky_relu: a = negative_slope; elu: a = alpha; softplus: a = beta, b = threshold;
  // hardtanh: a = min_val, b = max_val.
  double a = 0, b = 0;
};

}  // namespace kiln::backend

namespace kiln::math {

// x > 0 ? x : slope x; the gradient g there, slope g elsewhere.
template <class C>
struct LeakyRelu {
  C slope;
  KILN_HOST_DEVICE KILN_MATH_INLINE C operator()(C x) const { return x > C(0) ? x : x * slope; }
};
template <class C>
struct LeakyReluBackward {
  C slope;
  KILN_HOST_DEVICE KILN_MATH_INLINE C operator()(C g, C x) const { return x > C(0) ? g : g * slope; }
};

// x > 0 ? x : alpha (e^x - 1); the gradient g there, g alpha e^x elsewhere (NaN at NaN, as torch's
// vector kernels give).
template <class C>
struct Elu {
  C alpha;
  KILN_HOST_DEVICE KILN_MATH_INLINE C operator()(C x) const { return x <= C(0) ? math::expm1(x) * alpha : x; }
};
template <class C>
struct EluBackward {
  C alpha;
  KILN_HOST_DEVICE KILN_MATH_INLINE C operator()(C g, C x) const { return x > C(0) ? g : g * alpha * math::exp(x); }
};

// log(1 + e^(beta x)) / beta, x itself where beta x > threshold; the gradient g e^(beta x) /
// (e^(beta x) + 1), g past the threshold.
template <class C>
struct Softplus {
  C beta, threshold;
  KILN_HOST_DEVICE KILN_MATH_INLINE C operator()(C x) const {
    return x * beta > threshold ? x : math::log1p(math::exp(x * beta)) / beta;
  }
};
template <class C>
struct SoftplusBackward {
  C beta, threshold;
  KILN_HOST_DEVICE KILN_MATH_INLINE C operator()(C g, C x) const {
    const C z = math::exp(x * beta);
    return x * beta > threshold ? g : g * z / (z + C(1));
  }
};

// x clamped to [lo, hi] (NaN stays NaN); the gradient g strictly inside, 0 at and past the ends and
// at NaN (torch's).
template <class C>
struct Hardtanh {
  C lo, hi;
  KILN_HOST_DEVICE KILN_MATH_INLINE C operator()(C x) const { return x < lo ? lo : (x > hi ? hi : x); }
};
template <class C>
struct HardtanhBackward {
  C lo, hi;
  KILN_HOST_DEVICE KILN_MATH_INLINE C operator()(C g, C x) const { return x > lo && x < hi ? g : C(0); }
};

// Calls f with the forward functor of `attrs` in type C (host code: a kernel's setup).
template <class C, class F>
void with_activation(const backend::ActivationAttrs& attrs, F&& f) {
  const C a = static_cast<C>(attrs.a), b = static_cast<C>(attrs.b);
  switch (attrs.kind) {
    case backend::ActivationAttrs::LeakyRelu: return f(LeakyRelu<C>{a});
    case backend::ActivationAttrs::Elu: return f(Elu<C>{a});
    case backend::ActivationAttrs::Softplus: return f(Softplus<C>{a, b});
    case backend::ActivationAttrs::Hardtanh: return f(Hardtanh<C>{a, b});
  }
}
// The same with the backward functor.
template <class C, class F>
void with_activation_backward(const backend::ActivationAttrs& attrs, F&& f) {
  const C a = static_cast<C>(attrs.a), b = static_cast<C>(attrs.b);
  switch (attrs.kind) {
    case backend::ActivationAttrs::LeakyRelu: return f(LeakyReluBackward<C>{a});
    case backend::ActivationAttrs::Elu: return f(EluBackward<C>{a});
    case backend::ActivationAttrs::Softplus: return f(SoftplusBackward<C>{a, b});
    case backend::ActivationAttrs::Hardtanh: return f(HardtanhBackward<C>{a, b});
  }
}

}  // namespace kiln::math
