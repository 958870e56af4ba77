// The host side of the CUDA reduce kernels (reduce.cu) as plain C++: the geometry (kept dims,
// one per output, and reduced dims, each coalesced), the offsets a thread computes from an
// output index and a flat reduced index, and the launch shape (threads per output, outputs per
// block, blocks splitting one long reduction). The CPU tests run the kernels' thread mapping
// over these on the host (tests/test_cuda_host_math.cpp).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <utility>
#include <vector>

#include "backend/cuda/index_math.h"
#include "backend/cuda/launch_shape.h"
#include "backend/loop_plan.h"
#include "kiln/tensor.h"

namespace kiln::backend::cuda {

inline constexpr int kMaxReduceDims = kMaxLoopDims;
inline constexpr int64_t kTargetBlocks = 1024;  // enough blocks to fill an H100/H200 a few times over
inline constexpr int64_t kMinPerThread = 32;    // elements a thread folds before splitting across blocks pays
inline constexpr int64_t kMaxSplits = 1024;

// Kept dims (coalesced, largest input stride first) and reduced dims (coalesced, largest stride
// first, in the CPU plan's order, so flat reduced indices, which max/min report, agree).
struct ReduceGeom {
  int nk = 0, nr = 0;
  int64_t outer = 1, inner = 1;  // outputs, elements per output
  int64_t keep_size[kMaxReduceDims], keep_in[kMaxReduceDims], keep_out[kMaxReduceDims];
  int64_t red_size[kMaxReduceDims], red_in[kMaxReduceDims];
};

// in.dim() <= kMaxReduceDims.
inline ReduceGeom make_geom(const Tensor& in, const Tensor& out, uint64_t mask) {
  ReduceGeom g;
  std::vector<std::array<int64_t, 3>> keep;      // (input stride, output stride, size)
  std::vector<std::pair<int64_t, int64_t>> red;  // (input stride, size)
  for (int64_t d = 0; d < in.dim(); ++d) {
    const int64_t size = in.shape()[d];
    if (mask >> d & 1) {
      if (size != 1) red.push_back({in.strides()[d], size});
      g.inner *= size;
    } else if (size != 1) {
      keep.push_back({in.strides()[d], out.strides()[d], size});
      g.outer *= size;
    }
  }
  std::stable_sort(keep.begin(), keep.end(), [](const auto& a, const auto& b) { return a[0] > b[0]; });
  for (const auto& [si, so, size] : keep) {
    if (g.nk > 0 && g.keep_in[g.nk - 1] == si * size && g.keep_out[g.nk - 1] == so * size) {
      g.keep_size[g.nk - 1] *= size;
      g.keep_in[g.nk - 1] = si;
      g.keep_out[g.nk - 1] = so;
    } else {
      g.keep_size[g.nk] = size;
      g.keep_in[g.nk] = si;
      g.keep_out[g.nk++] = so;
    }
  }
  std::stable_sort(red.begin(), red.end(), [](auto a, auto b) { return a.first > b.first; });
  for (const auto& [stride, size] : red) {
    if (g.nr > 0 && g.red_in[g.nr - 1] == stride * size) {
      g.red_size[g.nr - 1] *= size;
      g.red_in[g.nr - 1] = stride;
    } else {
      g.red_size[g.nr] = size;
      g.red_in[g.nr++] = stride;
    }
  }
  return g;
}

// The input and output offsets of output o (< outer).
KILN_HOST_DEVICE KILN_CUDA_INLINE void kept_offsets(const ReduceGeom& g, int64_t o, int64_t& in_off, int64_t& out_off) {
  in_off = 0;
  out_off = 0;
  for (int d = g.nk - 1; d >= 0; --d) {
    const int64_t i = take_index(o, g.keep_size[d]);
    in_off += i * g.keep_in[d];
    out_off += i * g.keep_out[d];
  }
}

// The input offset of flat reduced index r (< inner), relative to its output's first element.
KILN_HOST_DEVICE KILN_CUDA_INLINE int64_t reduced_offset(const ReduceGeom& g, int64_t r) {
  if (g.nr <= 1) return g.nr == 0 ? 0 : r * g.red_in[0];
  int64_t off = 0;
  for (int d = g.nr - 1; d > 0; --d) off += take_index(r, g.red_size[d]) * g.red_in[d];
  return off + r * g.red_in[0];
}

// reduce_kernel's grid is (min(out_blocks, 2^20), splits) blocks of kThreads threads: block
// (x, y) folds outputs [x * slots, (x + 1) * slots) (grid-striding over x) over reduced indices
// y * group + lane, stepping by group * splits. With splits > 1, reduce_finish merges the
// partial states.
struct LaunchShape {
  ThreadGroups tg;
  int64_t out_blocks = 1, splits = 1;
};

inline LaunchShape launch_shape(const ReduceGeom& g) {
  LaunchShape c;
  // Neighbouring outputs closer in memory than neighbouring reduced elements (a sum over the
  // batch of [B, N]): lanes of a warp take neighbouring outputs. Otherwise lanes run along the
  // reduction (a row sum).
  const bool columns = g.nk > 0 && (g.nr == 0 || std::abs(g.keep_in[g.nk - 1]) < std::abs(g.red_in[g.nr - 1]));
  if (g.inner <= 16) {
    c.tg = {1, kThreads, true};  // a thread per output
  } else if (!columns) {
    const int group = g.inner >= 1024 ? kThreads : kWarp;
    c.tg = {group, kThreads / group, false};
  } else {
    const int slots = static_cast<int>(std::min<int64_t>(kWarp, pow2_at_least(g.outer)));
    c.tg = {kThreads / slots, slots, true};
  }
  c.out_blocks = (g.outer + c.tg.slots - 1) / c.tg.slots;
  if (c.tg.group > 1 && c.out_blocks < kTargetBlocks / 2) {
    const int64_t by_fill = (kTargetBlocks + c.out_blocks - 1) / c.out_blocks;
    const int64_t by_work = g.inner / (c.tg.group * kMinPerThread);
    c.splits = std::clamp<int64_t>(std::min(by_fill, by_work), 1, kMaxSplits);
  }
  return c;
}

}  // namespace kiln::backend::cuda
