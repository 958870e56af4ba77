// The vectorised form of the CUDA elementwise kernels, decided on the host: when every operand of
// a plan is one dense run whose start is aligned to a vector of kVector elements, each thread
// loads and stores kVector consecutive elements per operand at once (16 bytes for float32), and
// the last numel % kVector elements go one per thread. Plain C++, tested on the CPU
// (tests/test_cuda_host_launch.cpp).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "backend/cuda/host_device.h"
#include "backend/loop_plan.h"

namespace kiln::backend::cuda {

inline constexpr int kVector = 4;

// kVector when the plan's operands (element sizes `sizes`, operand 0 the output) are dense and
// vector-aligned, else 1 (the strided kernels).
template <int N, size_t M>
int vector_width(const LoopPlan<N>& p, const std::array<int, M>& sizes) {
  static_assert(M == N, "an element size per operand");
  if (p.ndim != 1 || p.numel < kVector) return 1;
  for (int k = 0; k < N; ++k) {
    if (p.strides[0][k] != sizes[k]) return 1;
    if (reinterpret_cast<uintptr_t>(p.base[k]) % (static_cast<uintptr_t>(sizes[k]) * kVector) != 0) return 1;
  }
  return kVector;
}

// The work of the vectorised kernel: `vectors` vectors (vector v is elements [v * V, v * V + V)),
// then `tail` single elements from `tail_begin`, element tail_begin + g for global thread g.
struct VectorSplit {
  int64_t vectors = 0, tail_begin = 0, tail = 0;
};
KILN_HOST_DEVICE inline VectorSplit vector_split(int64_t numel, int v) {
  const int64_t vectors = numel / v;
  return {vectors, vectors * v, numel - vectors * v};
}

}  // namespace kiln::backend::cuda
