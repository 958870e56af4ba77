// The math of every elementwise op, as functors both the CPU loops and CUDA kernels include.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "kiln/dtype.h"

#if defined(__CUDACC__)
#define KILN_MATH_INLINE __forceinline__
namespace kiln::math {
template <class T> KILN_HOST_DEVICE T exp(T x) { return ::exp(x); }
template <class T> KILN_HOST_DEVICE T tanh(T x) { return ::tanh(x); }
template <class T> KILN_HOST_DEVICE T erf(T x) { return ::erf(x); }
template <class T> KILN_HOST_DEVICE T log(T x) { return ::log(x); }
template <class T> KILN_HOST_DEVICE T log1p(T x) { return ::log1p(x); }
template <class T> KILN_HOST_DEVICE T expm1(T x) { return ::expm1(x); }
template <class T, class V> KILN_HOST_DEVICE constexpr T K(V v) { return static_cast<T>(v); }
}  // namespace kiln::math
#else
#define KILN_MATH_INLINE __attribute__((always_inline))  // see vec_math.h: no vector calls across ISAs
// exp, tanh, erf, log, log1p, expm1 for float that vectorize, and math::Vec, the CPU loops' 16- or 8-lane type.
#include "backend/vec_math.h"
#endif

namespace kiln::math {

#define KILN_FN template <class T> KILN_HOST_DEVICE KILN_MATH_INLINE T operator()(T a, T b) const
#define KILN_PRED template <class T> KILN_HOST_DEVICE KILN_MATH_INLINE bool operator()(T a, T b) const
#define KILN_UN template <class T> KILN_HOST_DEVICE KILN_MATH_INLINE T operator()(T a) const

struct Add { KILN_FN { if constexpr (std::is_same_v<T, bool>) return a || b; else return a + b; } };
struct Sub { KILN_FN { return a - b; } };
struct Mul { KILN_FN { if constexpr (std::is_same_v<T, bool>) return a && b; else return a * b; } };
// Integer division rounding toward zero (C's / and %) with every case defined: by 0 the quotient and
// remainder are 0 (NumPy's answer), and the lowest value by -1 wraps (it traps in hardware).
template <class T>
KILN_HOST_DEVICE inline T int_quotient(T a, T b) {
  if (b == T(0)) return T(0);
  if constexpr (std::is_signed_v<T>) {
    if (b == T(-1)) return static_cast<T>(T(0) - static_cast<std::make_unsigned_t<T>>(a));
  }
  return static_cast<T>(a / b);
}
template <class T>
KILN_HOST_DEVICE inline T int_remainder(T a, T b) {
  if constexpr (std::is_signed_v<T>) {
    if (b == T(-1)) return T(0);
  }
  return b == T(0) ? T(0) : static_cast<T>(a % b);
}
// Whether a nonzero remainder r and the divisor b have opposite signs (then floor rounding moves).
template <class T>
KILN_HOST_DEVICE inline bool signs_differ(T r, T b) {
  if constexpr (std::is_unsigned_v<T>) return false;
  else return r != T(0) && ((r < T(0)) != (b < T(0)));
}
struct Div {
  KILN_FN {
    // Integers: only for rounded division asked for explicitly (true division promotes integers to
    // float in the op layer); toward zero.
    if constexpr (std::is_integral_v<T>) return int_quotient(a, b);
    else return a / b;
  }
};
// torch.div(rounding_mode="trunc"), torch.fmod, torch.floor_divide and torch.remainder, each as
// torch's kernels compute it (floats: the remainder exactly by fmod, the quotient from it).
struct TruncDivide { KILN_FN { if constexpr (std::is_integral_v<T>) return int_quotient(a, b); else return std::trunc(a / b); } };
struct Fmod { KILN_FN { if constexpr (std::is_integral_v<T>) return int_remainder(a, b); else return std::fmod(a, b); } };
struct Remainder {
  KILN_FN {
    const T r = Fmod{}(a, b);
    return signs_differ(r, b) ? static_cast<T>(r + b) : r;
  }
};
struct FloorDivide {
  KILN_FN {
    if constexpr (std::is_integral_v<T>) {
      const T q = int_quotient(a, b);
      return signs_differ(int_remainder(a, b), b) ? static_cast<T>(q - T(1)) : q;
    } else {
      if (b == T(0)) return a / b;
      const T r = std::fmod(a, b);
      T q = (a - r) / b;  // near an integer: (a - r) is a multiple of b, up to rounding
      if (signs_differ(r, b)) q -= T(1);
      if (q == T(0)) return std::copysign(T(0), a / b);
      T f = std::floor(q);
      if (q - f > T(0.5)) f += T(1);
      return f;
    }
  }
};
struct Atan2 { KILN_FN { return std::atan2(a, b); } };
// Integer and bool tensors only (the op layer refuses floats; their instances are never called).
struct BitwiseAnd { KILN_FN { if constexpr (std::is_integral_v<T>) return static_cast<T>(a & b); else return a; } };
struct BitwiseOr { KILN_FN { if constexpr (std::is_integral_v<T>) return static_cast<T>(a | b); else return a; } };
struct BitwiseXor { KILN_FN { if constexpr (std::is_integral_v<T>) return static_cast<T>(a ^ b); else return a; } };
struct Pow {
  KILN_FN {
    if constexpr (std::is_integral_v<T>) {
      if constexpr (std::is_same_v<T, bool>) {
        return a || !b;
      } else {
        if (b < 0) return a == 1 ? T(1) : (a == -1 ? T((b % 2) ? -1 : 1) : T(0));
        // In the unsigned type, where a product that overflows wraps (as torch's) instead of being
        // undefined; the base is squared only while bits of the exponent remain.
        using U = std::make_unsigned_t<T>;
        U r = 1, base = static_cast<U>(a);
        for (auto e = b; e > 0;) {
          if (e & 1) r = static_cast<U>(r * base);
          e >>= 1;
          if (e > 0) base = static_cast<U>(base * base);
        }
        return static_cast<T>(r);
      }
    } else {
      return std::pow(a, b);
    }
  }
};
// NaN-propagating, as torch.maximum.
struct Maximum { KILN_FN { if constexpr (std::is_floating_point_v<T>) { if (a != a || b != b) return a + b; } return a > b ? a : b; } };
struct Minimum { KILN_FN { if constexpr (std::is_floating_point_v<T>) { if (a != a || b != b) return a + b; } return a < b ? a : b; } };
struct Eq { KILN_PRED { return a == b; } };
struct Ne { KILN_PRED { return a != b; } };
struct Lt { KILN_PRED { return a < b; } };
struct Le { KILN_PRED { return a <= b; } };
struct Gt { KILN_PRED { return a > b; } };
struct Ge { KILN_PRED { return a >= b; } };
struct LogicalAnd { KILN_PRED { return (a != T(0)) && (b != T(0)); } };
struct LogicalOr { KILN_PRED { return (a != T(0)) || (b != T(0)); } };

inline constexpr double kSqrt1_2 = 0.70710678118654752440;
inline constexpr double kSqrt2OverPi = 0.79788456080286535588;
inline constexpr double kInvSqrt2Pi = 0.39894228040143267794;

// Backward helpers: (incoming gradient, saved value) -> gradient of the input. Those marked
// kVector also run on math::Vec (16 or 8 floats) in the CPU loops; their constants are K<T>(...).
struct ReluBackward { KILN_FN { return b > T(0) ? a : T(0); } };          // b = relu output
struct SigmoidBackward {                                                   // b = sigmoid output
  static constexpr bool kVector = true;
  KILN_FN { return a * b * (K<T>(1) - b); }
};
struct TanhBackward {                                                      // b = tanh output
  static constexpr bool kVector = true;
  KILN_FN { return a * (K<T>(1) - b * b); }
};
struct GeluErfBackward {                                                   // b = input
  static constexpr bool kVector = true;
  KILN_FN {
    T cdf = K<T>(0.5) * (K<T>(1) + math::erf(b * K<T>(kSqrt1_2)));
    T pdf = K<T>(kInvSqrt2Pi) * math::exp(K<T>(-0.5) * b * b);
    return a * (cdf + b * pdf);
  }
};
struct GeluTanhBackward {                                                  // b = input
  static constexpr bool kVector = true;
  KILN_FN {
    T inner = K<T>(kSqrt2OverPi) * (b + K<T>(0.044715) * b * b * b);
    T th = math::tanh(inner);
    T dinner = K<T>(kSqrt2OverPi) * (K<T>(1) + K<T>(3 * 0.044715) * b * b);
    return a * (K<T>(0.5) * (K<T>(1) + th) + K<T>(0.5) * b * (K<T>(1) - th * th) * dinner);
  }
};
struct SiluBackward {                                                      // b = input
  static constexpr bool kVector = true;
  KILN_FN {
    T s = K<T>(1) / (K<T>(1) + math::exp(-b));
    return a * s * (K<T>(1) + b * (K<T>(1) - s));
  }
};

struct Neg { KILN_UN { return static_cast<T>(-a); } };
struct BitwiseNot {
  KILN_UN {
    if constexpr (std::is_same_v<T, bool>) return !a;
    else if constexpr (std::is_integral_v<T>) return static_cast<T>(~a);
    else return a;
  }
};
// abs(-0.0) is +0.0, as torch's (a < 0 alone kept the minus sign: 1 / abs(-0.0) was -inf).
struct Abs {
  KILN_UN {
    if constexpr (std::is_unsigned_v<T>) return a;
    else return a < T(0) ? static_cast<T>(-a) : (a == T(0) ? T(0) : a);
  }
};
struct Sign { KILN_UN { return static_cast<T>((T(0) < a) - (a < T(0))); } };
struct Exp { static constexpr bool kVector = true; KILN_UN { return math::exp(a); } };
struct Log { static constexpr bool kVector = true; KILN_UN { return math::log(a); } };
struct Log1p { static constexpr bool kVector = true; KILN_UN { return math::log1p(a); } };
struct Expm1 { static constexpr bool kVector = true; KILN_UN { return math::expm1(a); } };
struct Sqrt { KILN_UN { return std::sqrt(a); } };
struct Rsqrt { KILN_UN { return T(1) / std::sqrt(a); } };
struct Square { KILN_UN { return static_cast<T>(a * a); } };
struct Reciprocal { KILN_UN { return T(1) / a; } };
struct Tanh { static constexpr bool kVector = true; KILN_UN { return math::tanh(a); } };
struct Sigmoid { static constexpr bool kVector = true; KILN_UN { return K<T>(1) / (K<T>(1) + math::exp(-a)); } };
struct Relu { KILN_UN { return a > T(0) ? a : (a != a ? a : T(0)); } };
// relu(a + b) (ResNet's residual join): each step in T, as the two ops one after the other.
struct AddRelu { KILN_FN { return Relu{}(Add{}(a, b)); } };
struct GeluErf {
  static constexpr bool kVector = true;
  KILN_UN { return K<T>(0.5) * a * (K<T>(1) + math::erf(a * K<T>(kSqrt1_2))); }
};
struct GeluTanh {
  static constexpr bool kVector = true;
  KILN_UN { return K<T>(0.5) * a * (K<T>(1) + math::tanh(K<T>(kSqrt2OverPi) * (a + K<T>(0.044715) * a * a * a))); }
};
struct Silu { static constexpr bool kVector = true; KILN_UN { return a / (K<T>(1) + math::exp(-a)); } };
struct Sin { KILN_UN { return std::sin(a); } };
struct Cos { KILN_UN { return std::cos(a); } };
struct Erf { static constexpr bool kVector = true; KILN_UN { return math::erf(a); } };
struct Log2 { KILN_UN { return std::log2(a); } };
struct Log10 { KILN_UN { return std::log10(a); } };
struct Exp2 { KILN_UN { return std::exp2(a); } };
// Rounding to an integer value: integers are their own (torch's floor of an int64 tensor).
// round is half to even (torch.round: nearbyint in the default rounding mode).
struct Floor { KILN_UN { if constexpr (std::is_integral_v<T>) return a; else return std::floor(a); } };
struct Ceil { KILN_UN { if constexpr (std::is_integral_v<T>) return a; else return std::ceil(a); } };
struct Round { KILN_UN { if constexpr (std::is_integral_v<T>) return a; else return std::nearbyint(a); } };
struct Trunc { KILN_UN { if constexpr (std::is_integral_v<T>) return a; else return std::trunc(a); } };
#define KILN_CLASS template <class T> KILN_HOST_DEVICE KILN_MATH_INLINE bool operator()(T a) const
struct LogicalNot { KILN_CLASS { return a == T(0); } };
struct IsNan { KILN_CLASS { return a != a; } };
// a - a is 0 for finite a, NaN for inf and NaN; integers are finite.
struct IsFinite { KILN_CLASS { if constexpr (std::is_integral_v<T>) return true; else return a - a == T(0); } };
struct IsInf { KILN_CLASS { if constexpr (std::is_integral_v<T>) return false; else return a == a && a - a != T(0); } };
#undef KILN_CLASS

// pow(x, e) with one exponent for every element (x.pow(2), a number): the exponents PyTorch also
// special-cases run as products, sqrt or a division, which vectorize on the CPU (libm's pow took
// 15 times as long as an add) and give the same bits on every device; pow's results at -0 and
// -inf are kept: sqrt(x) + 0 is +0 at -0 (sqrt's is -0), and -inf takes pow's value.
struct PowCube { KILN_UN { return a * a * a; } };
struct PowOne { KILN_UN { return a; } };
struct PowZero { KILN_UN { return T(1); } };
struct PowNegTwo { KILN_UN { return T(1) / (a * a); } };
struct PowHalf { KILN_UN { return a == T(-INFINITY) ? T(INFINITY) : std::sqrt(a) + T(0); } };
struct PowNegHalf { KILN_UN { return a == T(-INFINITY) ? T(0) : T(1) / (std::sqrt(a) + T(0)); } };
template <class C>
struct PowBy {
  C e;
  KILN_UN { return std::pow(a, static_cast<T>(e)); }
};
// Calls run(f) with f(x) = pow(x, e) for a floating exponent e (run launches the loop or kernel).
template <class C, class Run>
void with_pow_exponent(C e, Run&& run) {
  if (e == C(2)) run(Square{});
  else if (e == C(3)) run(PowCube{});
  else if (e == C(1)) run(PowOne{});
  else if (e == C(0)) run(PowZero{});
  else if (e == C(-1)) run(Reciprocal{});
  else if (e == C(-2)) run(PowNegTwo{});
  else if (e == C(0.5)) run(PowHalf{});
  else if (e == C(-0.5)) run(PowNegHalf{});
  else run(PowBy<C>{e});
}

// clamp(x, lo, hi) with NaN passing through, and a NaN bound giving NaN, as torch.clamp.
template <class T>
KILN_HOST_DEVICE T clamp(T x, bool has_lo, T lo, bool has_hi, T hi) {
  if (x != x) return x;
  if (has_lo && (x < lo || lo != lo)) x = lo;
  if (has_hi && (x > hi || hi != hi)) x = hi;
  return x;
}

// a * b + c, rounded once for floating point (a fused multiply-add): torch's CPU kernels compute
// addcmul and lerp so (GCC contracts them in its AVX-512 build; the CUDA compiler contracts them
// too), and Kiln's match theirs bit for bit. (A functor, as the rest: an always-inline member
// stays in the caller's instruction set, where a call would reach the baseline's libm fma.)
struct FusedMulAdd {
  template <class T>
  KILN_HOST_DEVICE KILN_MATH_INLINE T operator()(T a, T b, T c) const {
    if constexpr (std::is_integral_v<T>) {
      return static_cast<T>(a * b + c);
    } else if constexpr (std::is_same_v<T, float>) {
#if defined(__CUDA_ARCH__)
      return __fmaf_rn(a, b, c);
#else
      return std::fmaf(a, b, c);
#endif
    } else {
#if defined(__CUDA_ARCH__)
      return __fma_rn(a, b, c);
#else
      return std::fma(a, b, c);
#endif
    }
  }
};

// torch.addcmul and torch.addcdiv: self + value * t1 * t2 and self + value * t1 / t2, in torch's
// order of operations (value * t1 first) and roundings, in the compute type C.
template <class C>
struct Addcmul {
  C value;
  KILN_HOST_DEVICE KILN_MATH_INLINE C operator()(C self, C t1, C t2) const {
    return FusedMulAdd{}(static_cast<C>(value * t1), t2, self);
  }
};
// torch.add(self, other, alpha): self + alpha * other in one fused multiply-add (the Addcmul
// kernel's two-operand form).
template <class C>
struct AddScaled {
  C alpha;
  KILN_HOST_DEVICE KILN_MATH_INLINE C operator()(C self, C other) const { return FusedMulAdd{}(alpha, other, self); }
};
template <class C>
struct Addcdiv {
  C value;
  KILN_HOST_DEVICE KILN_MATH_INLINE C operator()(C self, C t1, C t2) const {
    return self + static_cast<C>(value * t1) / t2;
  }
};

// torch.lerp: start + weight * (end - start), from the far end for |weight| >= 0.5 (then it is
// exact at weight 1), each form one fused multiply-add, as torch's vector path.
struct Lerp {
  template <class C>
  KILN_HOST_DEVICE KILN_MATH_INLINE C operator()(C start, C end, C weight) const {
    const C d = end - start;
    // (w - 1) * d, not -d * (1 - w): the same but at w = 1, where torch's gives the zero d's sign.
    return weight < C(0.5) && weight > C(-0.5) ? FusedMulAdd{}(weight, d, start)
                                               : FusedMulAdd{}(d, static_cast<C>(weight - C(1)), end);
  }
};
template <class C>
struct LerpBy {  // one weight for all elements
  C weight;
  KILN_HOST_DEVICE KILN_MATH_INLINE C operator()(C start, C end) const { return Lerp{}(start, end, weight); }
};

#undef KILN_FN
#undef KILN_PRED
#undef KILN_UN

}  // namespace kiln::math
