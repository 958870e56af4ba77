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

namespace kiln::sort {

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

}  // namespace kiln::sort
