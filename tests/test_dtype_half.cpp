// float16 conversions (kiln/dtype.h's Half), written without branches so that the CPU's casts
// vectorise, against the branching reference they replaced: every float16 to float32, and
// float32 to float16 over a sample of all floats and every float near each case's boundary.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>

#include "kiln/dtype.h"

namespace {

// The conversions as they were (2026-12-05): one case per branch.
uint16_t reference_from_float(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);
  if (abs < 0x38800000u) {
    if (abs < 0x33000000u) return static_cast<uint16_t>(sign);
    uint32_t e = abs >> 23;
    uint32_t m = (abs & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126 - e;
    uint32_t half = m >> shift;
    uint32_t rem = m & ((1u << shift) - 1);
    uint32_t mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1u))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t r = abs - 0x38000000u;
  uint32_t half = r >> 13;
  uint32_t rem = r & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (half & 1u))) ++half;
  return static_cast<uint16_t>(sign | half);
}

uint32_t reference_to_float_bits(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t e = (h >> 10) & 0x1fu;
  uint32_t m = h & 0x3ffu;
  if (e == 0) {
    if (m == 0) return sign;
    e = 113;
    while ((m & 0x400u) == 0) {
      m <<= 1;
      --e;
    }
    return sign | (e << 23) | ((m & 0x3ffu) << 13);
  }
  if (e == 31) return sign | 0x7f800000u | (m << 13);
  return sign | ((e + 112) << 23) | (m << 13);
}

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace

TEST(DtypeHalf, EveryHalfWidensToTheReferenceBits) {
  for (uint32_t h = 0; h <= 0xffffu; ++h) {
    const float f = kiln::Half::to_float(static_cast<uint16_t>(h));
    uint32_t u;
    std::memcpy(&u, &f, 4);
    ASSERT_EQ(u, reference_to_float_bits(static_cast<uint16_t>(h))) << std::hex << h;
  }
}

TEST(DtypeHalf, FloatsRoundToTheReferenceHalves) {
  int64_t checked = 0;
  auto check = [&](uint32_t u) {
    ++checked;
    ASSERT_EQ(kiln::Half::from_float(from_bits(u)), reference_from_float(from_bits(u))) << std::hex << u;
  };
  // Both signs of every float within 4096 ulps of each boundary of the reference's cases: zero,
  // the smallest subnormal's half (2^-25), the smallest normal (2^-14), overflow, inf and NaN;
  // the halves' own values and their midpoints there are among them.
  for (uint32_t edge : {0u, 0x33000000u, 0x38800000u, 0x477ff000u, 0x7f800000u})
    for (uint32_t d = 0; d <= 8192; ++d) {
      const uint32_t u = edge + d - 4096;
      if (edge == 0 && d < 4096) continue;
      for (uint32_t s : {0u, 0x80000000u}) check((u & 0x7fffffffu) | s);
    }
  // Every float whose half is subnormal, and a sample of all floats (a prime stride).
  for (uint32_t u = 0; u < 0x38800000u; u += u < 0x33000000u ? 4093u : 1u) check(u);
  for (uint64_t u = 0; u <= 0xffffffffu; u += 997) check(static_cast<uint32_t>(u));
  EXPECT_GT(checked, 4000000);
}
