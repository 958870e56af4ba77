// CUDA kernels for copy/convert (any strides, any two dtypes), fill, clamp, where, triangular
// masks, number generation and dropout: the same Philox counters and transforms as the CPU
// kernels, so a seed gives the same numbers and masks on both.
#include "backend/cuda/device/elementwise.cuh"
#include "backend/dropout_math.h"
#include "backend/math.h"
#include "core/philox.h"

namespace kiln::backend::cuda {
namespace {

// The CPU kernel's conversions (backend/cpu/misc.cpp): to bool is != 0; a float to an integer
// goes through int64, clamped, NaN as 0.
template <class To>
struct Convert {
  template <class X>
  __device__ __forceinline__ To operator()(X x) const {
    if constexpr (std::is_same_v<To, bool>) {
      return x != X(0);
    } else if constexpr (std::is_integral_v<To> && !std::is_integral_v<X>) {
      constexpr double kLimit = 9.2233720368547748e18;
      const double d = static_cast<double>(x);
      const int64_t i = d != d ? 0 : d >= kLimit ? INT64_MAX : d <= -kLimit ? INT64_MIN : static_cast<int64_t>(d);
      return static_cast<To>(i);
    } else {
      return static_cast<To>(x);
    }
  }
};

void copy(KernelArgs& a) {
  const Tensor &in = a.inputs[0], &out = a.outputs[0];
  // The same dtype and layout, both dense: one memcpy on the stream.
  if (in.dtype() == out.dtype() && in.shape() == out.shape() && in.strides() == out.strides() && in.is_contiguous()) {
    KILN_CUDA_CHECK(cudaMemcpyAsync(out.data_ptr(), in.data_ptr(), out.nbytes(), cudaMemcpyDeviceToDevice, stream_of(a)));
    return;
  }
  // A 16-bit float to its own dtype as bits: through float a NaN loses its sign and payload.
  if (in.dtype() == out.dtype() && (in.dtype() == kFloat16 || in.dtype() == kBFloat16))
    return unary_kernel<uint16_t, uint16_t>(a, Convert<uint16_t>{}, "copy");
  visit_dtype(out.dtype(), "copy", [&]<class To>() {
    visit_dtype(in.dtype(), "copy", [&]<class Ti>() { unary_kernel<To, Ti>(a, Convert<To>{}, "copy"); });
  });
}

template <class T>
struct Store {
  T value;
  __device__ __forceinline__ void operator()(char** p) const { *reinterpret_cast<T*>(p[0]) = value; }
};
void fill(KernelArgs& a) {
  const Tensor& out = a.outputs[0];
  const Scalar v = static_cast<const ScalarAttrs*>(a.attrs)->value;
  visit_dtype(out.dtype(), "fill", [&]<class T>() {
    launch_plan(make_plan<1>({&out}), Store<T>{v.to<T>()}, stream_of(a), "fill");
  });
}

template <class C>
struct Clamp {
  bool has_lo, has_hi;
  C lo, hi;
  __device__ __forceinline__ C operator()(C x) const { return math::clamp<C>(x, has_lo, lo, has_hi, hi); }
};
void clamp(KernelArgs& a) {
  const auto& c = *static_cast<const ClampAttrs*>(a.attrs);
  visit_dtype(a.inputs[0].dtype(), "clamp", [&]<class T>() {
    using C = compute_t<T>;
    unary_kernel<T, T>(a, Clamp<C>{c.has_min, c.has_max, c.lo<C>(), c.hi<C>()}, "clamp");
  });
}

template <class T>
struct Select {
  __device__ __forceinline__ void operator()(char** p) const {
    const bool c = *reinterpret_cast<const bool*>(p[1]);
    *reinterpret_cast<T*>(p[0]) = c ? *reinterpret_cast<const T*>(p[2]) : *reinterpret_cast<const T*>(p[3]);
  }
};
void where(KernelArgs& a) {
  const Tensor& out = a.outputs[0];
  visit_dtype(out.dtype(), "where", [&]<class T>() {
    launch_plan(make_plan<4>({&out, &a.inputs[0], &a.inputs[1], &a.inputs[2]}), Select<T>{}, stream_of(a), "where");
  });
}

// Zeroes each trailing [rows, cols] matrix above (tril) or below (triu) diagonal k; contiguous.
template <bool kUpper, class T>
__global__ void triangle_kernel(const T* src, T* dst, int64_t n, int64_t rows, int64_t cols, int64_t k) {
  KILN_GRID_STRIDE(e, n) {
    const int64_t j = e % cols, i = e / cols % rows;
    const bool keep = kUpper ? (j - i >= k) : (j - i <= k);
    dst[e] = keep ? src[e] : T(0);
  }
}
template <bool kUpper>
void triangle(KernelArgs& a) {
  const Tensor &in = a.inputs[0], &out = a.outputs[0];
  const int64_t k = static_cast<const TriAttrs*>(a.attrs)->diagonal;
  const int64_t n = in.numel();
  if (n == 0) return;
  visit_dtype(in.dtype(), "tril", [&]<class T>() {
    triangle_kernel<kUpper, T><<<blocks_for(n), kThreads, 0, stream_of(a)>>>(
        static_cast<const T*>(in.data_ptr()), static_cast<T*>(out.data_ptr()), n, in.size(-2), in.size(-1), k);
  });
  KILN_CUDA_LAUNCHED(kUpper ? "triu" : "tril");
}

// a + b * c rounded twice, as the CPU kernels' plain x86-64 code does (nvcc would contract it into
// one fused multiply-add: 1 ulp apart in float64, and now and then a float32 rounded differently).
__device__ __forceinline__ double add_product(double a, double b, double c) { return __dadd_rn(a, __dmul_rn(b, c)); }

template <class T>
__global__ void arange_kernel(T* o, int64_t n, ArangeAttrs r) {
  if (r.integral)  // as the CPU kernel: int64 values, unsigned arithmetic
    KILN_GRID_STRIDE(i, n) o[i] = static_cast<T>(static_cast<int64_t>(
        static_cast<uint64_t>(r.istart) + static_cast<uint64_t>(i) * static_cast<uint64_t>(r.istep)));
  else
    KILN_GRID_STRIDE(i, n) o[i] = static_cast<T>(add_product(r.start, static_cast<double>(i), r.step));
}
void arange(KernelArgs& a) {
  const auto& r = *static_cast<const ArangeAttrs*>(a.attrs);
  const Tensor& out = a.outputs[0];
  if (out.numel() == 0) return;
  visit_dtype(out.dtype(), "arange", [&]<class T>() {
    arange_kernel<T><<<blocks_for(out.numel()), kThreads, 0, stream_of(a)>>>(static_cast<T*>(out.data_ptr()), out.numel(),
                                                                            r);
  });
  KILN_CUDA_LAUNCHED("arange");
}

// Random numbers: thread c computes counter offset + c and writes its kPer values (see the CPU
// kernels: the same words go to the same elements).
struct UniformGen {
  double a, b;
  int bits;
  using Value = double;
  static constexpr int kPer = 4;
  __device__ void operator()(const philox::U32x4& w, double* v) const {
    for (int j = 0; j < 4; ++j) {
      const double u = add_product(a, b - a, philox::uniform01(w.v[j], bits));
      v[j] = u < b ? u : a;
    }
  }
};
struct NormalGen {
  double mean, std;
  using Value = double;
  static constexpr int kPer = 4;
  __device__ void operator()(const philox::U32x4& w, double* v) const {
    for (int pair = 0; pair < 2; ++pair) {
      double z0, z1;
      philox::box_muller(w.v[2 * pair], w.v[2 * pair + 1], &z0, &z1);
      v[2 * pair] = add_product(mean, std, z0);
      v[2 * pair + 1] = add_product(mean, std, z1);
    }
  }
};
struct RandIntGen {
  uint64_t low, range;  // [low, low + range) in two's complement
  using Value = int64_t;
  static constexpr int kPer = 2;
  __device__ void operator()(const philox::U32x4& w, int64_t* v) const {
    for (int j = 0; j < 2; ++j) {
      const uint64_t bits = (static_cast<uint64_t>(w.v[2 * j]) << 32) | w.v[2 * j + 1];
      v[j] = static_cast<int64_t>(low + __umul64hi(bits, range));
    }
  }
};

template <class T, class Gen>
__global__ void generate_kernel(T* o, int64_t n, uint64_t seed, uint64_t offset, Gen gen) {
  const int64_t blocks = (n + Gen::kPer - 1) / Gen::kPer;
  KILN_GRID_STRIDE(c, blocks) {
    typename Gen::Value v[Gen::kPer];
    gen(philox::philox(seed, offset + static_cast<uint64_t>(c)), v);
    const int64_t first = c * Gen::kPer;
    for (int j = 0; j < Gen::kPer && first + j < n; ++j) o[first + j] = static_cast<T>(v[j]);
  }
}
template <class Gen>
void generate(KernelArgs& a, const Gen& gen) {
  const auto& r = *static_cast<const RandomAttrs*>(a.attrs);
  const Tensor& out = a.outputs[0];
  const int64_t n = out.numel();
  if (n == 0) return;
  visit_dtype(out.dtype(), "random", [&]<class T>() {
    generate_kernel<T, Gen><<<blocks_for((n + Gen::kPer - 1) / Gen::kPer), kThreads, 0, stream_of(a)>>>(
        static_cast<T*>(out.data_ptr()), n, r.seed, r.offset, gen);
  });
  KILN_CUDA_LAUNCHED("random");
}

void uniform(KernelArgs& a) {
  const auto& r = *static_cast<const RandomAttrs*>(a.attrs);
  const ScalarType t = a.outputs[0].dtype();
  generate(a, UniformGen{r.a, r.b, t == kBFloat16 ? 8 : t == kFloat16 ? 11 : 24});
}
void normal(KernelArgs& a) {
  const auto& r = *static_cast<const RandomAttrs*>(a.attrs);
  generate(a, NormalGen{r.a, r.b});
}
void randint(KernelArgs& a) {
  const auto& r = *static_cast<const RandomAttrs*>(a.attrs);
  generate(a, RandIntGen{static_cast<uint64_t>(r.low), r.range});
}

// dropout: thread c computes counter offset + c and handles its four elements (the CPU kernel's
// words for the same elements); backward one thread per element.
template <class T, class C>
__global__ void dropout_kernel(const T* x, T* y, bool* keep, int64_t n, uint64_t seed, uint64_t offset,
                               uint32_t threshold, C scale) {
  KILN_GRID_STRIDE(c, (n + 3) / 4) {
    const philox::U32x4 w = philox::philox(seed, offset + static_cast<uint64_t>(c));
    for (int64_t j = 0, i = 4 * c; j < 4 && i < n; ++j, ++i) {
      const bool k = dropout_math::kept(w.v[j], threshold);
      keep[i] = k;
      y[i] = dropout_math::apply(x[i], k, scale);
    }
  }
}
template <class T, class C>
__global__ void dropout_backward_kernel(const T* g, const bool* keep, T* o, int64_t n, C scale) {
  KILN_GRID_STRIDE(i, n) o[i] = dropout_math::apply(g[i], keep[i], scale);
}

void dropout(KernelArgs& a) {
  const auto& d = *static_cast<const DropoutAttrs*>(a.attrs);
  const Tensor& x = a.inputs[0];
  const int64_t n = x.numel();
  if (n == 0) return;
  visit_float_dtype(x.dtype(), "dropout", [&]<class T>() {
    using C = compute_t<T>;
    dropout_kernel<T, C><<<blocks_for((n + 3) / 4), kThreads, 0, stream_of(a)>>>(
        static_cast<const T*>(x.data_ptr()), static_cast<T*>(a.outputs[0].data_ptr()),
        static_cast<bool*>(a.outputs[1].data_ptr()), n, d.seed, d.offset, dropout_math::keep_threshold(d.p),
        static_cast<C>(dropout_math::keep_scale(d.p)));
  });
  KILN_CUDA_LAUNCHED("dropout");
}
void dropout_backward(KernelArgs& a) {
  const auto& d = *static_cast<const DropoutAttrs*>(a.attrs);
  const Tensor& g = a.inputs[0];
  const int64_t n = g.numel();
  if (n == 0) return;
  visit_float_dtype(g.dtype(), "dropout_backward", [&]<class T>() {
    using C = compute_t<T>;
    dropout_backward_kernel<T, C><<<blocks_for(n), kThreads, 0, stream_of(a)>>>(
        static_cast<const T*>(g.data_ptr()), static_cast<const bool*>(a.inputs[1].data_ptr()),
        static_cast<T*>(a.outputs[0].data_ptr()), n, static_cast<C>(dropout_math::keep_scale(d.p)));
  });
  KILN_CUDA_LAUNCHED("dropout_backward");
}

constexpr DeviceType kCuda = DeviceType::CUDA;
KILN_REGISTER_KERNEL(Op::Copy, kCuda, copy);
KILN_REGISTER_KERNEL(Op::Fill, kCuda, fill);
KILN_REGISTER_KERNEL(Op::Clamp, kCuda, clamp);
KILN_REGISTER_KERNEL(Op::Where, kCuda, where);
KILN_REGISTER_KERNEL(Op::Tril, kCuda, triangle<false>);
KILN_REGISTER_KERNEL(Op::Triu, kCuda, triangle<true>);
KILN_REGISTER_KERNEL(Op::Arange, kCuda, arange);
KILN_REGISTER_KERNEL(Op::Uniform, kCuda, uniform);
KILN_REGISTER_KERNEL(Op::Normal, kCuda, normal);
KILN_REGISTER_KERNEL(Op::RandInt, kCuda, randint);
KILN_REGISTER_KERNEL(Op::Dropout, kCuda, dropout);
KILN_REGISTER_KERNEL(Op::DropoutBackward, kCuda, dropout_backward);

}  // namespace
}  // namespace kiln::backend::cuda
