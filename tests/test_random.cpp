// The Philox number transforms (core/philox.h), which the CPU and CUDA kernels share: Box-Muller's
// own logarithm, sine and cosine against long double libm, and the CPU's vectorised kernels
// against those scalar formulas (what each CUDA thread computes), bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/philox.h"
#include "kiln/kiln.h"

namespace kiln {
namespace {

// |got - want| in units of the double spacing at want.
double ulps(double got, long double want) {
  const double w = std::fabs(static_cast<double>(want));
  const double ulp = std::nextafter(w, INFINITY) - w;
  return static_cast<double>(std::fabs(static_cast<long double>(got) - want) / ulp);
}

double from_bits(uint64_t u) {
  double d;
  std::memcpy(&d, &u, 8);
  return d;
}

TEST(Random, BoxMullersLogarithmIsWithinTwoUlpOfTheExactOne) {
  std::vector<double> xs;
  // Every 5th value Box-Muller takes the logarithm of, (m + 1) / (2^24 + 1), and the last ones.
  for (uint32_t m = 0; m < (1u << 24); m += 5) xs.push_back((m + 1.0) * (1.0 / 16777217.0));
  for (uint32_t m = (1u << 24) - 8; m < (1u << 24); ++m) xs.push_back((m + 1.0) * (1.0 / 16777217.0));
  // Around the split of [sqrt(1/2), sqrt(2)) and 1, times powers of 2; the smallest and largest normals.
  for (int k = -1020; k <= 1020; k += 17)
    for (double c : {0.7071067811865476, 1.0, 1.4142135623730951})
      for (int d = -3; d <= 3; ++d) xs.push_back(std::ldexp(std::nextafter(c, d < 0 ? 0.0 : 2.0), k) * (1.0 + d * 1e-16));
  xs.push_back(2.2250738585072014e-308);
  xs.push_back(1.7976931348623157e308);
  // Any positive normal, by its bits.
  uint64_t h = 88172645463325252ull;
  for (int i = 0; i < 200000; ++i) {
    h ^= h << 13, h ^= h >> 7, h ^= h << 17;
    const uint64_t bits = (h & 0x000FFFFFFFFFFFFFull) | ((1 + h % 2046) << 52);
    xs.push_back(from_bits(bits));
  }
  double worst = 0, at = 0;
  for (double x : xs) {
    const double e = x == 1.0 ? std::fabs(philox::detail::log_positive(x)) * 1e300 : ulps(philox::detail::log_positive(x), std::log(static_cast<long double>(x)));
    if (e > worst) worst = e, at = x;
  }
  EXPECT_LE(worst, 2.0) << "log(" << at << ") is " << worst << " ulp off";
}

TEST(Random, BoxMullersSineAndCosineAreWithinTwoUlpOfTheExactOnes) {
  double worst = 0, at = 0;
  auto check = [&](double x) {
    double s, c;
    philox::detail::sincos_small(x, &s, &c);
    const double e = std::max(x == 0 ? std::fabs(s) * 1e300 : ulps(s, std::sin(static_cast<long double>(x))),
                              ulps(c, std::cos(static_cast<long double>(x))));
    if (e > worst) worst = e, at = x;
  };
  // Box-Muller's arguments are 2 pi t, t a multiple of 2^-24 in [-1/8, 1/8]: all of them.
  for (int32_t m = -(1 << 21); m <= (1 << 21); ++m) {
    const double t = m * (1.0 / 16777216.0);
    check(philox::detail::fused(t, 6.283185307179586, t * 2.4492935982947064e-16));
  }
  for (double x : {0.0, 1e-300, 1e-8, 0.7853981633974483, -0.7853981633974483}) check(x);
  EXPECT_LE(worst, 2.0) << "sin or cos of " << at << " is " << worst << " ulp off";
}

// The two normals against long double libm's sqrt(-2 log u1) (cos, sin)(2 pi u2), for word pairs
// spread over both words' ranges (the low 8 bits, which the transform drops, vary too).
TEST(Random, BoxMullerGivesTheExactNormalsToAFewUlpOfTheirRadius) {
  double worst = 0;
  uint32_t at1 = 0, at2 = 0;
  uint64_t h = 0x9E3779B97F4A7C15ull;
  for (int i = 0; i < 400000; ++i) {
    h ^= h << 13, h ^= h >> 7, h ^= h << 17;
    const uint32_t w1 = i < 256 ? static_cast<uint32_t>(i) : static_cast<uint32_t>(h),
                   w2 = i < 256 ? ~static_cast<uint32_t>(i) << 8 : static_cast<uint32_t>(h >> 32);
    double z0, z1;
    philox::box_muller(w1, w2, &z0, &z1);
    // The same u1 (a double near 1 is as close as a double can be; its logarithm's error is relative).
    const long double u1 = ((w1 >> 8) + 1.0) * (1.0 / 16777217.0), u2 = (w2 >> 8) / 16777216.0L;
    const long double r = std::sqrt(-2 * std::log(u1)), theta = 2 * 3.14159265358979323846264338327950288L * u2;
    const double ulp_r = std::nextafter(static_cast<double>(r), INFINITY) - static_cast<double>(r);
    const double e = static_cast<double>(
        std::max(std::fabs(z0 - r * std::cos(theta)), std::fabs(z1 - r * std::sin(theta))) / ulp_r);
    if (e > worst) worst = e, at1 = w1, at2 = w2;
  }
  EXPECT_LE(worst, 4.0) << "words " << at1 << ", " << at2 << ": " << worst << " ulp of the radius off";
}

// Element i of a draw that started at counter `offset`: word i % 4 of counter offset + i / 4.
philox::U32x4 counter_words(const GeneratorState& g, int64_t i) {
  return philox::philox(g.seed, g.offset + static_cast<uint64_t>(i / 4));
}

template <class T>
std::vector<T> values_of(const Tensor& t) {
  const T* p = static_cast<const T*>(t.data_ptr());
  return std::vector<T>(p, p + t.numel());
}

// n is odd, so that the last counter is partly used, and spans many 16-counter blocks and threads.
constexpr int64_t kDraw = 100003;

TEST(Random, TheCpusNormalsAreTheScalarFormulasBitForBit) {
  for (ScalarType dt : {kFloat64, kFloat32}) {
    manual_seed(11);
    const GeneratorState g = get_rng_state();
    const Tensor t = empty({kDraw}, dt).normal_(0.3, 1.7).to(kFloat64);
    const std::vector<double> got = values_of<double>(t);
    for (int64_t i = 0; i < kDraw; ++i) {
      const philox::U32x4 w = counter_words(g, i);
      const int pair = static_cast<int>(i % 4) / 2;
      double z0, z1;
      philox::box_muller(w.v[2 * pair], w.v[2 * pair + 1], &z0, &z1);
      const double want = 0.3 + 1.7 * (i % 2 == 0 ? z0 : z1);
      const double want_t = dt == kFloat64 ? want : static_cast<float>(want);
      ASSERT_EQ(got[static_cast<size_t>(i)], want_t) << dtype_name(dt) << " element " << i;
    }
  }
}

TEST(Random, TheCpusUniformAndIntegerDrawsAreTheScalarFormulasBitForBit) {
  manual_seed(12);
  GeneratorState g = get_rng_state();
  const Tensor u = empty({kDraw}, kFloat64).uniform_(-0.37, 0.71);
  const std::vector<double> uv = values_of<double>(u);
  for (int64_t i = 0; i < kDraw; ++i) {
    const double x = -0.37 + (0.71 - -0.37) * philox::uniform01(counter_words(g, i).v[i % 4], 24);
    ASSERT_EQ(uv[static_cast<size_t>(i)], x < 0.71 ? x : -0.37) << "element " << i;
  }
  // bfloat16 gets 8 random bits: never exactly 1.
  g = get_rng_state();
  const Tensor b = rand({kDraw}, kBFloat16).to(kFloat32);
  const std::vector<float> bv = values_of<float>(b);
  for (int64_t i = 0; i < kDraw; ++i) {
    const double x = philox::uniform01(counter_words(g, i).v[i % 4], 8);
    ASSERT_EQ(bv[static_cast<size_t>(i)], static_cast<float>(BFloat16(static_cast<float>(x)))) << "element " << i;
    ASSERT_LT(bv[static_cast<size_t>(i)], 1.0f);
  }
  // randint: two words an element.
  g = get_rng_state();
  const Tensor r = randint(-5, 1000000007, {kDraw}, kInt64);
  const std::vector<int64_t> rv = values_of<int64_t>(r);
  for (int64_t i = 0; i < kDraw; ++i) {
    const philox::U32x4 w = philox::philox(g.seed, g.offset + static_cast<uint64_t>(i / 2));
    const int j = static_cast<int>(i % 2);
    const uint64_t bits = (static_cast<uint64_t>(w.v[2 * j]) << 32) | w.v[2 * j + 1];
    const auto want = -5 + static_cast<int64_t>((static_cast<unsigned __int128>(bits) * 1000000012u) >> 64);
    ASSERT_EQ(rv[static_cast<size_t>(i)], want) << "element " << i;
  }
}

// int64 draws are 64-bit integers all the way (they went through a double, which holds 53 bits:
// randint(2^60 + 1, 2^60 + 4) gave 2^60, below low).
TEST(Random, Int64DrawsKeepEveryBit) {
  const int64_t base = (int64_t{1} << 60) + 1;
  const std::vector<int64_t> small = values_of<int64_t>(randint(base, base + 3, {3000}, kInt64));
  for (int64_t v : {base, base + 1, base + 2})
    EXPECT_NE(std::find(small.begin(), small.end(), v), small.end()) << v << " never drawn";
  for (int64_t v : small) ASSERT_TRUE(v >= base && v < base + 3) << v;
  // The whole of int64 but its last value: high - low = 2^64 - 1.
  manual_seed(14);
  const GeneratorState g = get_rng_state();
  const std::vector<int64_t> all = values_of<int64_t>(randint(INT64_MIN, INT64_MAX, {1001}, kInt64));
  int64_t odd = 0;
  for (size_t i = 0; i < all.size(); ++i) {
    const philox::U32x4 w = philox::philox(g.seed, g.offset + i / 2);
    const int j = static_cast<int>(i % 2);
    const uint64_t bits = (static_cast<uint64_t>(w.v[2 * j]) << 32) | w.v[2 * j + 1];
    const uint64_t x = static_cast<uint64_t>((static_cast<unsigned __int128>(bits) * ~uint64_t{0}) >> 64);
    ASSERT_EQ(all[i], static_cast<int64_t>(static_cast<uint64_t>(INT64_MIN) + x)) << "element " << i;
    odd += all[i] & 1;
  }
  EXPECT_GT(odd, 400);  // the low bits are random too
  EXPECT_LT(odd, 600);
}

// A range the dtype cannot hold is an error naming the op, not wrapped values (as torch's).
TEST(Random, RandintRangesMustFitTheDtype) {
  EXPECT_THROW(randint(0, 1000, {4}, kUInt8), Error);
  EXPECT_THROW(randint(-1, 5, {4}, kUInt8), Error);
  EXPECT_THROW(randint(0, (int64_t{1} << 31) + 1, {4}, kInt32), Error);
  try {
    randint(0, 257, {4}, kUInt8);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("randint"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("[0, 257)"), std::string::npos) << e.what();
  }
  // The edges themselves fit.
  const std::vector<uint8_t> bytes = values_of<uint8_t>(randint(0, 256, {4000}, kUInt8));
  EXPECT_EQ(*std::max_element(bytes.begin(), bytes.end()), 255);
  EXPECT_EQ(*std::min_element(bytes.begin(), bytes.end()), 0);
  const std::vector<int32_t> ints = values_of<int32_t>(randint(INT32_MIN, int64_t{INT32_MAX} + 1, {100}, kInt32));
  EXPECT_EQ(ints.size(), 100u);
}

// The distribution itself: mean, variance and tails of a million normals.
TEST(Random, NormalsHaveTheStandardNormalsMomentsAndTails) {
  manual_seed(13);
  const std::vector<double> z = values_of<double>(randn({1 << 20}, kFloat64));
  double sum = 0, sq = 0;
  int64_t beyond2 = 0, beyond4 = 0;
  for (double v : z) {
    sum += v, sq += v * v;
    beyond2 += std::fabs(v) > 2, beyond4 += std::fabs(v) > 4;
  }
  const double n = static_cast<double>(z.size()), mean = sum / n, var = sq / n - mean * mean;
  EXPECT_NEAR(mean, 0.0, 5 / std::sqrt(n));
  EXPECT_NEAR(var, 1.0, 5 * std::sqrt(2 / n));
  EXPECT_NEAR(beyond2 / n, 0.0455003, 5 * std::sqrt(0.0455 / n));  // P(|Z| > 2)
  EXPECT_NEAR(beyond4 / n, 6.33e-5, 5 * std::sqrt(6.33e-5 / n));   // P(|Z| > 4)
}

}  // namespace
}  // namespace kiln
