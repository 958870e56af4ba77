// conv_transpose2d, group_norm and interpolate (functions, F::, and the modules ConvTranspose2d,
// GroupNorm, Upsample): torch's values and gradients (tests/fixtures/numerics/cnn.safetensors,
// made by tests/fixtures/make_cnn_fixtures.py) in float64 and float32 on every device present;
// their definitions, 16-bit rounding, second derivatives and bad input; and on the stand-in GPU,
// no fallback.
#include <cmath>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "fixture_util.h"
#include "stand_in_device.h"
#include "test_util.h"

namespace kiln::test {
namespace {

namespace F = nn::functional;
const char* const kFixture = "numerics/cnn.safetensors";

const Tensor& fx(const std::string& key) { return fixture_tensor(kFixture, key); }
Tensor leaf_on(const std::string& key, Device d) { return fx(key).to(d).detach().requires_grad_(); }

// Sums in another order than torch's, with an absolute floor for elements that cancel to near 0.
void expect_torch(const Tensor& got, const std::string& key, const std::string& what) {
  expect_torch_close(got, fx(key), what, 1e-5, 1e-12);
}

class CnnTorch : public ::testing::TestWithParam<ScalarType> {};

// The cases of make_cnn_fixtures.py's CONV_T.
struct ConvTCase {
  std::string name;
  bool bias;
  F::ConvTranspose2dFuncOptions o;
};

TEST_P(CnnTorch, ConvTranspose2dAsTorch) {
  const std::string dt = dtype_name(GetParam());
  const std::vector<ConvTCase> cases = {
      {"ct_stride2", true, {.stride = 2, .padding = 1, .output_padding = 1}},
      {"ct_groups", true, {.stride = {1, 2}, .padding = {0, 1}, .groups = 2, .dilation = {2, 1}}},
      {"ct_outpad", true, {.output_padding = 1, .dilation = 2}},
      {"ct_nobias", false, {.stride = 2}},
  };
  for (Device d : devices())
    for (const ConvTCase& c : cases) {
      const std::string key = dt + "." + c.name, where = key + " on " + d.str();
      Tensor x = leaf_on(key + ".x", d), w = leaf_on(key + ".w", d), b = c.bias ? leaf_on(key + ".b", d) : Tensor();
      F::ConvTranspose2dFuncOptions o = c.o;
      o.bias = b;
      const Tensor y = F::conv_transpose2d(x, w, o);
      expect_torch(y, key, where);
      EXPECT_EQ(y.grad_fn()->name(), "ConvTranspose2dBackward") << where;
      y.backward(fx(key + ".g").to(d));
      expect_torch(x.grad(), key + ".grad_x", where + " gradient of x");
      expect_torch(w.grad(), key + ".grad_w", where + " gradient of weight");
      if (c.bias) expect_torch(b.grad(), key + ".grad_b", where + " gradient of bias");
    }
}

TEST_P(CnnTorch, GroupNormAsTorch) {
  const std::string dt = dtype_name(GetParam());
  const struct {
    std::string name;
    int64_t groups;
    bool weight, bias;
    double eps;
  } cases[] = {{"gn_3", 3, true, true, 1e-5}, {"gn_1", 1, false, false, 1e-5}, {"gn_6_eps", 6, true, false, 0.1}};
  for (Device d : devices())
    for (const auto& c : cases) {
      const std::string key = dt + "." + c.name, where = key + " on " + d.str();
      Tensor x = leaf_on(key + ".x", d), w = c.weight ? leaf_on(key + ".w", d) : Tensor(),
             b = c.bias ? leaf_on(key + ".b", d) : Tensor();
      const Tensor y = F::group_norm(x, {c.groups, w, b, c.eps});
      expect_torch(y, key, where);
      y.backward(fx(key + ".g").to(d));
      expect_torch(x.grad(), key + ".grad_x", where + " gradient of x");
      if (c.weight) expect_torch(w.grad(), key + ".grad_w", where + " gradient of weight");
      if (c.bias) expect_torch(b.grad(), key + ".grad_b", where + " gradient of bias");
    }
}

TEST_P(CnnTorch, InterpolateAsTorch) {
  const std::string dt = dtype_name(GetParam());
  const struct {
    std::string name;
    F::InterpolateFuncOptions o;
  } cases[] = {
      {"nearest_size", {.size = {8, 11}}},
      {"nearest_x2", {.scale_factor = {2.0}}},
      {"nearest_down", {.size = {2, 3}}},
      {"nearest_scale13", {.scale_factor = {1.3}}},
      {"nearest_exact", {.size = {3, 10}, .mode = "nearest-exact"}},
      {"bilinear", {.size = {9, 13}, .mode = "bilinear"}},
      {"bilinear_ac", {.size = {9, 13}, .mode = "bilinear", .align_corners = true}},
      {"bilinear_down", {.size = {3, 4}, .mode = "bilinear"}},
      {"bilinear_s17", {.scale_factor = {1.7}, .mode = "bilinear"}},
      {"bilinear_s17r", {.scale_factor = {1.7}, .mode = "bilinear", .recompute_scale_factor = true}},
      {"bilinear_same", {.size = {5, 7}, .mode = "bilinear"}},
      {"bicubic", {.size = {10, 4}, .mode = "bicubic"}},
      {"bicubic_ac", {.size = {8, 9}, .mode = "bicubic", .align_corners = true}},
      {"linear", {.size = {20}, .mode = "linear"}},
      {"trilinear", {.size = {5, 6, 7}, .mode = "trilinear"}},
      {"area", {.size = {3, 4}, .mode = "area"}},
      {"area_1d", {.size = {4}, .mode = "area"}},
  };
  for (Device d : devices())
    for (const auto& c : cases) {
      const std::string key = dt + "." + c.name, where = key + " on " + d.str();
      Tensor x = leaf_on(key + ".x", d);
      const Tensor y = F::interpolate(x, c.o);
      if (c.o.mode.starts_with("nearest")) expect_same_bits(y.detach().cpu(), fx(key), where);
      else expect_torch(y, key, where);
      y.backward(fx(key + ".g").to(d));
      expect_torch(x.grad(), key + ".grad_x", where + " gradient");
    }
}

TEST_P(CnnTorch, InstanceNormAsTorch) {
  const std::string dt = dtype_name(GetParam());
  const struct {
    std::string name;
    bool weight, bias, stats, use_input_stats;
    double momentum, eps;
  } cases[] = {{"in_plain", false, false, false, true, 0.1, 1e-5},
               {"in_affine", true, true, false, true, 0.1, 0.01},
               {"in_running", true, false, true, true, 0.2, 1e-5},
               {"in_eval", false, true, true, false, 0.1, 1e-5}};
  for (Device d : devices())
    for (const auto& c : cases) {
      const std::string key = dt + "." + c.name, where = key + " on " + d.str();
      Tensor x = leaf_on(key + ".x", d), w = c.weight ? leaf_on(key + ".w", d) : Tensor(),
             b = c.bias ? leaf_on(key + ".b", d) : Tensor();
      const Tensor rm = c.stats ? fx(key + ".rm").to(d).clone() : Tensor();
      const Tensor rv = c.stats ? fx(key + ".rv").to(d).clone() : Tensor();
      const Tensor y = F::instance_norm(x, {rm, rv, w, b, c.use_input_stats, c.momentum, c.eps});
      expect_torch(y, key, where);
      if (c.stats) {
        expect_torch(rm, key + ".rm_after", where + " running_mean");
        expect_torch(rv, key + ".rv_after", where + " running_var");
      }
      y.backward(fx(key + ".g").to(d));
      expect_torch(x.grad(), key + ".grad_x", where + " gradient of x");
      if (c.weight) expect_torch(w.grad(), key + ".grad_w", where + " gradient of weight");
      if (c.bias) expect_torch(b.grad(), key + ".grad_b", where + " gradient of bias");
    }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CnnTorch, ::testing::Values(kFloat64, kFloat32),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// <conv_transpose2d(y, w), x> = <y, conv2d(x, w)>: the adjoint, in any layout; its second
// derivatives by finite differences.
TEST(ConvTranspose2d, IsTheAdjointOfConv2dAndTwiceDifferentiable) {
  manual_seed(3);
  for (const bool channels_last : {false, true}) {
    Tensor x = randn({2, 4, 9, 8}, kFloat64), w = randn({6, 2, 3, 2}, kFloat64);
    if (channels_last) x = x.contiguous(MemoryFormat::ChannelsLast);
    const Shape stride{2, 3}, padding{1, 0}, dilation{1, 2};
    const Tensor y = conv2d(x, w, {}, stride, padding, dilation, 2);
    const Tensor gy = randn(y.shape(), kFloat64);
    // Output padding (0, 2) brings conv_transpose2d back to x's size.
    const Tensor gx = conv_transpose2d(gy, w, {}, stride, padding, {0, 2}, 2, dilation);
    ASSERT_EQ(gx.shape(), x.shape());
    EXPECT_NEAR((gx * x).sum().item<double>(), (gy * y).sum().item<double>(), 1e-9);
  }
  auto fn = [](const std::vector<Tensor>& v) {
    return conv_transpose2d(v[0], v[1], v[2], {2, 1}, {1, 0}, {1, 0}, 1, {1, 2});
  };
  const std::vector<Tensor> in{randn({1, 2, 3, 3}, kFloat64).requires_grad_(),
                               randn({2, 3, 2, 2}, kFloat64).requires_grad_(), randn({3}, kFloat64).requires_grad_()};
  EXPECT_TRUE(autograd::gradcheck(fn, in));
  EXPECT_TRUE(autograd::gradgradcheck(fn, in));
}

TEST(ConvTranspose2d, ModuleSixteenBitAndErrors) {
  manual_seed(4);
  nn::ConvTranspose2d m(4, 6, 3, {.stride = 2, .padding = 1, .output_padding = 1, .groups = 2});
  EXPECT_EQ(printed(*nn::ConvTranspose2d(4, 6, 3, {.stride = 2, .padding = 1, .output_padding = 1, .groups = 2, .dilation = 2})),
            "ConvTranspose2d(4, 6, kernel_size=(3, 3), stride=(2, 2), padding=(1, 1), dilation=(2, 2), "
            "output_padding=(1, 1), groups=2)");
  EXPECT_EQ(m->weight.shape(), (Shape{4, 3, 3, 3}));
  EXPECT_EQ(m->bias.shape(), (Shape{6}));
  const double bound = 1 / std::sqrt(3.0 * 9);  // fan_in: dim 1 of the weight times the window
  EXPECT_LE(m->weight.abs().max().item<double>(), bound);
  EXPECT_LE(m->bias.abs().max().item<double>(), bound);
  EXPECT_EQ(printed(*m), "ConvTranspose2d(4, 6, kernel_size=(3, 3), stride=(2, 2), padding=(1, 1), "
                         "output_padding=(1, 1), groups=2)");
  EXPECT_EQ(printed(*nn::ConvTranspose2d(2, 3, {1, 2}, {.bias = false})),
            "ConvTranspose2d(2, 3, kernel_size=(1, 2), stride=(1, 1), bias=False)");
  const Tensor x = randn({2, 4, 5, 5});
  EXPECT_EQ(m(x).shape(), (Shape{2, 6, 10, 10}));
  EXPECT_EQ(m(x[0]).shape(), (Shape{6, 10, 10}));  // unbatched
  // bfloat16: the float32 result within bfloat16's rounding.
  const Tensor h = conv_transpose2d(x.to(kBFloat16), m->weight.to(kBFloat16), m->bias.to(kBFloat16), {2}, {1}, {1}, 2);
  const Tensor f = conv_transpose2d(x.to(kBFloat16).to(kFloat32), m->weight.to(kBFloat16).to(kFloat32),
                                    m->bias.to(kBFloat16).to(kFloat32), {2}, {1}, {1}, 2);
  EXPECT_EQ(h.dtype(), kBFloat16);
  EXPECT_LE((h.to(kFloat32) - f).abs().max().item<double>(), 0.02 * f.abs().max().item<double>());
  // No input channels or no batch: the bias alone, or nothing.
  EXPECT_EQ(values(conv_transpose2d(zeros({1, 0, 2, 2}), zeros({0, 1, 1, 1}), tensor({2.5f}))),
            (std::vector<double>(4, 2.5)));
  EXPECT_EQ(conv_transpose2d(zeros({0, 2, 2, 2}), zeros({2, 3, 2, 2})).shape(), (Shape{0, 3, 3, 3}));
  {  // an empty batch still has a graph: zero gradients (review fix)
    Tensor e = zeros({0, 2, 2, 2}).requires_grad_(), ew = ones({2, 3, 2, 2}).requires_grad_(),
           eb = ones({3}).requires_grad_();
    conv_transpose2d(e, ew, eb).sum().backward();
    EXPECT_EQ(e.grad().shape(), e.shape());
    EXPECT_EQ(values(ew.grad()), std::vector<double>(24, 0.0));
    EXPECT_EQ(values(eb.grad()), std::vector<double>(3, 0.0));
  }
  expect_error([] { conv_transpose2d(zeros({1, 3, 4, 4}), zeros({2, 3, 3, 3})); },
               "[conv_transpose2d] input has 3 channels but weight [2, 3, 3, 3] expects 2");
  expect_error([] { conv_transpose2d(zeros({1, 2, 4, 4}), zeros({2, 3, 3, 3}), {}, {2}, {0}, {2}); },
               "[conv_transpose2d] output_padding [2] must be smaller than either stride [2] or dilation");
  expect_error([] { conv_transpose2d(zeros({1, 2, 1, 1}), zeros({2, 3, 1, 1}), {}, {1}, {1}); },
               "gives an output of size -1");
  expect_error([] { conv_transpose2d(zeros({1, 3, 4, 4}), zeros({3, 1, 3, 3}), {}, {1}, {0}, {0}, 2); },
               "[conv_transpose2d] input has 3 channels, not divisible by groups=2");
  expect_error([] { conv_transpose2d(zeros({1, 2, 4, 4}), zeros({2, 3, 3, 3}), zeros({2})); },
               "[conv_transpose2d] expected bias of shape [3], got [2]");
  expect_error([] { conv_transpose2d(zeros({2, 4, 4}, kInt64), zeros({2, 3, 3, 3}, kInt64)); },
               "[conv_transpose2d] expected a floating-point input");
  expect_error([] { nn::ConvTranspose2d(2, 3, 3, {.stride = 1, .output_padding = 1}); },
               "[ConvTranspose2d] output_padding");
}

TEST(GroupNorm, MatchesItsDefinitionModuleSixteenBitAndErrors) {
  manual_seed(5);
  // Channels-last input, a group of 2 channels: each group's mean 0 and biased variance 1.
  const Tensor x = (randn({3, 4, 5, 6}) * 4 + 2).contiguous(MemoryFormat::ChannelsLast);
  const Tensor y = group_norm(x, 2, {}, {}, 0.0).reshape({3, 2, 60});
  EXPECT_LT(y.mean({2}).abs().max().item<double>(), 1e-5);
  EXPECT_LT((y.var({2}, 0) - 1).abs().max().item<double>(), 1e-4);
  nn::GroupNorm m(2, 4);
  EXPECT_EQ(printed(*m), "GroupNorm(2, 4, eps=1e-05, affine=True, bias=True)");
  EXPECT_EQ(printed(*nn::GroupNorm(1, 3, {.eps = 0.001, .affine = false})),
            "GroupNorm(1, 3, eps=0.001, affine=False, bias=False)");
  const nn::GroupNorm scale_only(1, 3, {.bias = false});
  EXPECT_FALSE(scale_only->bias.defined());
  EXPECT_EQ(scale_only->named_parameters().size(), 1u);
  EXPECT_EQ(values(m->weight), (std::vector<double>(4, 1)));
  EXPECT_EQ(values(m->bias), (std::vector<double>(4, 0)));
  expect_same_bits(m(x), group_norm(x, 2), "GroupNorm with its initial weight and bias");
  // 16-bit: normalised and scaled in float32, rounded once.
  const Tensor w = randn({4}), b = randn({4});
  const Tensor h = x.to(kBFloat16);
  expect_same_bits(group_norm(h, 2, w.to(kBFloat16), b.to(kBFloat16)),
                   group_norm(h.to(kFloat32), 2, w.to(kBFloat16).to(kFloat32), b.to(kBFloat16).to(kFloat32)).to(kBFloat16),
                   "bfloat16 group_norm rounded once");
  // float32 parameters with a 16-bit input, as torch's CPU kernel takes them.
  expect_same_bits(group_norm(h, 2, w, b), group_norm(h.to(kFloat32), 2, w, b).to(kBFloat16),
                   "bfloat16 group_norm with float32 parameters");
  {  // autocast runs it in float32 (torch's CUDA autocast list; Kiln's on every device, as layer_norm)
    AutocastGuard ac(DeviceType::CPU, kBFloat16);
    EXPECT_EQ(group_norm(h, 2).dtype(), kFloat32);
  }
  EXPECT_EQ(group_norm(zeros({0, 4, 3}), 2).shape(), (Shape{0, 4, 3}));
  expect_error([] { group_norm(zeros({2, 6, 3}), 4); },
               "[group_norm] expected the number of channels of input [2, 6, 3] to be divisible by num_groups, got num_groups=4");
  expect_error([] { group_norm(zeros({2, 6, 3}), 3, zeros({3})); }, "[group_norm] expected weight of shape [6]");
  expect_error([] { group_norm(zeros({2, 6}, kInt64), 3); }, "[group_norm] expected a floating-point input");
  expect_error([] { group_norm(zeros({6}), 3); }, "[group_norm] expected an input [N, C, *] of at least 2 dims");
  expect_error([] { group_norm(zeros({2, 6}), 3, zeros({6}, kFloat64)); }, "but weight has float64");
  expect_error([] { group_norm(zeros({2, 6}, kFloat16), 3, zeros({6}, kBFloat16)); }, "but weight has bfloat16");
  expect_error([] { nn::GroupNorm(4, 6); }, "[GroupNorm] num_channels (6) must be divisible by num_groups (4)");
  const std::vector<Tensor> in{randn({2, 4, 3}, kFloat64).requires_grad_(), randn({4}, kFloat64).requires_grad_(),
                               randn({4}, kFloat64).requires_grad_()};
  auto fn = [](const std::vector<Tensor>& v) { return group_norm(v[0], 2, v[1], v[2]); };
  EXPECT_TRUE(autograd::gradcheck(fn, in));
  EXPECT_TRUE(autograd::gradgradcheck(fn, in));
}

TEST(InstanceNorm, ModulesTrainEvaluateAndErrors) {
  manual_seed(7);
  nn::InstanceNorm2d plain(3);
  EXPECT_EQ(printed(*plain),
            "InstanceNorm2d(3, eps=1e-05, momentum=0.1, affine=False, bias=False, track_running_stats=False)");
  EXPECT_TRUE(plain->named_parameters().empty());
  const Tensor x = randn({2, 3, 4, 5}) * 3 + 1;
  expect_same_bits(plain(x), group_norm(x, 3), "InstanceNorm2d without statistics is group_norm of one channel a group");
  expect_same_bits(plain(x[0]), plain(x).select(0, 0), "an unbatched input is one instance");
  nn::InstanceNorm1d tracked(3, {.momentum = 0.5, .affine = true, .track_running_stats = true});
  EXPECT_EQ(printed(*tracked),
            "InstanceNorm1d(3, eps=1e-05, momentum=0.5, affine=True, bias=True, track_running_stats=True)");
  const Tensor s = randn({4, 3, 6}) * 2 + 3;
  tracked(s);  // training: each instance's statistics, the running ones move halfway to their average
  const Tensor batch_mean = s.mean({2}).mean({0});
  EXPECT_LT((tracked->running_mean - batch_mean * 0.5).abs().max().item<double>(), 1e-6);
  EXPECT_EQ(tracked->num_batches_tracked.item<int64_t>(), 0);  // torch's InstanceNorm never counts
  tracked->eval();  // evaluation: the running statistics
  const Tensor e = tracked(s);
  const Tensor want = (s - tracked->running_mean.view({1, 3, 1})) / (tracked->running_var.view({1, 3, 1}) + 1e-5).sqrt();
  EXPECT_LT((e - want).abs().max().item<double>(), 1e-5);
  expect_error([] { nn::InstanceNorm2d(3)(zeros({2, 3})); }, "[InstanceNorm2d] expected 3D (unbatched) or 4D (batched) input, got 2D");
  expect_error([] { nn::InstanceNorm2d(3)(zeros({2, 3, 4, 5, 6})); }, "[InstanceNorm2d] expected 3D (unbatched) or 4D (batched) input, got 5D");
  expect_error([] { instance_norm(zeros({2, 3, 1})); }, "[instance_norm] expected more than 1 spatial element when training");
  expect_error([] { instance_norm(zeros({2, 3})); }, "[instance_norm] expected an input [N, C, *] of rank 3 or more");
  expect_error([] { instance_norm(zeros({2, 3, 4}), {}, {}, {}, {}, false); }, "use_input_stats=false needs running_mean");
  expect_error([] { instance_norm(zeros({2, 3, 4}), zeros({3})); }, "running_mean and running_var must be both given");
  expect_error([] { instance_norm(zeros({2, 3, 4}), zeros({2}), ones({2})); }, "[instance_norm] expected running_mean of shape [3]");
  expect_error([] { instance_norm(zeros({2, 3, 4}), {}, {}, ones({2})); }, "[instance_norm] expected weight of shape [3]");
}

TEST(Interpolate, ModuleIntegersSixteenBitSecondDerivativesAndErrors) {
  manual_seed(6);
  EXPECT_EQ(printed(*nn::Upsample({.scale_factor = {2.0}})), "Upsample(scale_factor=2.0, mode='nearest')");
  EXPECT_EQ(printed(*nn::Upsample({.size = {4, 6}, .mode = "bilinear"})), "Upsample(size=(4, 6), mode='bilinear')");
  EXPECT_EQ(printed(*nn::Upsample({.size = {4}})), "Upsample(size=4, mode='nearest')");
  const Tensor x = randn({2, 3, 4, 5});
  expect_same_bits(nn::Upsample({.scale_factor = {2.0, 3.0}, .mode = "bilinear", .align_corners = true})(x),
                   interpolate(x, {8, 15}, {}, "bilinear", true), "Upsample is interpolate");
  // nearest on integers; 2x repeats each element twice along each dim.
  const Tensor i = tensor({1, 2, 3, 4}, kInt64).view({1, 1, 2, 2});
  EXPECT_EQ(interpolate(i, {}, {2.0}).to_vector<int64_t>(),
            (std::vector<int64_t>{1, 1, 2, 2, 1, 1, 2, 2, 3, 3, 4, 4, 3, 3, 4, 4}));
  // Linear interpolation of a ramp with align_corners is the ramp.
  const Tensor ramp = arange(5, kFloat64).view({1, 1, 5});
  EXPECT_EQ(values(interpolate(ramp, {9}, {}, "linear", true)),
            (std::vector<double>{0, 0.5, 1, 1.5, 2, 2.5, 3, 3.5, 4}));
  // A channels-last input is resampled in its layout, to the same bits.
  const Tensor cl = x.contiguous(MemoryFormat::ChannelsLast);
  for (const char* mode : {"nearest", "bilinear", "bicubic"}) {
    const Tensor r = interpolate(cl, {7, 9}, {}, mode);
    EXPECT_TRUE(r.is_contiguous(MemoryFormat::ChannelsLast)) << mode;
    expect_same_bits(r, interpolate(x, {7, 9}, {}, mode), std::string("channels-last ") + mode);
  }
  // nearest copies: -0, inf and NaN stay what they are; inputs it skips get a zero gradient.
  const double inf = INFINITY, nan = NAN;
  const Tensor special = tensor({-0.0, inf, nan, 1.0}).view({1, 1, 4});
  expect_same_bits(interpolate(special, {8}), special.repeat_interleave(2, 2), "nearest of -0, inf and NaN");
  Tensor d = arange(6, kFloat32).view({1, 1, 6}).requires_grad_();
  interpolate(d, {3}).sum().backward();
  EXPECT_EQ(values(d.grad()), (std::vector<double>{1, 0, 1, 0, 1, 0}));
  // Review fixes (/tmp/review_s22/REPORT.md): 16-bit nearest copies; torch's 2-D nearest takes o
  // (out = in) and o / 2 (out = 2 in) whatever the scale factor (its 1-D kernel does not).
  expect_same_bits(interpolate(x.to(kBFloat16), {}, {2.0}), interpolate(x, {}, {2.0}).to(kBFloat16),
                   "bfloat16 nearest copies");
  const Tensor row = arange(5, kFloat32);
  EXPECT_EQ(values(interpolate(row.view({1, 1, 1, 5}), {}, {1.05})), (std::vector<double>{0, 1, 2, 3, 4}));
  EXPECT_EQ(values(interpolate(row.view({1, 1, 1, 5}), {}, {1.0, 2.1})),
            (std::vector<double>{0, 0, 1, 1, 2, 2, 3, 3, 4, 4}));
  EXPECT_EQ(values(interpolate(row.view({1, 1, 5}), {}, {1.05})), (std::vector<double>{0, 0, 1, 2, 3}));
  expect_error([] { interpolate(zeros({1, 1, 3, 1, 5}), {}, {0.7}); },
               "output sizes must be greater than 0, got input [1, 1, 3, 1, 5] and output size [2, 0, 3]");
  // 16-bit: in float32, rounded once.
  const Tensor h = x.to(kFloat16);
  for (const char* mode : {"bilinear", "bicubic"})
    expect_same_bits(interpolate(h, {7, 9}, {}, mode), interpolate(h.to(kFloat32), {7, 9}, {}, mode).to(kFloat16),
                     std::string("float16 ") + mode + " rounded once");
  for (const char* mode : {"bilinear", "bicubic", "nearest"}) {
    auto fn = [mode](const std::vector<Tensor>& v) { return interpolate(v[0], {5, 3}, {}, mode); };
    const std::vector<Tensor> in{randn({1, 2, 3, 4}, kFloat64).requires_grad_()};
    EXPECT_TRUE(autograd::gradcheck(fn, in)) << mode;
    EXPECT_TRUE(autograd::gradgradcheck(fn, in)) << mode;
  }
  expect_error([] { interpolate(zeros({1, 1, 4, 4}), {}); }, "[interpolate] either size or scale_factor must be given");
  expect_error([] { interpolate(zeros({1, 1, 4, 4}), {2, 2}, {2.0}); }, "only one of size and scale_factor");
  expect_error([] { interpolate(zeros({1, 1, 4, 4}), {2, 2, 2}); },
               "[interpolate] input [1, 1, 4, 4] has 2 spatial dims but size has 3 values");
  expect_error([] { interpolate(zeros({1, 1, 4, 4}), {8}, {}, "linear"); },
               "[interpolate] got 4-D input, but linear mode needs 3-D input");
  expect_error([] { interpolate(zeros({1, 1, 4, 4}), {8}, {}, "nearest", true); }, "align_corners can only be set");
  expect_error([] { interpolate(zeros({1, 1, 4, 4}), {8}, {}, "cubic"); }, "[interpolate] unknown mode 'cubic'");
  expect_error([] { interpolate(zeros({1, 1, 4, 4}), {}, {0.1}); },
               "[interpolate] input and output sizes must be greater than 0");
  expect_error([] { interpolate(zeros({1, 1, 4, 4}), {}, {-2.0}); }, "scale_factor must be positive and finite");
  expect_error([] { interpolate(zeros({4, 4}), {8}); }, "[interpolate] expected a 3-D, 4-D or 5-D input");
  expect_error([] { interpolate(zeros({1, 1, 4, 4}, kInt64), {8}, {}, "bilinear"); },
               "bilinear mode needs a floating-point input");
  expect_error([] { interpolate(zeros({1, 1, 2, 2, 2}), {3}, {}, "area"); }, "area mode takes 3-D and 4-D inputs");
  expect_error([] { interpolate(zeros({1, 1, 4}), {8}, {}, "nearest", std::nullopt, true); },
               "recompute_scale_factor is not meaningful with an explicit size");
  expect_error([] { nn::Upsample(nn::UpsampleOptions{}); }, "[Upsample] either size or scale_factor must be given");
}

// On the stand-in GPU each runs on CUDA kernels (no fallback), forward and backward.
TEST(CnnTorchOps, HaveCudaKernels) {
  if (cuda::is_available()) GTEST_SKIP() << "a real GPU is present: the tests above run there";
  StandInCuda stand_in(StandInCuda::Kernels::CpuWhereCudaHasOne);
  if (stand_in.native_ops() == 0) GTEST_SKIP() << "built without CUDA kernels";
  const auto before = fallback_counts();
  const Device gpu = Device::cuda(0);
  Tensor x = randn({2, 4, 5, 6}).to(gpu).requires_grad_(), w = randn({4, 3, 3, 3}).to(gpu).requires_grad_();
  Tensor gw = randn({4}).to(gpu).requires_grad_(), gb = randn({4}).to(gpu).requires_grad_();
  (conv_transpose2d(x, w, {}, {2}, {1}, {1}).sum() + group_norm(x, 2, gw, gb).sum() +
   interpolate(x, {9, 7}, {}, "bilinear").sum() + interpolate(x, {}, {2.0}).sum() +
   interpolate(x, {3, 8}, {}, "bicubic", true).sum() + interpolate(x, {2, 3}, {}, "area").sum())
      .backward();
  EXPECT_EQ(x.grad().device(), gpu);
  EXPECT_EQ(fallback_counts(), before) << "an op fell back to the CPU";
}

}  // namespace
}  // namespace kiln::test
