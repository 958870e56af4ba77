// CUDA kernels for the indexing ops (the contracts of backend/cpu/embedding.cpp and index.cpp):
// embedding and index_select as row copies, gather, scatter_add (atomic adds), and a
// deterministic embedding backward (indices radix-sorted with their positions, then each table
// row sums its gradient rows in position order, as the CPU does), and interpolate's Resample (a
// thread per output element sums its taps in order, rounding as the CPU: the CPU's bits).
// Out-of-range indices are never followed: the element is skipped (a copy writes 0) and the index
// recorded (index_check.h).
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>

#include <bit>

#include "backend/cuda/device/atomic_add.cuh"
#include "backend/cuda/device/block_reduce.cuh"
#include "backend/cuda/device/index_error.cuh"
#include "backend/embedding_math.h"
#include "backend/loop_plan.h"
#include "core/tensor_util.h"

namespace kiln::backend::cuda {
namespace {

__device__ __forceinline__ bool in_range(int64_t i, int64_t n) { return i >= 0 && i < n; }

__global__ void check_indices_kernel(const int64_t* __restrict__ idx, int64_t m, int64_t n, IndexErrorSlot* slot,
                                     IndexOp op) {
  KILN_GRID_STRIDE(j, m) {
    if (!in_range(idx[j], n)) record_index_error(slot, op, idx[j], n, j);
  }
}
// For calls with nothing to copy (a zero-width row): the indices are still checked, as on the CPU.
void check_indices(const KernelArgs& a, const int64_t* idx, int64_t m, int64_t n, IndexErrorSlot* slot, IndexOp op) {
  if (m == 0) return;
  check_indices_kernel<<<blocks_for(m), kThreads, 0, stream_of(a)>>>(idx, m, n, slot, op);
  KILN_CUDA_LAUNCHED(index_op_name(op));
}

// ---- embedding and index_select: dst row r = src row (o * n + idx[j]), o = r / m, j = r % m;
// a row is `units` copy units U (the widest that the row size and both addresses allow).
template <class U>
__global__ void take_rows_kernel(const U* __restrict__ src, U* __restrict__ dst, const int64_t* __restrict__ idx,
                                 int64_t rows, int64_t m, int64_t n, int64_t units, IndexErrorSlot* slot, IndexOp op) {
  KILN_GRID_STRIDE(e, rows * units) {
    const int64_t r = e / units, k = e - r * units;
    const int64_t o = r / m, j = r - o * m;
    const int64_t id = idx[j];
    if (!in_range(id, n)) {
      if (k == 0 && o == 0) record_index_error(slot, op, id, n, j);
      dst[e] = U{};
      continue;
    }
    dst[e] = src[(o * n + id) * units + k];
  }
}

void take_rows(const KernelArgs& a, const void* src, void* dst, const int64_t* idx, int64_t rows, int64_t m, int64_t n,
               int64_t row_bytes, IndexErrorSlot* slot, IndexOp op) {
  const auto fits = [&](int64_t u) {
    return row_bytes % u == 0 && reinterpret_cast<uintptr_t>(src) % u == 0 && reinterpret_cast<uintptr_t>(dst) % u == 0;
  };
  const auto launch = [&]<class U>() {
    const int64_t units = row_bytes / static_cast<int64_t>(sizeof(U));
    take_rows_kernel<U><<<blocks_for(rows * units), kThreads, 0, stream_of(a)>>>(
        static_cast<const U*>(src), static_cast<U*>(dst), idx, rows, m, n, units, slot, op);
  };
  if (fits(16)) launch.template operator()<uint4>();
  else if (fits(8)) launch.template operator()<uint2>();
  else if (fits(4)) launch.template operator()<uint32_t>();
  else if (fits(2)) launch.template operator()<uint16_t>();
  else launch.template operator()<uint8_t>();
  KILN_CUDA_LAUNCHED(index_op_name(op));
}

// {weight [num, dim] contiguous, indices [m] int64} -> {out [m, dim]}
void embedding_forward(KernelArgs& a) {
  const Tensor& w = a.inputs[0];
  const Tensor& index = a.inputs[1];
  const int64_t num = w.size(0), dim = w.size(1), m = index.numel();
  IndexErrorSlot* slot = index_error_slot(w.device().index);
  const auto* idx = static_cast<const int64_t*>(index.data_ptr());
  if (dim == 0) return check_indices(a, idx, m, num, slot, IndexOp::Embedding);
  if (m == 0) return;
  take_rows(a, w.data_ptr(), a.outputs[0].data_ptr(), idx, m, m, num, dim * static_cast<int64_t>(w.element_size()),
            slot, IndexOp::Embedding);
}

// {x contiguous, index [m] int64} -> {out contiguous}, along dim.
void index_select(KernelArgs& a) {
  const Tensor& x = a.inputs[0];
  const Tensor& index = a.inputs[1];
  const int64_t d = static_cast<const DimAttrs*>(a.attrs)->dim;
  int64_t outer = 1, inner = 1;
  for (int64_t k = 0; k < d; ++k) outer *= x.shape()[k];
  for (int64_t k = d + 1; k < x.dim(); ++k) inner *= x.shape()[k];
  const int64_t n = x.dim() == 0 ? 1 : x.shape()[d];
  const int64_t m = index.numel();
  IndexErrorSlot* slot = index_error_slot(x.device().index);
  const auto* idx = static_cast<const int64_t*>(index.data_ptr());
  // A 0-d x has a 0-d result: one element is written (the CPU kernel would write m), every index checked.
  const int64_t rows = x.dim() == 0 ? std::min<int64_t>(m, 1) : outer * m;
  if (rows == 0 || inner == 0 || (x.dim() == 0 && m > 1)) check_indices(a, idx, m, n, slot, IndexOp::IndexSelect);
  if (rows == 0 || inner == 0) return;
  take_rows(a, x.data_ptr(), a.outputs[0].data_ptr(), idx, rows, m, n, inner * static_cast<int64_t>(x.element_size()),
            slot, IndexOp::IndexSelect);
}

// ---- gather and scatter_add: index position p (row-major in the index's shape) addresses the
// indexed tensor t at p's coordinates with the one along dim replaced by index[p].
struct IndexGeom {
  int ndim = 0;
  int64_t n = 1;           // t's size along dim (1 for a 0-d t)
  int64_t dim_stride = 0;  // t's stride along dim
  int64_t sizes[kMaxLoopDims] = {};        // the index's shape
  int64_t strides[kMaxLoopDims] = {};      // t's strides, 0 at dim
  int64_t src_strides[kMaxLoopDims] = {};  // scatter_add's src strides
};

IndexGeom make_geom(const Tensor& t, const Tensor& index, int64_t dim, const Tensor* src) {
  IndexGeom g;
  g.ndim = static_cast<int>(index.dim());
  g.n = t.dim() == 0 ? 1 : t.shape()[dim];
  g.dim_stride = t.dim() == 0 ? 0 : t.strides()[dim];
  for (int d = 0; d < g.ndim; ++d) {
    g.sizes[d] = index.shape()[d];
    g.strides[d] = (t.dim() == 0 || d == dim) ? 0 : t.strides()[d];
    g.src_strides[d] = src ? src->strides()[d] : 0;
  }
  return g;
}

// Element offsets of position p in t (without the dim term) and in src.
__device__ __forceinline__ void geom_offsets(const IndexGeom& g, int64_t p, int64_t& off, int64_t& src_off) {
  off = 0;
  src_off = 0;
  for (int d = g.ndim - 1; d >= 0; --d) {
    const int64_t q = p / g.sizes[d], c = p - q * g.sizes[d];
    off += c * g.strides[d];
    src_off += c * g.src_strides[d];
    p = q;
  }
}

// Ranks the fixed-size geometry holds (the CPU takes the rare rest).
bool gather_supported(const KernelArgs& a) { return a.inputs[1].dim() <= kMaxLoopDims; }
bool scatter_add_supported(const KernelArgs& a) { return a.inputs[0].dim() <= kMaxLoopDims; }

// __grid_constant__: the geometry is read in place from the parameter space (indexed by a
// runtime dim, a by-value copy would go to local memory).
template <class U>
__global__ void gather_kernel(const U* __restrict__ x, const int64_t* __restrict__ idx, U* __restrict__ out,
                              int64_t numel, const __grid_constant__ IndexGeom g, IndexErrorSlot* slot) {
  KILN_GRID_STRIDE(p, numel) {
    int64_t off, unused;
    geom_offsets(g, p, off, unused);
    const int64_t id = idx[p];
    if (!in_range(id, g.n)) {
      record_index_error(slot, IndexOp::Gather, id, g.n, p);
      out[p] = U{};
      continue;
    }
    out[p] = x[off + id * g.dim_stride];
  }
}

// {x (any strides), index int64 contiguous} -> {out contiguous, index's shape}
void gather(KernelArgs& a) {
  const Tensor& x = a.inputs[0];
  const Tensor& index = a.inputs[1];
  const int64_t numel = index.numel();
  if (numel == 0) return;
  const IndexGeom g = make_geom(x, index, static_cast<const DimAttrs*>(a.attrs)->dim, nullptr);
  IndexErrorSlot* slot = index_error_slot(x.device().index);
  const auto launch = [&]<class U>() {
    gather_kernel<U><<<blocks_for(numel), kThreads, 0, stream_of(a)>>>(
        static_cast<const U*>(x.data_ptr()), static_cast<const int64_t*>(index.data_ptr()),
        static_cast<U*>(a.outputs[0].data_ptr()), numel, g, slot);
  };
  switch (x.element_size()) {  // a copy: only the element's width matters
    case 1: launch.template operator()<uint8_t>(); break;
    case 2: launch.template operator()<uint16_t>(); break;
    case 4: launch.template operator()<uint32_t>(); break;
    case 8: launch.template operator()<uint64_t>(); break;
    default: KILN_FAIL("gather", "unsupported element size ", x.element_size());
  }
  KILN_CUDA_LAUNCHED("gather");
}

// Atomic adds: the order of adds into one element is the GPU's (as PyTorch on CUDA); with
// overwrite, plain stores (an element addressed twice keeps any one of its values, as torch's
// index_put_).
template <class T>
__global__ void scatter_add_kernel(const int64_t* __restrict__ idx, const T* __restrict__ src, T* __restrict__ out,
                                   int64_t numel, const __grid_constant__ IndexGeom g, IndexErrorSlot* slot,
                                   bool overwrite) {
  KILN_GRID_STRIDE(p, numel) {
    int64_t off, src_off;
    geom_offsets(g, p, off, src_off);
    const int64_t id = idx[p];
    if (!in_range(id, g.n)) {
      record_index_error(slot, IndexOp::ScatterAdd, id, g.n, p);
      continue;
    }
    if (overwrite) out[off + id * g.dim_stride] = src[src_off];
    else atomic_add(out + off + id * g.dim_stride, src[src_off]);
  }
}

// The contract in dispatch.h (ScatterAttrs).
void scatter_add(KernelArgs& a) {
  const Tensor& index = a.inputs[0];
  const Tensor& src = a.inputs[1];
  const Tensor& out = a.outputs[0];
  const int64_t numel = index.numel();
  if (numel == 0) return;
  const auto& attrs = *static_cast<const ScatterAttrs*>(a.attrs);
  const IndexGeom g = make_geom(out, index, attrs.dim, &src);
  IndexErrorSlot* slot = index_error_slot(out.device().index);
  visit_dtype(out.dtype(), "scatter_add", [&]<class T>() {
    scatter_add_kernel<T><<<blocks_for(numel), kThreads, 0, stream_of(a)>>>(
        static_cast<const int64_t*>(index.data_ptr()), static_cast<const T*>(src.data_ptr()),
        static_cast<T*>(out.data_ptr()), numel, g, slot, attrs.overwrite);
  });
  KILN_CUDA_LAUNCHED("scatter_add");
}

// ---- embedding backward
// Sort keys: each index's row, or num for a bad one (sorted after every row, so never summed).
__global__ void embedding_keys_kernel(const int64_t* __restrict__ idx, int64_t m, int64_t num, uint64_t* __restrict__ keys,
                                      int64_t* __restrict__ pos, IndexErrorSlot* slot) {
  KILN_GRID_STRIDE(j, m) {
    const int64_t id = idx[j];
    const bool ok = in_range(id, num);
    if (!ok) record_index_error(slot, IndexOp::Embedding, id, num, j);
    keys[j] = static_cast<uint64_t>(ok ? id : num);
    pos[j] = j;
  }
}

// starts[r] = the first sorted position whose key is >= r, for r in [0, num]: row r's positions
// are sorted[starts[r], starts[r + 1]). A thread per row (a binary search each), so the row
// kernel below does not wait on a chain of dependent loads.
__global__ void row_starts_kernel(const uint64_t* __restrict__ keys, int64_t m, int64_t num, int64_t* __restrict__ starts) {
  KILN_GRID_STRIDE(r, num + 1) {
    int64_t lo = 0, hi = m;
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo) / 2;
      if (keys[mid] < static_cast<uint64_t>(r)) lo = mid + 1;
      else hi = mid;
    }
    starts[r] = lo;
  }
}

