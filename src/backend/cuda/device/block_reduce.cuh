// Warp-shuffle and block reductions for the row kernels (reductions, softmax, layer norm, losses):
// one tree shape for every file, so results do not depend on which kernel summed them.
#pragma once

#include <cstring>
#include <type_traits>

#include "backend/cuda/device/common.cuh"
#include "backend/cuda/launch_shape.h"
#include "backend/cuda/reduce_ops.h"

namespace kiln::backend::cuda {

// kWarp and ThreadGroups are in launch_shape.h, SumOp, MaxOp and MinOp in reduce_ops.h.

// __shfl_xor_sync over the whole warp for any trivially copyable T: built-in arithmetic types
// directly, anything else (a struct of partial results) as 32-bit words.
template <class T>
__device__ __forceinline__ T shfl_xor(T v, int offset) {
  if constexpr (std::is_arithmetic_v<T> && sizeof(T) >= 4) {
    return __shfl_xor_sync(0xffffffffu, v, offset);
  } else if constexpr (std::is_integral_v<T>) {  // bool, 8/16-bit integers
    return static_cast<T>(__shfl_xor_sync(0xffffffffu, static_cast<int>(v), offset));
  } else {
    constexpr int kWords = (sizeof(T) + 3) / 4;
    unsigned w[kWords] = {};
    memcpy(w, &v, sizeof(T));
#pragma unroll
    for (int k = 0; k < kWords; ++k) w[k] = __shfl_xor_sync(0xffffffffu, w[k], offset);
    memcpy(&v, w, sizeof(T));
    return v;
  }
}

// The reduction of v over the 32 lanes of a warp, in every lane.
template <class T, class Op>
__device__ __forceinline__ T warp_reduce(T v, Op op) {
#pragma unroll
  for (int offset = kWarp / 2; offset > 0; offset /= 2) v = op(v, shfl_xor(v, offset));
  return v;
}

// The reduction of v over the whole block, in every thread. `shared` holds one T per warp
// (blockDim.x / 32 of them, at most 32); blockDim.x is a multiple of 32. Every thread of the
// block must call it; it synchronises, so `shared` may be reused right after.
template <class T, class Op>
__device__ __forceinline__ T block_reduce(T v, Op op, T identity, T* shared) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int warps = blockDim.x / kWarp;
  v = warp_reduce(v, op);
  __syncthreads();  // a previous use of `shared` is finished
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < warps ? shared[lane] : identity;
  return warp_reduce(v, op);
}

// The reduction of v over the lanes of each group (ThreadGroups, launch_shape.h), in every
// thread of the group. `shared` holds blockDim.x T. Every thread of the block must call it (it
// synchronises unless group is 1, and starts with a barrier, so `shared` may be reused by the
// next call).
template <class T, class Op>
__device__ __forceinline__ T group_reduce(T v, Op op, T identity, const ThreadGroups& g, T* shared) {
  if (g.group == 1) return v;
  if (!g.interleaved && g.group <= kWarp) {  // groups inside a warp: shuffles only
    for (int offset = g.group / 2; offset > 0; offset /= 2) v = op(v, shfl_xor(v, offset));
    return v;
  }
  if (!g.interleaved && g.group == static_cast<int>(blockDim.x)) return block_reduce(v, op, identity, shared);
  // A tree in shared memory: lane l folds in lane l + s, s = group / 2, ..., 1.
  const int t = threadIdx.x, lane = g.lane();
  const int stride = g.interleaved ? g.slots : 1;
  __syncthreads();  // a previous use of `shared` is finished
  shared[t] = v;
  __syncthreads();
  for (int s = g.group / 2; s > 0; s /= 2) {
    if (lane < s) shared[t] = op(shared[t], shared[t + s * stride]);
    __syncthreads();
  }
  return shared[t - lane * stride];  // lane 0 of this group
}

}  // namespace kiln::backend::cuda
