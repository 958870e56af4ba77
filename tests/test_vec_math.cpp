// The vectorized float32 exp/tanh/erf/log/log1p/expm1 behind exp, sigmoid, silu, tanh, gelu, log,
// log1p and expm1: accuracy over the whole range, special values, and the same result in a vector
// body and a scalar tail, in both vector widths (this CPU's loops use one of them; the other is
// called directly here).
#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

#include "backend/math.h"
#include "test_util.h"

using namespace kiln;

namespace {

struct Case {
  const char* name;
  std::function<Tensor(const Tensor&)> op;
  std::function<double(double)> ref;
  double rtol, atol;
};

const double kPi = 3.14159265358979323846;

std::vector<Case> cases() {
  return {
      {"exp", [](const Tensor& x) { return exp(x); }, [](double v) { return std::exp(v); }, 3e-7, 1e-45},
      {"tanh", [](const Tensor& x) { return tanh(x); }, [](double v) { return std::tanh(v); }, 3e-7, 1e-12},
      {"sigmoid", [](const Tensor& x) { return sigmoid(x); }, [](double v) { return 1 / (1 + std::exp(-v)); }, 3e-7, 1.2e-38},  // subnormal results flush to 0
      {"silu", [](const Tensor& x) { return silu(x); }, [](double v) { return v / (1 + std::exp(-v)); }, 3e-7, 3e-37},  // exp(-x) overflows below -88.7
      {"gelu", [](const Tensor& x) { return gelu(x); },
       [](double v) { return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))); }, 1e-6, 5e-7},
      {"gelu_tanh", [](const Tensor& x) { return gelu(x, "tanh"); },
       [](double v) { return 0.5 * v * (1 + std::tanh(std::sqrt(2 / kPi) * (v + 0.044715 * v * v * v))); }, 1e-6, 5e-7},
      // on |x|, so that every input has a real result
      {"log", [](const Tensor& x) { return log(x.abs()); }, [](double v) { return std::log(std::abs(v)); }, 3e-7, 0},
      {"log1p", [](const Tensor& x) { return log1p(x.abs()); }, [](double v) { return std::log1p(std::abs(v)); },
       3e-7, 0},
      {"expm1", [](const Tensor& x) { return expm1(x); }, [](double v) { return std::expm1(v); }, 3e-7, 0},
  };
}

}  // namespace

TEST(VecMath, AccurateOverTheWholeRange) {
  std::vector<float> xs;
  for (int i = 0; i <= 20000; ++i) xs.push_back(-110.0f + 220.0f * static_cast<float>(i) / 20000.0f);
  for (float v : {0.0f, -0.0f, 1e-30f, -1e-30f, 1e-6f, 88.7f, 88.73f, -87.4f, -100.0f, -104.0f}) xs.push_back(v);
  Tensor x = tensor(xs);
  for (const Case& c : cases()) {
    std::vector<double> want;
    for (float v : xs) want.push_back(c.ref(static_cast<double>(v)));
    std::vector<double> got = test::values(c.op(x));
    for (size_t i = 0; i < xs.size(); ++i) {
      double w = want[i];
      if (std::isinf(w) || std::abs(w) > 3.4e38) {
        EXPECT_TRUE(std::isinf(got[i]) || std::abs(got[i]) > 3.3e38) << c.name << " at " << xs[i];
        continue;
      }
      EXPECT_NEAR(got[i], w, c.atol + c.rtol * std::abs(w)) << c.name << " at " << xs[i];
    }
  }
}

TEST(VecMath, SpecialValues) {
  Tensor x = tensor({NAN, INFINITY, -INFINITY, 0.0f, NAN, 1.0f, -1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f, 7.0f, 8.0f, 9.0f, 10.0f});
  auto e = test::values(exp(x));
  EXPECT_TRUE(std::isnan(e[0]) && std::isnan(e[4]));
  EXPECT_EQ(e[1], INFINITY);
  EXPECT_EQ(e[2], 0.0);
  EXPECT_EQ(e[3], 1.0);
  auto t = test::values(tanh(x));
  EXPECT_TRUE(std::isnan(t[0]));
  EXPECT_EQ(t[1], 1.0);
  EXPECT_EQ(t[2], -1.0);
  auto s = test::values(sigmoid(x));
  EXPECT_EQ(s[1], 1.0);
  EXPECT_EQ(s[2], 0.0);
  auto g = test::values(gelu(x));
  EXPECT_TRUE(std::isnan(g[0]));
  EXPECT_EQ(g[1], INFINITY);
}

