// The elementwise engine of the CUDA kernels: the host builds the same LoopPlan as the CPU loops
// (broadcast inputs, merged dims, byte strides); each thread maps flat indices to the operands'
// addresses and applies a functor to their pointers.
#pragma once

#include "backend/cuda/device/common.cuh"
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

// Runs f(ptrs) for every element of the plan's operands on `stream`.
template <int N, class F>
void launch_plan(const LoopPlan<N>& p, F f, cudaStream_t stream, const char* name) {
  if (p.numel == 0) return;
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
  __device__ __forceinline__ void operator()(char** p) const {
    *reinterpret_cast<To*>(p[0]) = static_cast<To>(f(static_cast<compute_t<Ta>>(*reinterpret_cast<const Ta*>(p[1]))));
  }
};
template <class To, class Ta, class Tb, class F>
struct BinaryFn {
  F f;
  __device__ __forceinline__ void operator()(char** p) const {
    *reinterpret_cast<To*>(p[0]) = static_cast<To>(f(static_cast<compute_t<Ta>>(*reinterpret_cast<const Ta*>(p[1])),
                                                     static_cast<compute_t<Tb>>(*reinterpret_cast<const Tb*>(p[2]))));
  }
};

template <class To, class Ta, class F>
void unary_kernel(const KernelArgs& a, F f, const char* name) {
  launch_plan(make_plan<2>({&a.outputs[0], &a.inputs[0]}), UnaryFn<To, Ta, F>{f}, stream_of(a), name);
}
// out = f(a, number) and out = f(number, a): the number is a kernel argument.
template <class To, class Ta, class Tb, class F>
struct BinaryNumberB {
  F f;
  compute_t<Tb> b;
  __device__ __forceinline__ void operator()(char** p) const {
    *reinterpret_cast<To*>(p[0]) = static_cast<To>(f(static_cast<compute_t<Ta>>(*reinterpret_cast<const Ta*>(p[1])), b));
  }
};
template <class To, class Ta, class Tb, class F>
struct BinaryNumberA {
  F f;
  compute_t<Ta> a;
  __device__ __forceinline__ void operator()(char** p) const {
    *reinterpret_cast<To*>(p[0]) = static_cast<To>(f(a, static_cast<compute_t<Tb>>(*reinterpret_cast<const Tb*>(p[1]))));
  }
};
template <class To>
struct Constant {
  To v;
  __device__ __forceinline__ void operator()(char** p) const { *reinterpret_cast<To*>(p[0]) = v; }
};

// A number's value: a CPU operand is a 0-d tensor (perhaps expanded), one element at data_ptr().
template <class T>
compute_t<T> host_number(const Tensor& t) {
  return static_cast<compute_t<T>>(*static_cast<const T*>(t.data_ptr()));
}

// out = f(a, b); an operand on the CPU is a number (the kernel is registered with
// KILN_REGISTER_KERNEL_TAKING_NUMBERS) and goes by value, with the same conversions.
template <class To, class Ta, class Tb, class F>
void binary_kernel(const KernelArgs& a, F f, const char* name) {
  const Tensor &out = a.outputs[0], &x = a.inputs[0], &y = a.inputs[1];
  const bool host_x = x.device().is_cpu(), host_y = y.device().is_cpu();
  if (out.numel() == 0) return;
  cudaStream_t stream = stream_of(a);
  if (host_x && host_y)
    launch_plan(make_plan<1>({&out}), Constant<To>{static_cast<To>(f(host_number<Ta>(x), host_number<Tb>(y)))}, stream,
                name);
  else if (host_y)
    launch_plan(make_plan<2>({&out, &x}), BinaryNumberB<To, Ta, Tb, F>{f, host_number<Tb>(y)}, stream, name);
  else if (host_x)
    launch_plan(make_plan<2>({&out, &y}), BinaryNumberA<To, Ta, Tb, F>{f, host_number<Ta>(x)}, stream, name);
  else
    launch_plan(make_plan<3>({&out, &x, &y}), BinaryFn<To, Ta, Tb, F>{f}, stream, name);
}

}  // namespace kiln::backend::cuda
