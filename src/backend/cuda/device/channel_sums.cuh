// Deterministic per-channel sums of two terms over a tensor viewed as [outer, C, inner] (element
// (o, c, s) at (o * C + c) * inner + s): per-block partial sums in double, then a fixed-order sum
// of each channel's partials handed to a finishing functor. No float atomics, and the split
// (channel_sums_plan.h) depends on the sizes only, so every run gives the same bits. Layer
// norm's weight and bias gradients (C = the row length) and batch norm use it.
#pragma once

#include "backend/cuda/channel_sums_plan.h"
#include "backend/cuda/device/block_reduce.cuh"
#include "core/tensor_util.h"

namespace kiln::backend::cuda {

struct DoublePair {
  double a, b;
};
struct DoublePairSum {
  __device__ __forceinline__ DoublePair operator()(DoublePair x, DoublePair y) const { return {x.a + y.a, x.b + y.b}; }
};

// inner == 1: block (column tile blockIdx.x, row chunk blockIdx.y) of kWarp x kColRowLanes
// threads; threadIdx.y takes every kColRowLanes-th row and the lanes are added in a fixed order.
inline constexpr int kColRowLanes = 8;

template <class F>
__global__ void column_partials_kernel(F f, double* __restrict__ pa, double* __restrict__ pb, int64_t rows,
                                       int64_t n, int64_t rows_per_chunk) {
  __shared__ double sa[kColRowLanes][kWarp + 1], sb[kColRowLanes][kWarp + 1];
  const int64_t col = static_cast<int64_t>(blockIdx.x) * kWarp + threadIdx.x;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * rows_per_chunk;
  const int64_t r1 = std::min(rows, r0 + rows_per_chunk);
  double a = 0, b = 0;
  if (col < n)
    for (int64_t r = r0 + threadIdx.y; r < r1; r += kColRowLanes) f(r * n + col, r, col, a, b);
  sa[threadIdx.y][threadIdx.x] = a;
  sb[threadIdx.y][threadIdx.x] = b;
  __syncthreads();
  if (threadIdx.y == 0 && col < n) {
    double ta = 0, tb = 0;
    for (int k = 0; k < kColRowLanes; ++k) {
      ta += sa[k][threadIdx.x];
      tb += sb[k][threadIdx.x];
    }
    pa[blockIdx.y * n + col] = ta;
    pb[blockIdx.y * n + col] = tb;
  }
}

// inner > 1: block (channel blockIdx.x, chunk blockIdx.y) sums its chunk of the channel's
// outer * inner values with a block tree.
template <class F>
__global__ void channel_partials_kernel(F f, double* __restrict__ pa, double* __restrict__ pb, int64_t outer,
                                        int64_t channels, int64_t inner, int64_t per_chunk) {
  __shared__ DoublePair shared[32];
  const int64_t c = blockIdx.x;
  const int64_t j0 = static_cast<int64_t>(blockIdx.y) * per_chunk;
  const int64_t j1 = std::min(outer * inner, j0 + per_chunk);
  double a = 0, b = 0;
  for (int64_t j = j0 + threadIdx.x; j < j1; j += blockDim.x) {
    const int64_t o = j / inner, s = j - o * inner;
    f((o * channels + c) * inner + s, o, c, a, b);
  }
  const DoublePair t = block_reduce(DoublePair{a, b}, DoublePairSum{}, DoublePair{0, 0}, shared);
  if (threadIdx.x == 0) {
    pa[blockIdx.y * channels + c] = t.a;
    pb[blockIdx.y * channels + c] = t.b;
  }
}

// Each channel's partials summed in chunk order, then g(c, sum_a, sum_b).
template <class G>
__global__ void channel_final_kernel(G g, const double* __restrict__ pa, const double* __restrict__ pb,
                                     int64_t chunks, int64_t channels) {
  KILN_GRID_STRIDE(c, channels) {
    double a = 0, b = 0;
    for (int64_t k = 0; k < chunks; ++k) {
      a += pa[k * channels + c];
      b += pb[k * channels + c];
    }
    g(c, a, b);
  }
}

// For every channel c: g(c, sum of a, sum of b) where f(i, o, c, a, b) adds element i's terms
// (i = (o * C + c) * inner + s) to a and b. Runs on `stream` of `device`; with no elements g
// gets zeros.
template <class F, class G>
void channel_sums(int64_t outer, int64_t channels, int64_t inner, F f, G g, Device device, cudaStream_t stream,
                  const char* name) {
  if (channels == 0) return;
  int64_t chunks = 1;
  Tensor pa, pb;
  if (inner == 1) {
    const ColumnChunks p = column_chunks(outer, channels);
    KILN_CHECK(p.tiles <= INT32_MAX, name, "rows of ", channels, " elements are too long");
    chunks = p.chunks;
    pa = make_empty({chunks, channels}, kFloat64, device);
    pb = make_empty({chunks, channels}, kFloat64, device);
    column_partials_kernel<<<dim3(static_cast<unsigned>(p.tiles), static_cast<unsigned>(chunks)),
                             dim3(kWarp, kColRowLanes), 0, stream>>>(f, pa.data_ptr<double>(), pb.data_ptr<double>(),
                                                                     outer, channels, p.rows_per_chunk);
  } else {
    const ChannelChunks p = channel_chunks(outer * inner, channels);
    KILN_CHECK(channels <= INT32_MAX, name, channels, " channels are too many");
    chunks = p.chunks;
    pa = make_empty({chunks, channels}, kFloat64, device);
    pb = make_empty({chunks, channels}, kFloat64, device);
    channel_partials_kernel<<<dim3(static_cast<unsigned>(channels), static_cast<unsigned>(chunks)), kThreads, 0,
                              stream>>>(f, pa.data_ptr<double>(), pb.data_ptr<double>(), outer, channels, inner,
                                        p.per_chunk);
  }
  KILN_CUDA_LAUNCHED(name);
  channel_final_kernel<<<blocks_for(channels), kThreads, 0, stream>>>(g, pa.data_ptr<double>(), pb.data_ptr<double>(),
                                                                      chunks, channels);
  KILN_CUDA_LAUNCHED(name);
}

}  // namespace kiln::backend::cuda