// log over every binade (subnormals too), log1p from just above -1, and their special values.
TEST(VecMath, LogAndLog1pOverTheWholeFloatRange) {
  std::vector<float> xs;
  for (double v = 1.4e-45; v < 3e38; v *= 1.0137) xs.push_back(static_cast<float>(v));
  Tensor x = tensor(xs);
  std::vector<double> got = test::values(log(x));
  for (size_t i = 0; i < xs.size(); ++i) {
    const double w = std::log(static_cast<double>(xs[i]));
    EXPECT_NEAR(got[i], w, 2e-7 * std::abs(w)) << "log at " << xs[i];
  }
  std::vector<float> us;
  for (double d = 1.0; d > 1e-7; d *= 0.83) us.push_back(static_cast<float>(d - 1.0));  // (-1, 0)
  for (double v = 1e-38; v < 3e38; v *= 1.37) us.push_back(static_cast<float>(v)), us.push_back(static_cast<float>(-v));
  got = test::values(log1p(tensor(us)));
  for (size_t i = 0; i < us.size(); ++i) {
    const double w = std::log1p(static_cast<double>(us[i]));
    if (std::isnan(w)) {
      EXPECT_TRUE(std::isnan(got[i])) << "log1p at " << us[i];
    }
    else EXPECT_NEAR(got[i], w, 3e-7 * std::abs(w)) << "log1p at " << us[i];
  }
  Tensor sp = tensor({0.0f, -0.0f, -1.0f, -2.0f, INFINITY, -INFINITY, NAN, 1.0f});
  auto l = test::values(log(sp)), l1 = test::values(log1p(sp)), e1 = test::values(expm1(sp));
  EXPECT_EQ(l[0], -INFINITY);
  EXPECT_EQ(l[1], -INFINITY);
  EXPECT_TRUE(std::isnan(l[2]) && std::isnan(l[3]) && std::isnan(l[5]) && std::isnan(l[6]));
  EXPECT_EQ(l[4], INFINITY);
  EXPECT_EQ(l[7], 0.0);
  EXPECT_TRUE(l1[0] == 0.0 && !std::signbit(l1[0]) && l1[1] == 0.0 && std::signbit(l1[1]));
  EXPECT_EQ(l1[2], -INFINITY);
  EXPECT_TRUE(std::isnan(l1[3]) && std::isnan(l1[5]) && std::isnan(l1[6]));
  EXPECT_EQ(l1[4], INFINITY);
  EXPECT_TRUE(e1[0] == 0.0 && !std::signbit(e1[0]) && e1[1] == 0.0 && std::signbit(e1[1]));
  EXPECT_EQ(e1[4], INFINITY);
  EXPECT_EQ(e1[5], -1.0);
  EXPECT_TRUE(std::isnan(e1[6]));
}

TEST(VecMath, VectorBodyAndScalarTailAgree) {
  manual_seed(5);
  Tensor x = randn({37}) * 4.0;  // 2 blocks of 16 and a tail of 5
  for (const Case& c : cases()) {
    // Shifting the start by one moves every element between the vector body and the tail.
    auto whole = test::values(c.op(x));
    auto shifted = test::values(c.op(x.narrow(0, 1, 36).contiguous()));
    for (size_t i = 0; i < shifted.size(); ++i) EXPECT_EQ(shifted[i], whole[i + 1]) << c.name << " element " << i + 1;
  }
}

