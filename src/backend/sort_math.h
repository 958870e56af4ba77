// The order sort and topk put elements in, as unsigned keys that both backends sort: the CPU with
// std::sort on (key, position) pairs, CUDA with cub's stable segmented radix sort. One key per
// element gives both devices the same order, ties included (by position: a stable sort).
//
// torch's order: NaN above every number (last ascending, first descending), -0 equal to 0, and
// integers and bool by value. Keys map that onto unsigned integers: floats by the usual bit flip
// (negative: all bits flipped; positive: the sign bit set), -0 made +0 first and every NaN one key
// above +inf; signed integers with the sign bit flipped. A descending sort sorts the complements.
#pragma once

#include <bit>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "kiln/dtype.h"

namespace kiln::backend::sort {

// 64-bit types sort 64-bit keys; the rest widen to 32 bits (the radix sort's cost is in its passes,
// and one key width less is one instantiation of cub's sort less to compile).
template <class T>
using key_t = std::conditional_t<sizeof(T) == 8, uint64_t, uint32_t>;

// In integer operations only (no branches, so that a CPU loop of them vectorizes).
template <class U, class F>
KILN_HOST_DEVICE inline U float_key(F f) {
  constexpr U sign = U{1} << (8 * sizeof(U) - 1);
  constexpr U inf = std::bit_cast<U>(std::numeric_limits<F>::infinity());
  U bits = std::bit_cast<U>(f);
  const U magnitude = bits & ~sign;
  bits = magnitude == 0 ? U{0} : bits;                        // -0 sorts as 0
  const U flip = (bits & sign) ? ~U{0} : sign;                // negative: all bits; positive: the sign
  return magnitude > inf ? ~U{0} : bits ^ flip;               // NaN: above +inf's key
}

template <class T>
KILN_HOST_DEVICE inline key_t<T> key_of(T x, bool descending) {
  using K = key_t<T>;
  K k;
  if constexpr (std::is_same_v<T, double>) k = float_key<uint64_t>(x);
  else if constexpr (std::is_same_v<T, float> || std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>)
    k = float_key<uint32_t>(static_cast<float>(x));  // 16-bit floats widen exactly
  else if constexpr (std::is_same_v<T, bool>) k = x ? 1u : 0u;
  else if constexpr (std::is_signed_v<T>)
    k = static_cast<K>(static_cast<std::make_unsigned_t<T>>(x)) ^ (K{1} << (8 * sizeof(T) - 1));
  else k = static_cast<K>(x);
  return descending ? static_cast<K>(~k) : k;
}

// An element as the sorts see it: its key, then its position (which breaks ties).
template <class K>
struct Item {
  K key;
  int64_t pos;
};
template <class K>
KILN_HOST_DEVICE inline bool before(const Item<K>& a, const Item<K>& b) {
  return a.key < b.key || (a.key == b.key && a.pos < b.pos);
}

// topk's k up to which a selection in one pass (BestK) is used: beyond it the rows are sorted.
inline constexpr int kMaxSelect = 16;

// The k (<= kMaxSelect) first items of those offered, in order: an item is inserted only when it
// comes before the k-th so far (in random data about k ln(n / k) of n times). The CPU selects a
// row's k with one; on CUDA each thread selects its share's k and a block merges them.
template <class K>
struct BestK {
  Item<K> items[kMaxSelect];
  int count = 0, k = 0;

  KILN_HOST_DEVICE explicit BestK(int k_) : k(k_) {}
  KILN_HOST_DEVICE bool full() const { return count == k; }
  // The k-th so far (only when full).
  KILN_HOST_DEVICE const Item<K>& last() const { return items[k - 1]; }
  KILN_HOST_DEVICE void offer(const Item<K>& it) {
    if (full()) {
      if (k == 0 || !before(it, last())) return;
      --count;
    }
    int i = count;
    for (; i > 0 && before(it, items[i - 1]); --i) items[i] = items[i - 1];
    items[i] = it;
    ++count;
  }
};

}  // namespace kiln::backend::sort
