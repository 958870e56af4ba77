// Row kernels over a [rows, n] tensor: each row is handled by one warp (short rows, several rows
// per block) or by the whole block (long rows). RowGroup<kWarpRows> gives a thread its rows, its
// lane in the row, and the reduction over the row's threads, so one kernel body serves both.
#pragma once

#include "backend/cuda/device/block_reduce.cuh"

namespace kiln::backend::cuda {

// kWarpRowMax (rows of at most this many elements get a warp each) and row_blocks(), the blocks
// for a launch, are in launch_shape.h.

template <bool kWarpRows>
struct RowGroup {
  // The thread's position among its row's threads, and how many they are.
  __device__ int lane() const { return kWarpRows ? static_cast<int>(threadIdx.x % kWarp) : static_cast<int>(threadIdx.x); }
  __device__ int size() const { return kWarpRows ? kWarp : static_cast<int>(blockDim.x); }
  // Rows are visited first_row(), first_row() + row_stride(), ... (a grid-stride loop). The loop
  // condition is the same for every thread of a group, so the reductions inside are reached by all.
  __device__ int64_t first_row() const {
    return kWarpRows ? static_cast<int64_t>(blockIdx.x) * (blockDim.x / kWarp) + threadIdx.x / kWarp
                     : static_cast<int64_t>(blockIdx.x);
  }
  __device__ int64_t row_stride() const {
    return kWarpRows ? static_cast<int64_t>(gridDim.x) * (blockDim.x / kWarp) : static_cast<int64_t>(gridDim.x);
  }
  // The reduction of v over the row's threads, in every one of them. `shared` holds 32 T (unused
  // for warp rows); every thread of the group must call it.
  template <class T, class Op>
  __device__ T reduce(T v, Op op, T identity, T* shared) const {
    if constexpr (kWarpRows) return warp_reduce(v, op);
    else return block_reduce(v, op, identity, shared);
  }
};

}  // namespace kiln::backend::cuda