namespace {

// Inputs across exp's, tanh's and erf's ranges, special values among them.
std::vector<float> width_inputs() {
  std::vector<float> xs;
  for (int i = 0; i < 4000; ++i) xs.push_back(-110.0f + 220.0f * static_cast<float>(i) / 4000.0f);
  for (float v : {0.0f, -0.0f, 1e-30f, 88.7f, 88.73f, -104.0f, NAN, INFINITY, -INFINITY}) xs.push_back(v);
  while (xs.size() % 16 != 5) xs.push_back(0.5f);  // whole vectors of either width, and a tail
  return xs;
}

bool same_float(float a, float b) { return (std::isnan(a) && std::isnan(b)) || a == b; }

// The functor f over xs in W-byte vectors (the loops' body) against f on each float alone.
template <int W, class F>
void expect_vector_body_is_scalar(const char* name, F f) {
  std::vector<float> xs = width_inputs(), ys = xs, out(xs.size(), -1.0f), out2(xs.size(), -1.0f);
  std::reverse(ys.begin(), ys.end());
  const int64_t n = static_cast<int64_t>(xs.size());
  const int64_t end = kiln::math::map_vectors<W>(out.data(), xs.data(), n, f);
  const int64_t end2 =
      kiln::math::map_vectors<W>(out2.data(), xs.data(), ys.data(), n, [&](auto a, auto b) { return f(a) * b; });
  const int64_t lanes = kiln::math::kLanes<float, W>;
  EXPECT_EQ(end, n / lanes * lanes) << name << ", " << W << " bytes";
  EXPECT_EQ(end2, end) << name << ", " << W << " bytes";
  for (int64_t i = 0; i < end; ++i) {
    EXPECT_PRED2(same_float, out[i], f(xs[i])) << name << ", " << W << " bytes, at " << xs[i];
    EXPECT_PRED2(same_float, out2[i], f(xs[i]) * ys[i]) << name << ", " << W << " bytes, at " << xs[i];
  }
  for (int64_t i = end; i < n; ++i) EXPECT_EQ(out[i], -1.0f) << name << ": the tail is the caller's";
}

template <int W>
void expect_width_is_scalar() {
  expect_vector_body_is_scalar<W>("exp", [](auto x) { return kiln::math::exp(x); });
  expect_vector_body_is_scalar<W>("tanh", [](auto x) { return kiln::math::tanh(x); });
  expect_vector_body_is_scalar<W>("erf", [](auto x) { return kiln::math::erf(x); });
  expect_vector_body_is_scalar<W>("gelu", kiln::math::GeluErf{});
  expect_vector_body_is_scalar<W>("silu", kiln::math::Silu{});
  expect_vector_body_is_scalar<W>("log", [](auto x) { return kiln::math::log(x); });
  expect_vector_body_is_scalar<W>("log1p", [](auto x) { return kiln::math::log1p(x); });
  expect_vector_body_is_scalar<W>("expm1", [](auto x) { return kiln::math::expm1(x); });
}

}  // namespace

// Both widths' vector bodies give the scalar function's bits (whose accuracy the tests above check
// through the ops), whichever width this CPU's loops use.
TEST(VecMath, BothVectorWidthsGiveTheScalarBits) {
  expect_width_is_scalar<32>();
  expect_width_is_scalar<64>();
}

// float16/bfloat16 data take the same float32 functions (in float32 blocks, vectorised) and are
// rounded once: the bits of the op on float32 copies, rounded. Forward, and the backward of the
// ops differentiated through their input (two operands); several blocks of 256 and a tail.
TEST(VecMath, HalfPrecisionDataGetTheFloat32ResultRoundedOnce) {
  std::vector<float> xs;
  for (int i = 0; i < 1000; ++i) xs.push_back(-12.0f + 24.0f * static_cast<float>(i) / 1000.0f);
  for (float v : {0.0f, -0.0f, -104.0f, 100.0f, NAN, INFINITY, -INFINITY}) xs.push_back(v);
  manual_seed(9);
  for (ScalarType dt : {kBFloat16, kFloat16}) {
    Tensor x = tensor(xs).to(dt), g = randn({static_cast<int64_t>(xs.size())}).to(dt);
    for (const Case& c : cases()) {
      const std::string what = std::string(c.name) + " " + dtype_name(dt);
      std::vector<double> got = test::values(c.op(x)), want = test::values(c.op(x.to(kFloat32)).to(dt));
      for (size_t i = 0; i < got.size(); ++i)
        EXPECT_PRED2(same_float, static_cast<float>(got[i]), static_cast<float>(want[i])) << what << " at " << xs[i];
      // exp, expm1, tanh and sigmoid differentiate through their (rounded) output, log1p through
      // 1 + x (another rounding), the others their input
      const std::string name = c.name;
      if (name == "exp" || name == "expm1" || name == "tanh" || name == "sigmoid" || name == "log1p") continue;
      Tensor a = x.detach().requires_grad_(), a32 = x.to(kFloat32).requires_grad_();
      c.op(a).backward(g);
      c.op(a32).backward(g.to(kFloat32));
      got = test::values(a.grad()), want = test::values(a32.grad().to(dt));
      for (size_t i = 0; i < got.size(); ++i)
        EXPECT_PRED2(same_float, static_cast<float>(got[i]), static_cast<float>(want[i]))
            << what << " backward at " << xs[i];
    }
  }
}