// count[r] = the segments row r is summed in (embedding_math.h; none for the padding row, which
// is written as zeros), for r in [0, num], count[num] = 0: their exclusive prefix sum numbers them.
__global__ void segment_counts_kernel(const int64_t* __restrict__ starts, int64_t num, int64_t padding_idx,
                                      int64_t* __restrict__ count) {
  KILN_GRID_STRIDE(r, num + 1) {
    count[r] = r < num && r != padding_idx ? emb::segments(starts[r + 1] - starts[r]) : 0;
  }
}

// A group of `group` threads per segment q < first[num] (at most `bound`): the positions of
// segment q - first[r] of its row r, summed in order from 0 in A into partial row q.
template <class T>
__global__ void embedding_segments_kernel(const T* __restrict__ g, const int64_t* __restrict__ starts,
                                          const int64_t* __restrict__ first, const int64_t* __restrict__ pos,
                                          compute_t<T>* __restrict__ partial, int64_t num, int64_t dim, int64_t bound,
                                          int group) {
  using A = compute_t<T>;
  const int lane = static_cast<int>(threadIdx.x) % group;
  const int64_t per_block = blockDim.x / group, total = min(first[num], bound);
  for (int64_t q = blockIdx.x * per_block + threadIdx.x / group; q < total; q += gridDim.x * per_block) {
    const int64_t r = emb::row_of_segment(first, num, q);
    const int64_t lo = starts[r] + (q - first[r]) * emb::kEmbeddingSegment;
    const int64_t hi = min(lo + emb::kEmbeddingSegment, starts[r + 1]);
    for (int64_t c = lane; c < dim; c += group) {
      A acc = 0;
#pragma unroll 8
      for (int64_t s = lo; s < hi; ++s) acc += static_cast<A>(g[pos[s] * dim + c]);
      partial[q * dim + c] = acc;
    }
  }
}

