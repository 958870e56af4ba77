// The elementwise engine of the CUDA kernels: the host builds the same LoopPlan as the CPU loops
// (broadcast inputs, merged dims, byte strides); each thread maps flat indices to the operands'
// addresses and applies a functor to their pointers. Dense, aligned operands go through a
// vectorised kernel instead (vector_plan.h): kVector elements per load and store.
#pragma once

#include <array>
#include <concepts>

#include "backend/cuda/device/common.cuh"
#include "backend/cuda/vector_plan.h"
#include "backend/loop_plan.h"

namespace kiln::backend::cuda {

// p's operand addresses for flat index i (row-major over the plan's dims).
template <int N>
__device__ __forceinline__ void plan_pointers(const LoopPlan<N>& p, int64_t i, char** ptrs) {
#pragma unroll
  for (int k = 0; k < N; ++k) ptrs[k] = p.base[k];
  for (int d = p.ndim - 1; d >= 0; --d) {
    const int64_t size = p.sizes[d];
    const int64_t q = i / size, r = i - q * size;
#pragma unroll
    for (int k = 0; k < N; ++k) ptrs[k] += r * p.strides[d][k];
    i = q;
  }
}

// One dim (dense or broadcast operands): the address is a multiply, no division.
template <int N, class F>
__global__ void elementwise_1d(LoopPlan<N> p, F f) {
  KILN_GRID_STRIDE(i, p.numel) {
    char* ptrs[N];
#pragma unroll
    for (int k = 0; k < N; ++k) ptrs[k] = p.base[k] + i * p.strides[0][k];
    f(ptrs);
  }
}

template <int N, class F>
__global__ void elementwise_nd(LoopPlan<N> p, F f) {
  KILN_GRID_STRIDE(i, p.numel) {
    char* ptrs[N];
    plan_pointers(p, i, ptrs);
    f(ptrs);
  }
}

// kVector elements of each operand in one load or store.
template <class T, int V>
struct alignas(sizeof(T) * V) Vec {
  T v[V];
};
template <class T, int V>
__device__ __forceinline__ Vec<T, V> load_vec(const char* base, int64_t i) {
  return *reinterpret_cast<const Vec<T, V>*>(base + i * static_cast<int64_t>(sizeof(T)));
}
template <class T, int V>
__device__ __forceinline__ void store_vec(char* base, int64_t i, const Vec<T, V>& v) {
  *reinterpret_cast<Vec<T, V>*>(base + i * static_cast<int64_t>(sizeof(T))) = v;
}

// A functor with a vectorised form: its operands' element sizes (kSizes, in plan order) and
// vec<V>(base, i), which does elements i .. i + V - 1 of dense operands.
template <class F, int N>
concept Vectorised = requires(const F& f, char* const* base) {
  { F::kSizes } -> std::convertible_to<std::array<int, static_cast<size_t>(N)>>;
  f.template vec<kVector>(base, int64_t{0});
};

template <int N, class F>
__global__ void elementwise_vec(LoopPlan<N> p, F f, VectorSplit split) {
  KILN_GRID_STRIDE(v, split.vectors) f.template vec<kVector>(p.base, v * kVector);
  const int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (g < split.tail) {
    char* ptrs[N];
#pragma unroll
    for (int k = 0; k < N; ++k) ptrs[k] = p.base[k] + (split.tail_begin + g) * p.strides[0][k];
    f(ptrs);
  }
}

// Runs f(ptrs) for every element of the plan's operands on `stream`.
template <int N, class F>
void launch_plan(const LoopPlan<N>& p, F f, cudaStream_t stream, const char* name) {
  if (p.numel == 0) return;
  if constexpr (Vectorised<F, N>) {
    if (vector_width(p, F::kSizes) == kVector) {
      const VectorSplit split = vector_split(p.numel, kVector);
      elementwise_vec<N><<<blocks_for(split.vectors), kThreads, 0, stream>>>(p, f, split);
      KILN_CUDA_LAUNCHED(name);
      return;
    }
  }
  if (p.ndim <= 1) {
    LoopPlan<N> q = p;
    if (q.ndim == 0) {  // one element: a 1-d plan of size 1
      q.ndim = 1;
      for (int k = 0; k < N; ++k) q.strides[0][k] = 0;
    }
    elementwise_1d<N><<<blocks_for(q.numel), kThreads, 0, stream>>>(q, f);
  } else {
    elementwise_nd<N><<<blocks_for(p.numel), kThreads, 0, stream>>>(p, f);
  }
  KILN_CUDA_LAUNCHED(name);
}

// out = f(a) and out = f(a, b) with the CPU loops' conversions: operands widen to compute_t,
// the result converts to the output's type.
template <class To, class Ta, class F>
struct UnaryFn {
  F f;
  static constexpr std::array<int, 2> kSizes{sizeof(To), sizeof(Ta)};
  __device__ __forceinline__ void operator()(char** p) const {
    *reinterpret_cast<To*>(p[0]) = static_cast<To>(f(static_cast<compute_t<Ta>>(*reinterpret_cast<const Ta*>(p[1]))));
  }
  template <int V>
  __device__ __forceinline__ void vec(char* const* base, int64_t i) const {
    const Vec<Ta, V> a = load_vec<Ta, V>(base[1], i);
    Vec<To, V> o;
#pragma unroll
    for (int j = 0; j < V; ++j) o.v[j] = static_cast<To>(f(static_cast<compute_t<Ta>>(a.v[j])));
    store_vec<To, V>(base[0], i, o);
  }
};
template <class To, class Ta, class Tb, class F>
struct BinaryFn {
  F f;
  static constexpr std::array<int, 3> kSizes{sizeof(To), sizeof(Ta), sizeof(Tb)};
  __device__ __forceinline__ void operator()(char** p) const {
    *reinterpret_cast<To*>(p[0]) = static_cast<To>(f(static_cast<compute_t<Ta>>(*reinterpret_cast<const Ta*>(p[1])),
                                                     static_cast<compute_t<Tb>>(*reinterpret_cast<const Tb*>(p[2]))));
  }
  template <int V>
  __device__ __forceinline__ void vec(char* const* base, int64_t i) const {
    const Vec<Ta, V> a = load_vec<Ta, V>(base[1], i);
    const Vec<Tb, V> b = load_vec<Tb, V>(base[2], i);
    Vec<To, V> o;
#pragma unroll
    for (int j = 0; j < V; ++j)
      o.v[j] = static_cast<To>(f(static_cast<compute_t<Ta>>(a.v[j]), static_cast<compute_t<Tb>>(b.v[j])));
    store_vec<To, V>(base[0], i, o);
  }
};

// out = f(a, b, c), all of one dtype T (addcmul, addcdiv, lerp).
template <class T, class F>
struct TernaryFn {
  F f;
  using C = compute_t<T>;
  static constexpr std::array<int, 4> kSizes{sizeof(T), sizeof(T), sizeof(T), sizeof(T)};
  __device__ __forceinline__ void operator()(char** p) const {
    *reinterpret_cast<T*>(p[0]) = static_cast<T>(f(static_cast<C>(*reinterpret_cast<const T*>(p[1])),
                                                   static_cast<C>(*reinterpret_cast<const T*>(p[2])),
                                                   static_cast<C>(*reinterpret_cast<const T*>(p[3]))));
  }
  template <int V>
  __device__ __forceinline__ void vec(char* const* base, int64_t i) const {
    const Vec<T, V> a = load_vec<T, V>(base[1], i), b = load_vec<T, V>(base[2], i), c = load_vec<T, V>(base[3], i);
    Vec<T, V> o;
#pragma unroll
    for (int j = 0; j < V; ++j)
      o.v[j] = static_cast<T>(f(static_cast<C>(a.v[j]), static_cast<C>(b.v[j]), static_cast<C>(c.v[j])));
    store_vec<T, V>(base[0], i, o);
  }
};

template <class To, class Ta, class F>
void unary_kernel(const KernelArgs& a, F f, const char* name) {
  launch_plan(make_plan<2>({&a.outputs[0], &a.inputs[0]}), UnaryFn<To, Ta, F>{f}, stream_of(a), name);
}
// f with its second (BindB) or first (BindA) operand fixed: a number passed as a kernel argument,
// so that out = f(a, number) and out = f(number, a) are unary kernels over a.
template <class F, class B>
struct BindB {
  F f;
  B b;
  template <class T>
  __device__ __forceinline__ auto operator()(T x) const {
    return f(x, b);
  }
};
template <class F, class A>
struct BindA {
  F f;
  A a;
  template <class T>
  __device__ __forceinline__ auto operator()(T y) const {
    return f(a, y);
  }
};
// A number's value: a CPU operand is a 0-d tensor (perhaps expanded), one element at data_ptr(),
// read in its own dtype (a float32 number with a 16-bit tensor: the op layer's opmath rule).
template <class T>
compute_t<T> host_number(const Tensor& t) {
  compute_t<T> v{};
  visit_dtype(t.dtype(), "elementwise", [&]<class U>() {
    v = static_cast<compute_t<T>>(static_cast<compute_t<U>>(*static_cast<const U*>(t.data_ptr())));
  });
  return v;
}

// out = f(a, b); an operand on the CPU is a number (the kernel is registered with
// KILN_REGISTER_KERNEL_TAKING_NUMBERS) and goes by value, with the same conversions.
template <class To, class Ta, class Tb, class F>
void binary_kernel(const KernelArgs& a, F f, const char* name) {
  const Tensor &out = a.outputs[0], &x = a.inputs[0], &y = a.inputs[1];
  const bool host_x = x.device().is_cpu(), host_y = y.device().is_cpu();
  // Two numbers make a CPU op (common_device), and an in-place op's self is on the device.
  KILN_CHECK(!(host_x && host_y), name, "both operands of a device kernel are on the host");
  if (out.numel() == 0) return;
  cudaStream_t stream = stream_of(a);
  if (host_y)
    launch_plan(make_plan<2>({&out, &x}), UnaryFn<To, Ta, BindB<F, compute_t<Tb>>>{{f, host_number<Tb>(y)}}, stream,
                name);
  else if (host_x)
    launch_plan(make_plan<2>({&out, &y}), UnaryFn<To, Tb, BindA<F, compute_t<Ta>>>{{f, host_number<Ta>(x)}}, stream,
                name);
  else
    launch_plan(make_plan<3>({&out, &x, &y}), BinaryFn<To, Ta, Tb, F>{f}, stream, name);
}

// The per-dtype entry points the elementwise kernel files register, one per kind of op. Inputs
// already have the compute dtype (the op layer casts); the output has it too. The binary kernels
// take C++ numbers (0-d CPU tensors) by value, with no copy to the device.
// The output's dtype is the tensors' (a number may be float32 with 16-bit tensors: host_number).
template <class F>
void arith_op(KernelArgs& a) {
  visit_dtype(a.outputs[0].dtype(), "elementwise", [&]<class T>() { binary_kernel<T, T, T>(a, F{}, "arith"); });
}
template <class F>
void arith_float_op(KernelArgs& a) {
  visit_float_dtype(a.inputs[0].dtype(), "elementwise", [&]<class T>() { binary_kernel<T, T, T>(a, F{}, "arith"); });
}
// Comparisons and logical ops: bool output.
template <class F>
void predicate_op(KernelArgs& a) {
  visit_dtype(a.inputs[0].dtype(), "elementwise", [&]<class T>() { binary_kernel<bool, T, T>(a, F{}, "predicate"); });
}
template <class F>
void unary_op(KernelArgs& a) {
  visit_dtype(a.inputs[0].dtype(), "elementwise", [&]<class T>() { unary_kernel<T, T>(a, F{}, "unary"); });
}
template <class F>
void unary_float_op(KernelArgs& a) {
  visit_float_dtype(a.inputs[0].dtype(), "elementwise", [&]<class T>() { unary_kernel<T, T>(a, F{}, "unary"); });
}

}  // namespace kiln::backend::cuda
