// Scans: the CUDA kernels of cumsum (and cumprod) and of a mask's true positions (below). cumsum
// (the contract in dispatch.h, the CPU's in backend/cpu/cumsum.cpp): a thread per column adds (or
// multiplies) it up in order, in the CPU's accumulator type, so each output has the CPU's bits. Along a dim that is not innermost, neighbouring threads read neighbouring elements.
// Along the innermost dim each thread walks its own row: a few long float rows are a serial walk
// each. Integers add up the same in any order (modulo 2^64, then cast as the CPU casts its int64
// sum, the same as adding in T and wrapping), so long integer rows are scanned in parallel: one row
// (nonzero's and masked_select's positions) by cub's device-wide scan, several by a block each,
// in tiles, with cub's block scan.
#include <cub/block/block_load.cuh>
#include <cub/block/block_scan.cuh>
#include <cub/block/block_store.cuh>
#include <cub/device/device_scan.cuh>
#include <cub/device/device_select.cuh>
#include <thrust/iterator/counting_iterator.h>

#include <algorithm>

#include "backend/cuda/device/common.cuh"
#include "core/tensor_util.h"

namespace kiln::backend::cuda {
namespace {

template <class T>
__global__ void cumsum_columns(const T* __restrict__ x, T* __restrict__ out, int64_t outer, int64_t n, int64_t inner,
                               bool reverse, bool product) {
  using A = cumsum_acc_t<T>;
  KILN_GRID_STRIDE(c, outer * inner) {
    const int64_t o = c / inner, i = c - o * inner;
    A acc{product ? 1 : 0};
    for (int64_t s = 0; s < n; ++s) {
      const int64_t e = (o * n + (reverse ? n - 1 - s : s)) * inner + i;
      if (product) acc *= static_cast<A>(x[e]);
      else acc += static_cast<A>(x[e]);
      out[e] = static_cast<T>(acc);
    }
  }
}

constexpr int kScanThreads = 256, kScanItems = 8, kTile = kScanThreads * kScanItems;

// Integer rows (inner == 1, forward: the backward pass's reversed sums are of floats), a block per
// row, tile by tile: each element's sum is the sum of the tiles before its tile plus its tile's
// inclusive prefix sum there.
template <class T>
__global__ void __launch_bounds__(kScanThreads)
    cumsum_integer_rows(const T* __restrict__ x, T* __restrict__ out, int64_t rows, int64_t n) {
  using U = uint64_t;  // the CPU's int64 sum, wrapping as it does
  using Load = cub::BlockLoad<T, kScanThreads, kScanItems, cub::BLOCK_LOAD_WARP_TRANSPOSE>;
  using Store = cub::BlockStore<T, kScanThreads, kScanItems, cub::BLOCK_STORE_WARP_TRANSPOSE>;
  using Scan = cub::BlockScan<U, kScanThreads>;
  __shared__ union {
    typename Load::TempStorage load;
    typename Store::TempStorage store;
    typename Scan::TempStorage scan;
  } temp;
  const int64_t tiles = (n + kTile - 1) / kTile;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    U carry = 0;
    for (int64_t t = 0; t < tiles; ++t) {
      const int64_t start = t * kTile;
      const int valid = static_cast<int>(n - start < kTile ? n - start : kTile);
      T loaded[kScanItems];
      Load(temp.load).Load(x + r * n + start, loaded, valid, T{0});
      __syncthreads();
      U items[kScanItems], total;
      for (int k = 0; k < kScanItems; ++k) items[k] = static_cast<U>(static_cast<int64_t>(loaded[k]));
      Scan(temp.scan).InclusiveSum(items, items, total);
      __syncthreads();
      T sums[kScanItems];
      for (int k = 0; k < kScanItems; ++k) sums[k] = static_cast<T>(static_cast<int64_t>(carry + items[k]));
      Store(temp.store).Store(out + r * n + start, sums, valid);
      __syncthreads();
      carry += total;
    }
  }
}

void cumsum(KernelArgs& a) {
  const Tensor& x = a.inputs[0];
  const bool reverse = static_cast<const CumsumAttrs*>(a.attrs)->reverse;
  const bool product = static_cast<const CumsumAttrs*>(a.attrs)->product;
  const int64_t outer = x.size(0), n = x.size(1), inner = x.size(2);
  visit_dtype(x.dtype(), "cumsum", [&]<class T>() {
    if constexpr (std::is_integral_v<T>) {  // (the parallel scans add: a product takes the columns)
      // cub adds in T (int32 and int64 wrap as the CPU's cast of its int64 sum does)
      if (!product && sizeof(T) >= 4 && !reverse && inner == 1 && outer == 1 && n >= kTile) {
        const auto* in = static_cast<const T*>(x.data_ptr());
        auto* out = static_cast<T*>(a.outputs[0].data_ptr());
        size_t temp_bytes = 0;
        KILN_CUDA_CHECK(cub::DeviceScan::InclusiveSum(nullptr, temp_bytes, in, out, n, stream_of(a)));
        Tensor temp = make_empty({static_cast<int64_t>(std::max<size_t>(temp_bytes, 1))}, kUInt8, x.device());
        KILN_CUDA_CHECK(cub::DeviceScan::InclusiveSum(temp.data_ptr(), temp_bytes, in, out, n, stream_of(a)));
        return;
      }
      if (!product && !reverse && inner == 1 && n >= kTile) {
        cumsum_integer_rows<<<static_cast<unsigned>(std::min<int64_t>(outer, 65535)), kScanThreads, 0, stream_of(a)>>>(
            static_cast<const T*>(x.data_ptr()), static_cast<T*>(a.outputs[0].data_ptr()), outer, n);
        KILN_CUDA_LAUNCHED("cumsum");
        return;
      }
    }
    cumsum_columns<<<blocks_for(outer * inner), kThreads, 0, stream_of(a)>>>(
        static_cast<const T*>(x.data_ptr()), static_cast<T*>(a.outputs[0].data_ptr()), outer, n, inner, reverse,
        product);
    KILN_CUDA_LAUNCHED("cumsum");
  });
}

// The positions of a mask's true elements (nonzero's; the contract in dispatch.h): cub's stream
// compaction of the positions 0, 1, ... flagged by the mask, in order.
void mask_positions(KernelArgs& a) {
  const Tensor& mask = a.inputs[0];
  Tensor selected = make_empty({1}, kInt64, mask.device());  // cub's count, which the op layer knows
  const thrust::counting_iterator<int64_t> positions(0);
  const auto* flags = static_cast<const bool*>(mask.data_ptr());
  auto* out = static_cast<int64_t*>(a.outputs[0].data_ptr());
  auto* count = static_cast<int64_t*>(selected.data_ptr());
  const int64_t total = mask.numel();
  size_t temp_bytes = 0;
  KILN_CUDA_CHECK(cub::DeviceSelect::Flagged(nullptr, temp_bytes, positions, flags, out, count, total, stream_of(a)));
  Tensor temp = make_empty({static_cast<int64_t>(std::max<size_t>(temp_bytes, 1))}, kUInt8, mask.device());
  KILN_CUDA_CHECK(
      cub::DeviceSelect::Flagged(temp.data_ptr(), temp_bytes, positions, flags, out, count, total, stream_of(a)));
}

KILN_REGISTER_KERNEL(Op::Cumsum, DeviceType::CUDA, cumsum);
KILN_REGISTER_KERNEL(Op::MaskPositions, DeviceType::CUDA, mask_positions);

}  // namespace
}  // namespace kiln::backend::cuda
