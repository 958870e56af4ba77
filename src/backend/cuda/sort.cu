// The CUDA kernel of sort and topk (the contract of backend/cpu/sort.cpp): every element becomes
// sort_math.h's key with its position in its row, cub's stable segmented sort orders each row's
// pairs (ties keep their positions' order, as on the CPU), and the first k positions of each row
// give the indices and, read back from the input, the values (a NaN keeps its payload, -0 its sign).
// topk of a few (k <= 16) selects instead, in one pass (select_first_kernel).
#include <cub/device/device_segmented_sort.cuh>

#include "backend/cuda/device/block_reduce.cuh"
#include "backend/cuda/device/common.cuh"
#include "backend/search_math.h"
#include "backend/sort_math.h"
#include "core/tensor_util.h"

namespace kiln::backend::cuda {
namespace {

template <class T>
__global__ void keys_kernel(const T* __restrict__ x, sort::key_t<T>* __restrict__ keys, int64_t* __restrict__ pos,
                            int64_t total, int64_t n, bool descending) {
  KILN_GRID_STRIDE(e, total) {
    keys[e] = sort::key_of(x[e], descending);
    pos[e] = e % n;
  }
}

// Row r's pairs are [r n, (r + 1) n).
__global__ void row_starts_kernel(int64_t* __restrict__ starts, int64_t rows, int64_t n) {
  KILN_GRID_STRIDE(r, rows + 1) starts[r] = r * n;
}

// indices[r, j] = sorted position j of row r; values[r, j] = x[r, that position]. sorted_pos may be
// indices itself (k == n): each element is read and then written by one thread.
template <class T>
__global__ void take_first_kernel(const T* __restrict__ x, const int64_t* sorted_pos, T* __restrict__ values,
                                  int64_t* indices, int64_t rows, int64_t n, int64_t k) {
  KILN_GRID_STRIDE(e, rows * k) {
    const int64_t r = e / k, j = e - r * k;
    const int64_t p = sorted_pos[r * n + j];
    indices[e] = p;
    values[e] = x[r * n + p];
  }
}

template <class T>
void sort_rows(KernelArgs& a, const Tensor& x, Tensor& values, Tensor& indices, int64_t k, bool descending) {
  using K = sort::key_t<T>;
  const int64_t rows = x.size(0), n = x.size(1), total = rows * n;
  const Device dev = x.device();
  cudaStream_t stream = stream_of(a);
  constexpr ScalarType kKeyType = sizeof(K) == 8 ? kInt64 : kInt32;
  Tensor keys = make_empty({2, total}, kKeyType, dev);
  Tensor pos = make_empty({k == n ? total + rows + 1 : 2 * total + rows + 1}, kInt64, dev);
  auto* keys_in = static_cast<K*>(keys.data_ptr());
  K* keys_out = keys_in + total;
  auto* pos_in = static_cast<int64_t*>(pos.data_ptr());
  int64_t* starts = pos_in + total;
  auto* out_idx = static_cast<int64_t*>(indices.data_ptr());
  // With every position kept the sorted positions are the indices; else they go to scratch first.
  int64_t* pos_out = k == n ? out_idx : starts + rows + 1;
  keys_kernel<<<blocks_for(total), kThreads, 0, stream>>>(static_cast<const T*>(x.data_ptr()), keys_in, pos_in, total,
                                                          n, descending);
  KILN_CUDA_LAUNCHED("sort (keys)");
  row_starts_kernel<<<blocks_for(rows + 1), kThreads, 0, stream>>>(starts, rows, n);
  KILN_CUDA_LAUNCHED("sort (row starts)");
  size_t temp_bytes = 0;
  KILN_CUDA_CHECK(cub::DeviceSegmentedSort::StableSortPairs(nullptr, temp_bytes, keys_in, keys_out, pos_in, pos_out,
                                                            total, rows, starts, starts + 1, stream));
  Tensor temp = make_empty({static_cast<int64_t>(std::max<size_t>(temp_bytes, 1))}, kUInt8, dev);
  KILN_CUDA_CHECK(cub::DeviceSegmentedSort::StableSortPairs(temp.data_ptr(), temp_bytes, keys_in, keys_out, pos_in,
                                                            pos_out, total, rows, starts, starts + 1, stream));
  // With k == n the indices are already in place and this only writes them again, unchanged.
  take_first_kernel<<<blocks_for(rows * k), kThreads, 0, stream>>>(
      static_cast<const T*>(x.data_ptr()), pos_out, static_cast<T*>(values.data_ptr()), out_idx, rows, n, k);
  KILN_CUDA_LAUNCHED("sort (take)");
}

// topk with k <= kMaxSelect: a block per row; each thread selects the first k of its share of the
// row (every blockDim.x-th element) in a sort::BestK, then k rounds each take the block's least
// head of those lists (every one of the row's first k is among its thread's first k). One pass
// over the row, where sorting it would write and read it several times.
template <class T>
__global__ void select_first_kernel(const T* __restrict__ x, T* __restrict__ values, int64_t* __restrict__ indices,
                                    int64_t rows, int64_t n, int k, bool descending) {
  using K = sort::key_t<T>;
  using Item = sort::Item<K>;
  __shared__ Item shared[kThreads / kWarp];
  const Item none{~K{0}, INT64_MAX};  // after every element
  const auto first = [](const Item& a, const Item& b) { return sort::before(a, b) ? a : b; };
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* row = x + r * n;
    sort::BestK<K> best(k);
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) best.offer({sort::key_of(row[j], descending), j});
    int taken = 0;
    for (int round = 0; round < k; ++round) {
      const Item head = taken < best.count ? best.items[taken] : none;
      const Item win = block_reduce(head, first, none, shared);
      if (win.pos == head.pos) ++taken;  // positions are distinct: one thread's head won
      if (threadIdx.x == 0) {
        indices[r * k + round] = win.pos;
        values[r * k + round] = row[win.pos];
      }
    }
  }
}

