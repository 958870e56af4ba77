// The host side of the CUDA softmax kernels (softmax.cu) as plain C++: the rows around the
// softmax dim, where each row and its mask entries start, and how a block's threads split into
// rows. The CPU tests run the kernels' thread mapping over these on the host
// (tests/test_cuda_host_math.cpp).
#pragma once

#include <algorithm>
#include <cstdint>

#include "backend/cuda/index_math.h"
#include "backend/cuda/launch_shape.h"
#include "backend/loop_plan.h"
#include "kiln/tensor.h"

namespace kiln::backend::cuda {

// A contiguous tensor as [outer, n, inner] around the dim: rows = outer * inner rows of n
// elements, inner apart.
struct RowGeom {
  int64_t rows = 0, n = 1, inner = 1;
  int64_t row_blocks = 0;  // ceil(rows / slots)
  // Row r starts at (r / inner) * n * inner + r % inner.
  KILN_HOST_DEVICE KILN_CUDA_INLINE int64_t row_base(int64_t r) const { return (r / inner) * n * inner + r % inner; }
};

// The mask's offset for row r: x's dims other than `dim` (row-major over r, size-1 dims dropped,
// coalesced) with the mask's strides (0 on broadcast dims), and its stride along `dim`.
struct MaskGeom {
  int nd = 0;
  int64_t step = 0;
  int64_t size[kMaxLoopDims], stride[kMaxLoopDims];
};

KILN_HOST_DEVICE KILN_CUDA_INLINE int64_t mask_offset(const MaskGeom& mg, int64_t r) {
  int64_t off = 0;
  for (int d = mg.nd - 1; d >= 0; --d) off += take_index(r, mg.size[d]) * mg.stride[d];
  return off;
}

// The mask geometry of a contiguous x (rank <= kMaxLoopDims) and a mask expanded to x's shape.
inline MaskGeom mask_geom(const Tensor& x, const Tensor& mask, int64_t dim) {
  MaskGeom mg;
  mg.step = x.dim() == 0 ? 0 : mask.stride(dim);
  for (int64_t d = 0; d < x.dim(); ++d) {
    const int64_t size = x.size(d), stride = mask.stride(d);
    if (d == dim || size == 1) continue;
    if (mg.nd > 0 && mg.stride[mg.nd - 1] == stride * size) {
      mg.size[mg.nd - 1] *= size;
      mg.stride[mg.nd - 1] = stride;
    } else {
      mg.size[mg.nd] = size;
      mg.stride[mg.nd++] = stride;
    }
  }
  return mg;
}

// The rows of `t` around `dim` (a 0-d tensor is one row of one element).
inline RowGeom rows_of(const Tensor& t, int64_t dim) {
  RowGeom g;
  int64_t outer = 1;
  for (int64_t d = 0; d < t.dim(); ++d) {
    const int64_t s = t.shape()[d];
    if (d < dim) outer *= s;
    else if (d == dim) g.n = s;
    else g.inner *= s;
  }
  g.rows = outer * g.inner;
  return g;
}

// Threads per block and how they split into rows; sets g.row_blocks. Block rb (grid-striding)
// takes rows rb * slots + slot, and lane l of a row its elements l, l + group, ...
inline int plan_rows(RowGeom& g, ThreadGroups& tg) {
  int threads = kThreads;
  if (g.inner == 1) {  // contiguous rows: a warp (or less) for short ones, a block for long ones
    if (g.n > 1024) {
      threads = g.n >= 16384 ? 1024 : kThreads;
      tg = {threads, 1, false};
    } else {
      const int group = static_cast<int>(std::min<int64_t>(kWarp, pow2_at_least(g.n)));
      tg = {group, threads / group, false};
    }
  } else if (g.n <= 16) {  // short strided rows: a thread each, neighbours in memory side by side
    tg = {1, threads, true};
  } else {  // strided rows: 32 neighbouring rows per block, the rest of the block along them
    const int slots = static_cast<int>(std::min<int64_t>(kWarp, pow2_at_least(g.rows)));
    tg = {threads / slots, slots, true};
  }
  g.row_blocks = (g.rows + tg.slots - 1) / tg.slots;
  return threads;
}

inline unsigned grid_for(const RowGeom& g) { return static_cast<unsigned>(std::min<int64_t>(g.row_blocks, int64_t{1} << 20)); }

}  // namespace kiln::backend::cuda
