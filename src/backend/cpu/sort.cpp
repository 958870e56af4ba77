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
#include "backend/sort_math.h"

namespace kiln::backend::cpu {
namespace {

// At most this k is selected in one pass (best_k); a larger k sorts a row's items.
constexpr int64_t kFewest = 16;

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

// The key part of an item.
inline uint64_t key_part(uint64_t word) { return word >> 32; }
template <class K> K key_part(const std::pair<K, int64_t>& p) { return p.first; }

// The k smallest items of the row, in order, in one pass: an item is inserted only when it beats
// the k-th so far (in random data k ln(n / k) times; at most n times, k steps each). The keys go
// in blocks whose least key is taken first (a loop the compiler vectorizes): a block none of whose
// keys is below the k-th's (a later position loses a tie) is passed over whole.
template <class T, class I, class MakeItem>
void best_k(const T* row, int64_t n, int64_t k, bool descending, const MakeItem& make, std::vector<I>& best) {
  using K = sort::key_t<T>;
  constexpr int64_t kBlock = 64;
  K keys[kBlock];
  best.clear();
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t m = std::min(kBlock, n - b);
    K least = ~K{0};
    for (int64_t i = 0; i < m; ++i) {
      keys[i] = sort::key_of(row[b + i], descending);
      least = std::min(least, keys[i]);
    }
    if (static_cast<int64_t>(best.size()) == k && !(least < key_part(best.back()))) continue;
    for (int64_t i = 0; i < m; ++i) {
      const I it = make(keys[i], b + i);
      if (static_cast<int64_t>(best.size()) == k) {
        if (!(it < best.back())) continue;
        best.pop_back();
      }
      best.insert(std::upper_bound(best.begin(), best.end(), it), it);
    }
  }
}

// The row's first k items, ordered (in `items`); make(key, position) is an item.
template <class T, class I, class MakeItem>
void first_k(const T* row, int64_t n, int64_t k, bool descending, const MakeItem& make, std::vector<I>& items) {
  if (k <= kFewest && k < n) return best_k(row, n, k, descending, make, items);
  items.resize(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; ++j) items[j] = make(sort::key_of(row[j], descending), j);
  order_first(items, k);
}

// 32-bit keys and positions fit one 64-bit item (key high, position low): sorting those is
// sorting by key, then position, at the speed of sorting integers.
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
      if (packed) {
        const auto word = [](K key, int64_t j) { return (static_cast<uint64_t>(key) << 32) | static_cast<uint64_t>(j); };
        first_k(row, n, k, descending, word, words);
        for (int64_t j = 0; j < k; ++j) io[j] = static_cast<int64_t>(words[j] & 0xffffffffu);
      } else {
        first_k(row, n, k, descending, [](K key, int64_t j) { return std::pair<K, int64_t>{key, j}; }, pairs);
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

}  // namespace
}  // namespace kiln::backend::cpu