// A group of `group` threads per table row r: its positions are sorted[lo, hi) (in increasing
// order: the radix sort is stable), summed in that order in A, or its segments' partial sums
// first[r] .. first[r + 1] added in order (first null: no row has segments), as the CPU; every
// row written.
template <class T>
__global__ void embedding_backward_kernel(const T* __restrict__ g, const int64_t* __restrict__ starts,
                                          const int64_t* __restrict__ pos, const int64_t* __restrict__ first,
                                          const compute_t<T>* __restrict__ partial, T* __restrict__ gw, int64_t num,
                                          int64_t dim, int64_t padding_idx, int group) {
  using A = compute_t<T>;
  const int lane = static_cast<int>(threadIdx.x) % group;
  const int64_t per_block = blockDim.x / group;
  for (int64_t r = blockIdx.x * per_block + threadIdx.x / group; r < num; r += gridDim.x * per_block) {
    const int64_t lo = starts[r], hi = starts[r + 1];
    const int64_t f0 = first ? first[r] : 0, f1 = first ? first[r + 1] : 0;
    const bool zero = r == padding_idx || lo == hi;
    T* out = gw + r * dim;
    for (int64_t c = lane; c < dim; c += group) {
      if (zero) {
        out[c] = T(0);
      } else if (std::is_same_v<T, A> && hi - lo == 1) {
        out[c] = g[pos[lo] * dim + c];  // the CPU copies a single row (so -0.0 stays -0.0)
      } else if (f1 > f0) {
        A acc = 0;
#pragma unroll 8
        for (int64_t q = f0; q < f1; ++q) acc += partial[q * dim + c];
        out[c] = static_cast<T>(acc);
      } else {
        A acc = 0;
#pragma unroll 8
        for (int64_t s = lo; s < hi; ++s) acc += static_cast<A>(g[pos[s] * dim + c]);
        out[c] = static_cast<T>(acc);
      }
    }
  }
}

