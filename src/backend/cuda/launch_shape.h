// Launch sizes shared by the CUDA kernels and the split of a block's threads into groups, as
// plain C++: the .cu files launch with them, and the CPU tests check that a launch covers every
// element exactly once (tests/test_cuda_host_math.cpp).
#pragma once

#include <algorithm>
#include <cstdint>

#include "backend/cuda/host_device.h"

namespace kiln::backend::cuda {

inline constexpr int kThreads = 256;
inline constexpr int kWarp = 32;

// Blocks for a grid-stride loop over n items: enough to fill the device, never more than needed.
inline unsigned blocks_for(int64_t n, int threads = kThreads) {
  const int64_t b = (n + threads - 1) / threads;
  return static_cast<unsigned>(std::clamp<int64_t>(b, 1, int64_t{1} << 20));
}

// The smallest power of two >= n (1 for n <= 1).
inline int64_t pow2_at_least(int64_t n) {
  int64_t p = 1;
  while (p < n) p *= 2;
  return p;
}

// A block split into `slots` groups of `group` threads (powers of two, slots * group ==
// blockDim.x), each group reducing one item (a row, an output). Contiguous groups are runs of
// consecutive threads (lanes along memory that is contiguous in the reduced direction);
// interleaved groups put thread t in slot t % slots as lane t / slots, so a warp spans 32
// neighbouring slots (coalesced when the items, not the reduced elements, are contiguous).
struct ThreadGroups {
  int group = 1, slots = 1;
  bool interleaved = false;
  // Thread t's group and its lane in the group.
  KILN_HOST_DEVICE KILN_CUDA_INLINE int slot(unsigned t) const { return interleaved ? t % slots : t / group; }
  KILN_HOST_DEVICE KILN_CUDA_INLINE int lane(unsigned t) const { return interleaved ? t / slots : t % group; }
#if defined(__CUDACC__)
  __device__ __forceinline__ int slot() const { return slot(threadIdx.x); }
  __device__ __forceinline__ int lane() const { return lane(threadIdx.x); }
#endif
};

// Row kernels (device/row_group.cuh): rows of at most this many elements get a warp each.
inline constexpr int64_t kWarpRowMax = 1024;

// Blocks of kThreads threads for `rows` rows, a warp or a block per row.
inline unsigned row_blocks(int64_t rows, bool warp_rows) {
  const int64_t per_block = warp_rows ? kThreads / kWarp : 1;
  return static_cast<unsigned>(std::clamp<int64_t>((rows + per_block - 1) / per_block, 1, int64_t{1} << 20));
}

}  // namespace kiln::backend::cuda
