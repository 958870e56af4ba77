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
template <class To, class Ta, class Tb, class F>
void binary_kernel(const KernelArgs& a, F f, const char* name) {
  launch_plan(make_plan<3>({&a.outputs[0], &a.inputs[0], &a.inputs[1]}), BinaryFn<To, Ta, Tb, F>{f}, stream_of(a), name);
}

}  // namespace kiln::backend::cuda