// {grad [m, dim] contiguous, indices [m]} -> {grad_weight [num, dim]}
void embedding_backward(KernelArgs& a) {
  const Tensor& g = a.inputs[0];
  const Tensor& index = a.inputs[1];
  const Tensor& gw = a.outputs[0];
  const int64_t padding_idx = static_cast<const EmbeddingAttrs*>(a.attrs)->padding_idx;
  const int64_t num = gw.size(0), dim = gw.size(1), m = index.numel();
  const Device dev = gw.device();
  cudaStream_t stream = stream_of(a);
  IndexErrorSlot* slot = index_error_slot(dev.index);
  const auto* idx = static_cast<const int64_t*>(index.data_ptr());
  if (num == 0 || dim == 0) return check_indices(a, idx, m, num, slot, IndexOp::Embedding);
  if (m == 0) {
    KILN_CUDA_CHECK(cudaMemsetAsync(gw.data_ptr(), 0, gw.nbytes(), stream));  // all-zero bits: 0 in every float type
    return;
  }
  // Only with more positions than a segment can a row have segments (embedding_math.h).
  const bool segmented = m > emb::kEmbeddingSegment;
  // keys in/out (as uint64), positions in/out, row starts; segment counts and their prefix sums
  Tensor buf = make_empty({4 * m + (segmented ? 3 : 1) * (num + 1)}, kInt64, dev);
  auto* keys_in = static_cast<uint64_t*>(buf.data_ptr());
  uint64_t* keys_out = keys_in + m;
  auto* pos_in = reinterpret_cast<int64_t*>(keys_in + 2 * m);
  int64_t* pos_out = pos_in + m;
  int64_t* starts = pos_out + m;
  int64_t* counts = segmented ? starts + num + 1 : nullptr;
  int64_t* first = segmented ? counts + num + 1 : nullptr;
  embedding_keys_kernel<<<blocks_for(m), kThreads, 0, stream>>>(idx, m, num, keys_in, pos_in, slot);
  KILN_CUDA_LAUNCHED("embedding_backward (sort keys)");
  const int end_bit = static_cast<int>(std::bit_width(static_cast<uint64_t>(num)));  // keys are <= num
  size_t sort_bytes = 0, scan_bytes = 0;
  KILN_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes, keys_in, keys_out, pos_in, pos_out, m, 0,
                                                  end_bit, stream));
  if (segmented) KILN_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(nullptr, scan_bytes, counts, first, num + 1, stream));
  const size_t temp_bytes = std::max<size_t>({sort_bytes, scan_bytes, 1});
  Tensor temp = make_empty({static_cast<int64_t>(temp_bytes)}, kUInt8, dev);
  KILN_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp.data_ptr(), sort_bytes, keys_in, keys_out, pos_in, pos_out, m, 0,
                                                  end_bit, stream));
  row_starts_kernel<<<blocks_for(num + 1), kThreads, 0, stream>>>(keys_out, m, num, starts);
  KILN_CUDA_LAUNCHED("embedding_backward (row starts)");
  // Threads per row or segment: the row's width rounded up to a power of two, from a warp to the block.
  const int group = static_cast<int>(std::clamp<int64_t>(static_cast<int64_t>(std::bit_ceil(static_cast<uint64_t>(dim))),
                                                         kWarp, kThreads));
  const int64_t per_block = kThreads / group;
  auto blocks = [&](int64_t units) {
    return static_cast<unsigned>(std::clamp<int64_t>((units + per_block - 1) / per_block, 1, int64_t{1} << 20));
  };
  const int64_t bound = emb::segment_bound(m);
  if (segmented) {
    segment_counts_kernel<<<blocks_for(num + 1), kThreads, 0, stream>>>(starts, num, padding_idx, counts);
    KILN_CUDA_LAUNCHED("embedding_backward (segment counts)");
    KILN_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(temp.data_ptr(), scan_bytes, counts, first, num + 1, stream));
  }
  visit_float_dtype(gw.dtype(), "embedding_backward", [&]<class T>() {
    using A = compute_t<T>;
    const auto* gp = static_cast<const T*>(g.data_ptr());
    Tensor partial;  // [bound, dim] in A: the segments' sums
    A* pp = nullptr;
    if (segmented) {
      partial = make_empty({std::max<int64_t>(bound, 1) * dim}, dtype_of<A>, dev);
      pp = static_cast<A*>(partial.data_ptr());
      embedding_segments_kernel<T><<<blocks(bound), kThreads, 0, stream>>>(gp, starts, first, pos_out, pp, num, dim,
                                                                            bound, group);
      KILN_CUDA_LAUNCHED("embedding_backward (segments)");
    }
    embedding_backward_kernel<T><<<blocks(num), kThreads, 0, stream>>>(gp, starts, pos_out, first, pp,
                                                                       static_cast<T*>(gw.data_ptr()), num, dim,
                                                                       padding_idx, group);
  });
  KILN_CUDA_LAUNCHED("embedding_backward");
}

