// The CPU kernel of sort and topk: each row's elements as (key, position) items (sort_math.h's
// keys, the ones CUDA sorts), ordered by key and then position, so a tie keeps its order as in a
// stable sort. topk's k < n selects first (one pass for k up to 16, else nth_element) and orders
// only the k it keeps.
#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "backend/cpu/parallel.h"
#include "backend/dispatch.h"
#include "backend/search_math.h"
#include "backend/sort_math.h"

namespace kiln::backend::cpu {
namespace {

// Orders items[0, k) as the first k of all n, ascending.
template <class I>
void order_first(std::vector<I>& items, int64_t k) {
  const int64_t n = static_cast<int64_t>(items.size());
  if (k < n) {
    if (k == 0) return;
    std::nth_element(items.begin(), items.begin() + (k - 1), items.end());
  }
  std::sort(items.begin(), items.begin() + k);
}

// A row's first k <= kMaxSelect positions in one pass (sort::BestK). The keys go in blocks whose
// least key is taken first (a loop the compiler vectorizes): a block none of whose keys is below
// the k-th's (a later position loses a tie) is passed over whole.
template <class T>
void select_first(const T* row, int64_t n, int64_t k, bool descending, int64_t* positions) {
  using K = sort::key_t<T>;
  constexpr int64_t kBlock = 64;
  K keys[kBlock];
  sort::BestK<K> best(static_cast<int>(k));
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t m = std::min(kBlock, n - b);
    K least = ~K{0};
    for (int64_t i = 0; i < m; ++i) {
      keys[i] = sort::key_of(row[b + i], descending);
      least = std::min(least, keys[i]);
    }
    if (best.full() && !(least < best.last().key)) continue;
    for (int64_t i = 0; i < m; ++i) best.offer({keys[i], b + i});
  }
  for (int64_t j = 0; j < k; ++j) positions[j] = best.items[j].pos;
}

// Each row's first k: selected in one pass for a small k; else its items ordered, where 32-bit keys
// and positions fit one 64-bit item (key high, position low): sorting those is sorting by key,
// then position, at the speed of sorting integers.
template <class T>
void sort_rows(const T* x, T* values, int64_t* indices, int64_t rows, int64_t n, int64_t k, bool descending) {
  using K = sort::key_t<T>;
  constexpr bool kPacked = sizeof(K) == 4;
  const bool packed = kPacked && n <= int64_t{1} << 32;
  const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(n, 1));
  parallel_for(rows, grain, [&](int64_t begin, int64_t end) {
    std::vector<uint64_t> words;
    std::vector<std::pair<K, int64_t>> pairs;
    for (int64_t r = begin; r < end; ++r) {
      const T* row = x + r * n;
      T* vo = values + r * k;
      int64_t* io = indices + r * k;
      if (0 < k && k <= sort::kMaxSelect && k < n) {
        select_first(row, n, k, descending, io);
      } else if (packed) {
        words.resize(static_cast<size_t>(n));
        for (int64_t j = 0; j < n; ++j)
          words[j] = (static_cast<uint64_t>(sort::key_of(row[j], descending)) << 32) | static_cast<uint64_t>(j);
        order_first(words, k);
        for (int64_t j = 0; j < k; ++j) io[j] = static_cast<int64_t>(words[j] & 0xffffffffu);
      } else {
        pairs.resize(static_cast<size_t>(n));
        for (int64_t j = 0; j < n; ++j) pairs[j] = {sort::key_of(row[j], descending), j};
        order_first(pairs, k);
        for (int64_t j = 0; j < k; ++j) io[j] = pairs[j].second;
      }
      for (int64_t j = 0; j < k; ++j) vo[j] = row[io[j]];
    }
  });
}

void sort_kernel(KernelArgs& a) {
  const Tensor& x = a.inputs[0];
  const auto& attrs = *static_cast<const SortAttrs*>(a.attrs);
  const int64_t rows = x.size(0), n = x.size(1);
  visit_dtype(x.dtype(), "sort", [&]<class T>() {
    sort_rows(static_cast<const T*>(x.data_ptr()), static_cast<T*>(a.outputs[0].data_ptr()),
              static_cast<int64_t*>(a.outputs[1].data_ptr()), rows, n, attrs.k, attrs.descending);
  });
}

KILN_REGISTER_KERNEL(Op::Sort, DeviceType::CPU, sort_kernel);

// The contract in dispatch.h: a binary search per value, in parallel over the values.
template <class T, class I>
void search_rows(const Tensor& sorted, const Tensor& values, I* out, bool right) {
  const int64_t b = sorted.size(0), m = sorted.size(1), k = values.size(1);
  const T* s = static_cast<const T*>(sorted.data_ptr());
  const T* v = static_cast<const T*>(values.data_ptr());
  parallel_for(values.numel(), 2048, [&](int64_t lo, int64_t hi) {
    for (int64_t e = lo; e < hi; ++e) {
      const T* row = s + (b == 1 ? 0 : e / k) * m;
      out[e] = static_cast<I>(search::bound<compute_t<T>>(row, m, v[e], right));
    }
  });
}

void searchsorted(KernelArgs& a) {
  const Tensor &sorted = a.inputs[0], &values = a.inputs[1], &out = a.outputs[0];
  const bool right = static_cast<const SearchSortedAttrs*>(a.attrs)->right;
  visit_dtype(sorted.dtype(), "searchsorted", [&]<class T>() {
    if (out.dtype() == kInt32) search_rows<T>(sorted, values, static_cast<int32_t*>(out.data_ptr()), right);
    else search_rows<T>(sorted, values, static_cast<int64_t*>(out.data_ptr()), right);
  });
}

KILN_REGISTER_KERNEL(Op::SearchSorted, DeviceType::CPU, searchsorted);

}  // namespace
}  // namespace kiln::backend::cpu