void sort_kernel(KernelArgs& a) {
  const Tensor& x = a.inputs[0];
  const auto& attrs = *static_cast<const SortAttrs*>(a.attrs);
  if (x.size(0) == 0 || attrs.k == 0) return;
  const int64_t rows = x.size(0), n = x.size(1);
  visit_dtype(x.dtype(), "sort", [&]<class T>() {
    if (attrs.k <= sort::kMaxSelect && attrs.k < n) {
      select_first_kernel<<<blocks_for(rows * kThreads), kThreads, 0, stream_of(a)>>>(
          static_cast<const T*>(x.data_ptr()), static_cast<T*>(a.outputs[0].data_ptr()),
          static_cast<int64_t*>(a.outputs[1].data_ptr()), rows, n, static_cast<int>(attrs.k), attrs.descending);
      KILN_CUDA_LAUNCHED("topk (select)");
    } else {
      sort_rows<T>(a, x, a.outputs[0], a.outputs[1], attrs.k, attrs.descending);
    }
  });
}

KILN_REGISTER_KERNEL(Op::Sort, DeviceType::CUDA, sort_kernel);

// The contract in dispatch.h: one thread per value, each a binary search of its row.
template <class T, class I>
__global__ void searchsorted_kernel(const T* __restrict__ sorted, const T* __restrict__ values, I* __restrict__ out,
                                    int64_t total, int64_t b, int64_t m, int64_t k, bool right) {
  KILN_GRID_STRIDE(e, total) {
    const T* row = sorted + (b == 1 ? 0 : e / k) * m;
    out[e] = static_cast<I>(search::bound<compute_t<T>>(row, m, values[e], right));
  }
}

void searchsorted(KernelArgs& a) {
  const Tensor &sorted = a.inputs[0], &values = a.inputs[1], &out = a.outputs[0];
  const bool right = static_cast<const SearchSortedAttrs*>(a.attrs)->right;
  const int64_t total = out.numel();
  if (total == 0) return;
  visit_dtype(sorted.dtype(), "searchsorted", [&]<class T>() {
    auto launch = [&]<class I>() {
      searchsorted_kernel<T, I><<<blocks_for(total), kThreads, 0, stream_of(a)>>>(
          static_cast<const T*>(sorted.data_ptr()), static_cast<const T*>(values.data_ptr()),
          static_cast<I*>(out.data_ptr()), total, sorted.size(0), sorted.size(1), values.size(1), right);
    };
    if (out.dtype() == kInt32) launch.template operator()<int32_t>();
    else launch.template operator()<int64_t>();
  });
  KILN_CUDA_LAUNCHED("searchsorted");
}

KILN_REGISTER_KERNEL(Op::SearchSorted, DeviceType::CUDA, searchsorted);

}  // namespace
}  // namespace kiln::backend::cuda
