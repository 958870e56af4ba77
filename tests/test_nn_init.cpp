// kiln::nn::init and the layers' default initialisation: statistics against PyTorch's formulas.
#include <cmath>

#include "kiln/nn.h"
#include "test_util.h"

namespace kiln::test {
namespace {

namespace nn = kiln::nn;
namespace init = kiln::nn::init;

struct Stats {
  double mean, std, min, max;
};
Stats stats_of(const Tensor& t) {
  std::vector<double> v = values(t);
  double s = 0, s2 = 0, lo = v[0], hi = v[0];
  for (double x : v) {
    s += x;
    s2 += x * x;
    lo = std::min(lo, x);
    hi = std::max(hi, x);
  }
  double n = static_cast<double>(v.size());
  double mean = s / n;
  return {mean, std::sqrt(s2 / n - mean * mean), lo, hi};
}

// U(-b, b): within the bounds, reaching near them, mean 0 and std b / sqrt(3).
void expect_uniform(const Tensor& t, double bound, const std::string& what) {
  Stats s = stats_of(t);
  double n = static_cast<double>(t.numel());
  EXPECT_GE(s.min, -bound) << what;
  EXPECT_LE(s.max, bound) << what;
  EXPECT_LT(s.min, -0.99 * bound) << what;
  EXPECT_GT(s.max, 0.99 * bound) << what;
  double sd = bound / std::sqrt(3.0);
  EXPECT_NEAR(s.mean, 0.0, 6 * sd / std::sqrt(n)) << what;
  EXPECT_NEAR(s.std, sd, 0.02 * sd) << what;
}

void expect_normal(const Tensor& t, double mean, double sd, const std::string& what) {
  Stats s = stats_of(t);
  double n = static_cast<double>(t.numel());
  EXPECT_NEAR(s.mean, mean, 6 * sd / std::sqrt(n)) << what;
  EXPECT_NEAR(s.std, sd, 0.02 * sd) << what;
}

TEST(NnInit, GainAndFans) {
  EXPECT_DOUBLE_EQ(init::calculate_gain(init::Nonlinearity::ReLU), std::sqrt(2.0));
  EXPECT_DOUBLE_EQ(init::calculate_gain(init::Nonlinearity::Tanh), 5.0 / 3.0);
  EXPECT_DOUBLE_EQ(init::calculate_gain(init::Nonlinearity::Linear), 1.0);
  EXPECT_DOUBLE_EQ(init::calculate_gain(init::Nonlinearity::LeakyReLU), std::sqrt(2.0 / (1 + 0.01 * 0.01)));
  EXPECT_DOUBLE_EQ(init::calculate_gain(init::Nonlinearity::LeakyReLU, std::sqrt(5.0)), std::sqrt(1.0 / 3.0));
  // A negative slope is a slope (torch: sqrt(2 / 1.04) for -0.2), not "not given".
  EXPECT_DOUBLE_EQ(init::calculate_gain(init::Nonlinearity::LeakyReLU, -0.2), std::sqrt(2.0 / 1.04));
  EXPECT_DOUBLE_EQ(init::calculate_gain(init::Nonlinearity::LeakyReLU, 0.0), std::sqrt(2.0));
  auto [in, out] = init::calculate_fan_in_and_fan_out(empty({64, 32, 3, 5}));
  EXPECT_EQ(in, 32 * 15);
  EXPECT_EQ(out, 64 * 15);
  expect_error([] { init::kaiming_uniform_(empty({5})); }, "[calculate_fan_in_and_fan_out] fan in and fan out need");
  expect_error([] { init::normal_(empty({5}, kInt64)); }, "[init::normal_] expected a floating-point tensor");
}

TEST(NnInit, KaimingAndXavierFollowTheirFormulas) {
  manual_seed(0);
  Tensor w = empty({256, 128, 3, 3});
  init::kaiming_normal_(w, 0.0, init::FanMode::FanOut, init::Nonlinearity::ReLU);
  expect_normal(w, 0.0, std::sqrt(2.0) / std::sqrt(256.0 * 9), "kaiming_normal_ fan_out relu");
  init::kaiming_uniform_(w, 0.0, init::FanMode::FanIn, init::Nonlinearity::ReLU);
  expect_uniform(w, std::sqrt(2.0) * std::sqrt(3.0 / (128.0 * 9)), "kaiming_uniform_ fan_in relu");
  Tensor m = empty({300, 500});
  init::xavier_uniform_(m, 2.0);
  expect_uniform(m, 2.0 * std::sqrt(6.0 / 800.0), "xavier_uniform_");
  init::xavier_normal_(m);
  expect_normal(m, 0.0, std::sqrt(2.0 / 800.0), "xavier_normal_");
  init::normal_(m, 3.0, 0.5);
  expect_normal(m, 3.0, 0.5, "normal_");
  init::uniform_(m, -2.0, 2.0);
  expect_uniform(m, 2.0, "uniform_");
  init::constant_(m, 1.5);
  EXPECT_EQ(stats_of(m).min, 1.5);
  EXPECT_EQ(stats_of(m).max, 1.5);
  init::zeros_(m);
  EXPECT_EQ(stats_of(m).max, 0.0);
  init::ones_(m);
  EXPECT_EQ(stats_of(m).min, 1.0);
}

TEST(NnInit, InitialisersWorkOnParametersAndRecordNothing) {
  nn::Linear lin(10, 10);
  init::normal_(lin->weight, 0.0, 0.01);
  EXPECT_TRUE(lin->weight.is_leaf());
  EXPECT_TRUE(lin->weight.requires_grad());
}

TEST(NnInit, LayerDefaultsMatchPyTorch) {
  manual_seed(3);
  // Linear: weight and bias U(-1/sqrt(in), 1/sqrt(in)).
  nn::Linear lin(400, 600);
  expect_uniform(lin->weight, 1.0 / std::sqrt(400.0), "Linear.weight");
  Stats b = stats_of(lin->bias);
  EXPECT_LE(b.max, 1.0 / std::sqrt(400.0));
  EXPECT_GE(b.min, -1.0 / std::sqrt(400.0));
  // Conv2d: fan_in = in / groups * kH * kW.
  nn::Conv2d conv(64, 128, 3, {.groups = 2});
  EXPECT_EQ(conv->weight.shape(), (Shape{128, 32, 3, 3}));
  expect_uniform(conv->weight, 1.0 / std::sqrt(32.0 * 9), "Conv2d.weight");
  Stats cb = stats_of(conv->bias);
  EXPECT_LE(cb.max, 1.0 / std::sqrt(32.0 * 9));
  EXPECT_GT(cb.max - cb.min, 0.0);
  // BatchNorm2d: weight 1, bias 0, running_mean 0, running_var 1, num_batches_tracked 0.
  nn::BatchNorm2d bn(5);
  EXPECT_EQ(values(bn->weight), std::vector<double>(5, 1.0));
  EXPECT_EQ(values(bn->bias), std::vector<double>(5, 0.0));
  EXPECT_EQ(values(bn->running_mean), std::vector<double>(5, 0.0));
  EXPECT_EQ(values(bn->running_var), std::vector<double>(5, 1.0));
  EXPECT_EQ(bn->num_batches_tracked.item<int64_t>(), 0);
  nn::BatchNorm2d plain(5, {.affine = false, .track_running_stats = false});
  EXPECT_TRUE(plain->parameters().empty());
  EXPECT_TRUE(plain->buffers().empty());
}

TEST(NnInit, SameSeedSameWeights) {
  manual_seed(11);
  nn::Conv2d a(3, 4, {3, 5}, {.bias = false});
  manual_seed(11);
  nn::Conv2d b(3, 4, {3, 5}, {.bias = false});
  EXPECT_EQ(a->weight.shape(), (Shape{4, 3, 3, 5}));
  EXPECT_FALSE(a->bias.defined());
  EXPECT_EQ(values(a->weight), values(b->weight));
}

}  // namespace
}  // namespace kiln::test
