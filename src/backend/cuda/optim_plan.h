// The host side of the CUDA optimizer steps (optim.cu) as plain C++: how a param group's tensors
// are cut into chunks, one block each, and which tensor and element range a block gets.
#pragma once

#include <algorithm>
#include <cstdint>

#include "backend/cuda/host_device.h"

namespace kiln::backend::cuda {

inline constexpr int kMaxTensors = 48;   // per launch: keeps each list struct under the classic 4 KB
inline constexpr int64_t kChunk = 8192;  // elements per block

// The chunks of one launch: block b works on chunk b - first_chunk[t] of the tensor t with
// first_chunk[t] <= b < first_chunk[t + 1] (empty tensors are left out, so that t is unique).
struct Chunks {
  int count = 0;
  int64_t first_chunk[kMaxTensors + 1] = {};
  int64_t numel[kMaxTensors] = {};

  // Adds a tensor of n > 0 elements as entry `count` (count < kMaxTensors).
  void add(int64_t n) {
    numel[count] = n;
    first_chunk[count + 1] = first_chunk[count] + (n + kChunk - 1) / kChunk;
    ++count;
  }
  int64_t blocks() const { return first_chunk[count]; }
};

// Block b's tensor and element range [begin, end) (b < c.blocks()).
KILN_HOST_DEVICE KILN_CUDA_INLINE int block_tensor(const Chunks& c, int64_t b, int64_t& begin, int64_t& end) {
  int lo = 0, hi = c.count - 1;  // the last t with first_chunk[t] <= b
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (c.first_chunk[mid] <= b) lo = mid;
    else hi = mid - 1;
  }
  begin = (b - c.first_chunk[lo]) * kChunk;
#if defined(__CUDA_ARCH__)
  end = min(c.numel[lo], begin + kChunk);  // CUDA's integer min (one instruction)
#else
  end = std::min(c.numel[lo], begin + kChunk);
#endif
  return lo;
}

}  // namespace kiln::backend::cuda
