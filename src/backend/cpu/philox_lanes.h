// Philox 4x32-10 (core/philox.h) for many counters at once in vector registers: the same words,
// W/4 counters per W-byte vector. The fused attention's dropout masks and the dropout op use it;
// call it from code compiled for the running CPU (KILN_VECTORIZE), as vec_math.h's functions.
#pragma once

#include <cstdint>

#include "backend/vec_math.h"

namespace kiln::backend::cpu {

// W/4 lanes of a * b as 64-bit products, split into low and high words: the even and odd lanes
// are multiplied as W/8 zero-extended 64-bit lanes each (one vpmuludq apiece).
template <int W>
KILN_VEC_INLINE math::Vec<uint32_t, W> mulhilo(uint32_t a, math::Vec<uint32_t, W> b, math::Vec<uint32_t, W>* hi) {
  using U32 = math::Vec<uint32_t, W>;
  using U64 = math::Vec<uint64_t, W>;
  const U64 wide = reinterpret_cast<U64>(b), lo32 = U64{} + 0xffffffffull;
  const U64 even = (wide & lo32) * static_cast<uint64_t>(a), odd = (wide >> 32) * static_cast<uint64_t>(a);
  *hi = reinterpret_cast<U32>((even >> 32) | (odd & ~lo32));
  return reinterpret_cast<U32>((even & lo32) | (odd << 32));
}

// philox::philox for the W/4 counters ctr, ctr + 1, ... at once: w[k][lane] is word k of counter
// ctr + lane (the same numbers, computed in vector registers).
template <int W>
KILN_VEC_INLINE void philox_lanes(uint64_t seed, uint64_t ctr, math::Vec<uint32_t, W> w[4]) {
  using U32 = math::Vec<uint32_t, W>;
  U32 iota{};
  for (int l = 0; l < W / 4; ++l) iota[l] = static_cast<uint32_t>(l);
  // The counters' low words, and their high words with the carry where a low word wrapped.
  U32 c0 = iota + static_cast<uint32_t>(ctr);
  U32 c1 = (U32{} + static_cast<uint32_t>(ctr >> 32)) - reinterpret_cast<U32>(c0 < iota), c2{}, c3{};
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  for (int r = 0; r < 10; ++r) {
    U32 hi0, hi1;
    const U32 lo0 = mulhilo<W>(0xD2511F53u, c0, &hi0);
    const U32 lo1 = mulhilo<W>(0xCD9E8D57u, c2, &hi1);
    const U32 n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
    c0 = n0, c1 = lo1, c2 = n2, c3 = lo0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  w[0] = c0, w[1] = c1, w[2] = c2, w[3] = c3;
}

// The 64 words of the 16 counters ctr .. ctr + 15, counter by counter (words[4 c + k] is word k
// of counter ctr + c), W bytes of counters at a time.
template <int W>
KILN_VEC_INLINE void philox16_w(uint64_t seed, uint64_t ctr, uint32_t* words) {
  constexpr int N = W / 4;
  for (int h = 0; h < 16; h += N) {
    math::Vec<uint32_t, W> v[4];
    philox_lanes<W>(seed, ctr + static_cast<uint64_t>(h), v);
    for (int c = 0; c < N; ++c)
      for (int k = 0; k < 4; ++k) words[4 * (h + c) + k] = v[k][c];
  }
}
KILN_VEC_INLINE void philox16(uint64_t seed, uint64_t ctr, uint32_t* words) {
  if (math::wide_vectors())
    philox16_w<64>(seed, ctr, words);
  else
    philox16_w<32>(seed, ctr, words);
}

}  // namespace kiln::backend::cpu