// Products and sums rounded apart (nvcc would fuse them), as the CPU kernel computes them.
__device__ __forceinline__ float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ double mul_rn(double a, double b) { return __dmul_rn(a, b); }
__device__ __forceinline__ float add_rn(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ double add_rn(double a, double b) { return __dadd_rn(a, b); }

template <class T>
__global__ void resample_kernel(const T* __restrict__ x, const int64_t* __restrict__ off,
                                const int64_t* __restrict__ src, const T* __restrict__ w, T* __restrict__ out,
                                int64_t total, int64_t n, int64_t m, int64_t inner) {
  KILN_GRID_STRIDE(e, total) {
    const int64_t r = e / inner, i = e - r * inner, o = r / m, j = r - o * m;
    const int64_t b = off[j], end = off[j + 1];
    T acc = T(0);
    if (b < end) {
      acc = mul_rn(w[b], x[(o * n + src[b]) * inner + i]);
      for (int64_t t = b + 1; t < end; ++t) acc = add_rn(acc, mul_rn(w[t], x[(o * n + src[t]) * inner + i]));
    }
    out[e] = acc;
  }
}

// The contract in dispatch.h.
void resample(KernelArgs& a) {
  const Tensor &x = a.inputs[0], &out = a.outputs[0];
  const auto* off = static_cast<const int64_t*>(a.inputs[1].data_ptr());
  const auto* src = static_cast<const int64_t*>(a.inputs[2].data_ptr());
  const int64_t total = out.numel();
  if (total == 0) return;
  auto launch = [&]<class T>() {
    resample_kernel<T><<<blocks_for(total), kThreads, 0, stream_of(a)>>>(
        static_cast<const T*>(x.data_ptr()), off, src, static_cast<const T*>(a.inputs[3].data_ptr()),
        static_cast<T*>(out.data_ptr()), total, x.size(1), out.size(1), x.size(2));
  };
  if (x.dtype() == kFloat64) launch.template operator()<double>();
  else launch.template operator()<float>();
  KILN_CUDA_LAUNCHED("resample");
}
bool resample_supported(const KernelArgs& a) {
  const ScalarType t = a.inputs[0].dtype();
  return t == kFloat32 || t == kFloat64;
}

constexpr DeviceType kCuda = DeviceType::CUDA;
KILN_REGISTER_KERNEL(Op::Embedding, kCuda, embedding_forward);
KILN_REGISTER_KERNEL(Op::EmbeddingBackward, kCuda, embedding_backward);
KILN_REGISTER_KERNEL(Op::IndexSelect, kCuda, index_select);
KILN_REGISTER_KERNEL_IF(Op::Gather, kCuda, gather, gather_supported);
KILN_REGISTER_KERNEL_IF(Op::ScatterAdd, kCuda, scatter_add, scatter_add_supported);
KILN_REGISTER_KERNEL_IF(Op::Resample, kCuda, resample, resample_supported);

}  // namespace
}  // namespace kiln::backend::cuda
