// l1_loss, smooth_l1_loss, huber_loss, binary_cross_entropy (functions, nn modules, F::), pad,
// cosine_similarity and F::normalize: torch's values and gradients (most from
// tests/fixtures/numerics/functional.safetensors, made by tests/fixtures/make_functional_fixtures.py)
// in float64 and float32 on every device present; bad input; and on the stand-in GPU, no fallback.
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
const char* const kFixture = "numerics/functional.safetensors";

const Tensor& fx(const std::string& key) { return fixture_tensor(kFixture, key); }

// Reductions and norms add up in another order than torch's (a gradient's sums of a few terms).
void expect_torch(const Tensor& got, const std::string& key, const std::string& what) {
  expect_torch_close(got, fx(key), what, 1e-7, 1e-15);
}

class FunctionalTorch : public ::testing::TestWithParam<ScalarType> {};

TEST_P(FunctionalTorch, RegressionLossesAsTorch) {
  const std::string dt = dtype_name(GetParam());
  struct Loss {
    std::string name;
    std::function<Tensor(const Tensor&, const Tensor&, Reduction)> fn;
  };
  const std::vector<Loss> losses = {
      {"l1", [](const Tensor& x, const Tensor& y, Reduction r) { return l1_loss(x, y, r); }},
      {"smooth_l1", [](const Tensor& x, const Tensor& y, Reduction r) { return nn::SmoothL1Loss(nn::SmoothL1LossOptions{r})(x, y); }},
      {"smooth_l1_05", [](const Tensor& x, const Tensor& y, Reduction r) { return F::smooth_l1_loss(x, y, {r, 0.5}); }},
      {"smooth_l1_0", [](const Tensor& x, const Tensor& y, Reduction r) { return smooth_l1_loss(x, y, r, 0.0); }},
      {"huber", [](const Tensor& x, const Tensor& y, Reduction r) { return nn::HuberLoss(nn::HuberLossOptions{r})(x, y); }},
      {"huber_2", [](const Tensor& x, const Tensor& y, Reduction r) { return F::huber_loss(x, y, {r, 2.0}); }},
  };
  for (Device d : devices())
    for (const Loss& l : losses)
      for (const auto& [r, rname] : {std::pair{Reduction::None, "none"}, std::pair{Reduction::Mean, "mean"},
                                     std::pair{Reduction::Sum, "sum"}}) {
        const std::string key = dt + "." + l.name + "." + rname, where = key + " on " + d.str();
        Tensor x = fx(dt + ".x").to(d).detach().requires_grad_();
        const Tensor loss = l.fn(x, fx(dt + ".y").to(d), r);
        expect_torch(loss, key, where);
        loss.backward(r == Reduction::None ? fx(dt + ".g_none").to(d) : full({}, 1.5, TensorOptions(GetParam()).device(d)));
        expect_torch(x.grad(), key + ".grad", where + " gradient");
      }
}

TEST_P(FunctionalTorch, CosineSimilarityAndNormalizeAsTorch) {
  const std::string dt = dtype_name(GetParam());
  for (Device d : devices()) {
    Tensor a = fx(dt + ".cos_a").to(d).detach().requires_grad_(), b = fx(dt + ".cos_b").to(d).detach().requires_grad_();
    const Tensor c = F::cosine_similarity(a, b);  // a's row of zeros: 0, with finite gradients
    expect_torch(c, dt + ".cos", dt + " cosine_similarity on " + d.str());
    c.backward(tensor({1.0, 2.0, 3.0, 4.0}, TensorOptions(GetParam()).device(d)));
    expect_torch(a.grad(), dt + ".cos.grad_a", dt + " cosine_similarity gradient of x1 on " + d.str());
    expect_torch(b.grad(), dt + ".cos.grad_b", dt + " cosine_similarity gradient of x2 on " + d.str());
    for (int p : {2, 1}) {
      Tensor x = fx(dt + ".cos_a").to(d).detach().requires_grad_();
      const Tensor n = F::normalize(x, {static_cast<double>(p)});
      const std::string key = dt + ".normalize_" + std::to_string(p);
      expect_torch(n, key, key + " on " + d.str());
      n.backward(fx(dt + ".cos_b").to(d).expand({4, 6}));
      expect_torch(x.grad(), key + ".grad", key + " gradient on " + d.str());
    }
  }
}

// Copies: torch's bits, values and gradients.
TEST_P(FunctionalTorch, PadAsTorch) {
  const std::string dt = dtype_name(GetParam());
  struct Case {
    std::string name;
    Shape amounts;
    std::string mode;
    double value;
  };
  const std::vector<Case> cases = {{"constant_2d", {1, 2, 0, 1}, "constant", 0.5},
                                   {"constant_crop", {-1, 2, 1, -2}, "constant", 0.0},
                                   {"reflect", {2, 1, 3, 0}, "reflect", 0},
                                   {"replicate", {1, 3, 2, 2}, "replicate", 0},
                                   {"circular", {2, 5, 1, 4}, "circular", 0},
                                   {"reflect_1d", {3, 3}, "reflect", 0}};
  for (Device d : devices())
    for (const Case& c : cases) {
      const std::string key = dt + ".pad." + c.name, where = key + " on " + d.str();
      Tensor p = fx(dt + ".p").to(d);
      if (c.name == "reflect_1d") p = p[0][0];
      p = p.detach().requires_grad_();
      const Tensor out = F::pad(p, {c.amounts, c.mode, c.value});
      expect_same_bits(out.detach().cpu(), fx(key), where);
      out.backward((arange(out.numel(), TensorOptions(GetParam())).reshape(out.shape()) / 10).to(d));
      expect_within_ulps(p.grad().cpu(), fx(key + ".grad"), 2, where + " gradient");
    }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, FunctionalTorch, ::testing::Values(kFloat64, kFloat32),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// Review findings (/tmp/review_s21b/REPORT.md): 16-bit losses in float32, rounded once; finite
// gradients where 1 / beta overflows; pad's padding before its cropping, as torch's.
TEST(Functional, LossesOfTinyBetaAnd16BitAndPadThenCrop) {
  Tensor h = tensor({0.0, 1e-6, 0.5, -0.3}, kFloat16).requires_grad_();
  smooth_l1_loss(h, zeros({4}, kFloat16), Reduction::Sum, 1e-5).backward();
  const std::vector<double> g = values(h.grad());
  EXPECT_EQ(g[0], 0);
  EXPECT_NEAR(g[1], 0.1, 0.01);  // d / beta, where 1 / beta is inf in float16
  EXPECT_EQ(g[2], 1);
  EXPECT_EQ(g[3], -1);
  Tensor f = tensor({0.0, 1.0}).requires_grad_();
  smooth_l1_loss(f, zeros({2}), Reduction::Sum, 1e-45).backward();
  EXPECT_EQ(values(f.grad()), (std::vector<double>{0, 1}));
  const Tensor x = randn({3000}, kBFloat16) * 3, y = randn({3000}, kBFloat16) * 3;
  for (double beta : {1.0, 0.5}) {
    expect_same_bits(smooth_l1_loss(x, y, Reduction::None, beta),
                     smooth_l1_loss(x.to(kFloat32), y.to(kFloat32), Reduction::None, beta).to(kBFloat16),
                     "bfloat16 smooth_l1 rounded once");
    expect_same_bits(huber_loss(x, y, Reduction::None, beta * 2),
                     huber_loss(x.to(kFloat32), y.to(kFloat32), Reduction::None, beta * 2).to(kBFloat16),
                     "bfloat16 huber rounded once");
  }
  const Tensor p = tensor({0.0, 1.0, 2.0, 3.0});
  EXPECT_EQ(values(pad(p, {-2, 3}, "reflect")), (std::vector<double>{2, 3, 2, 1, 0}));
  EXPECT_EQ(values(pad(p, {-4, 2}, "replicate")), (std::vector<double>{3, 3}));
  EXPECT_EQ(values(pad(p, {2, -5})), (std::vector<double>{0}));
}

// binary_cross_entropy: torch 2.15's values and gradients (float64), x = 0 and 1 included, where the
// logarithms are clamped at -100 and the input gradient is torch's finite formula.
// torch's values and gradients (torch.nn.functional.kl_div on the same float64 inputs).
TEST(Functional, KlDivAsTorch) {
  for (Device d : devices()) {
    const std::string where = "kl_div on " + d.str();
    const TensorOptions f64 = TensorOptions(kFloat64).device(d);
    Tensor x = tensor({-1.0, -2.0, -0.5, -0.2, -3.0, -1.5}, f64).view({2, 3}).requires_grad_();
    Tensor t = tensor({0.0, 0.3, 0.7, 0.5, 0.25, 0.25}, f64).view({2, 3}).requires_grad_();
    expect_close(kl_div(x, t, Reduction::None).cpu(),
                 {0.0, 0.23880815870221916, 0.10032753924288729, -0.24657359027997264, 0.40342640972002736,
                  0.028426409720027357},
                 {2, 3}, 1e-14, 1e-14, where);
    EXPECT_NEAR(kl_div(x, t, Reduction::Sum).item<double>(), 0.5244149271051886, 1e-14) << where;
    EXPECT_NEAR(kl_div(x, t).item<double>(), 0.08740248785086475, 1e-14) << where;
    const Tensor loss = nn::KLDivLoss(nn::KLDivLossOptions{Reduction::BatchMean})(x, t);
    EXPECT_NEAR(loss.item<double>(), 0.2622074635525943, 1e-14) << where;
    loss.backward();
    expect_close(x.grad().cpu(), {-0.0, -0.15, -0.35, -0.25, -0.125, -0.125}, {2, 3}, 1e-15, 1e-15, where);
    const std::vector<double> gt = values(t.grad());
    EXPECT_TRUE(std::isnan(gt[0])) << "torch's target gradient at 0 is NaN (xlogy's), " << where;
    expect_close(t.grad().cpu().reshape({-1}).slice(0, 1),
                 {0.8980135978370319, 0.5716625280306338, 0.2534264097200274, 1.3068528194400546, 0.5568528194400547},
                 {5}, 1e-14, 1e-14, where);
    // log_target
    x.set_grad({});
    Tensor lt = tensor({-1.2, -1.2, -0.9, -0.7, -1.4, -1.4}, f64).view({2, 3}).requires_grad_();
    const Tensor l2 = F::kl_div(x, lt, {.reduction = Reduction::Sum, .log_target = true});
    EXPECT_NEAR(l2.item<double>(), 0.18901085005610804, 1e-14) << where;
    l2.backward();
    expect_close(x.grad().cpu(),
                 {-0.3011942119122021, -0.3011942119122021, -0.4065696597405991, -0.4965853037914095,
                  -0.2465969639416065, -0.2465969639416065},
                 {2, 3}, 1e-14, 1e-14, where);
    expect_close(lt.grad().cpu(),
                 {0.24095536952976168, 0.5421495814419638, 0.24394179584435946, 0.2482926518957048,
                  0.6411521062481769, 0.2712566603357672},
                 {2, 3}, 1e-14, 1e-14, where);
  }
  auto fn = [](const std::vector<Tensor>& v) { return kl_div(v[0], v[1], Reduction::BatchMean); };
  const std::vector<Tensor> in{randn({2, 3}, kFloat64).requires_grad_(), (rand({2, 3}, kFloat64) + 0.1).requires_grad_()};
  EXPECT_TRUE(autograd::gradcheck(fn, in));
  EXPECT_TRUE(autograd::gradgradcheck(fn, in));
  EXPECT_EQ(printed(*nn::KLDivLoss()), "KLDivLoss()");
  EXPECT_NEAR(kl_div(full({}, -1.0), full({}, 0.5), Reduction::BatchMean).item<double>(), 0.1534264097, 1e-9);
  expect_error([] { kl_div(tensor({1, 2}, kInt64), tensor({1.0, 2.0})); }, "[kl_div] expected floating-point");
  expect_error([] { mse_loss(tensor({1.0}), tensor({1.0}), Reduction::BatchMean); },
               "[mse_loss] BatchMean is a reduction of kl_div only");
  expect_error([] { cross_entropy(zeros({2, 3}), zeros({2}, kInt64), {}, Reduction::BatchMean); },
               "[cross_entropy] BatchMean is a reduction of kl_div only");
}

TEST(Functional, BinaryCrossEntropyAsTorch) {
  for (Device d : devices()) {
    const TensorOptions f64 = TensorOptions(kFloat64).device(d);
    Tensor x = tensor({0.2, 0.9, 0.0, 1.0, 0.5, 0.0}, f64).requires_grad_(),
           y = tensor({0.0, 1.0, 0.0, 1.0, 0.3, 1.0}, f64).requires_grad_();
    const Tensor w = tensor({1.0, 2.0, 1.0, 1.0, 0.5, 1.0}, f64);
    expect_close(F::binary_cross_entropy(x, y, {w, Reduction::None}).cpu(),
                 {0.22314355131420976, 0.21072103131565256, 0.0, -0.0, 0.34657359027997264, 100.0}, {6}, 1e-14,
                 1e-14, "binary_cross_entropy on " + d.str());
    EXPECT_NEAR(binary_cross_entropy(x, y, w).item<double>(), 16.796739695484973, 1e-12);
    const Tensor loss = nn::BCELoss(nn::BCELossOptions{w, Reduction::Sum})(x, y);
    EXPECT_NEAR(loss.item<double>(), 100.78043817290984, 1e-11);
    loss.backward();
    expect_close(x.grad().cpu(), {1.2499999999999998, -2.2222222222222223, 0.0, 0.0, 0.4, -1000000003995.8029}, {6},
                 1e-14, 1e-14, "binary_cross_entropy input gradient on " + d.str());
    const std::vector<double> gy = values(y.grad());
    EXPECT_NEAR(gy[0], 1.3862943611198906, 1e-14);
    EXPECT_NEAR(gy[1], -4.394449154672439, 1e-14);
    EXPECT_EQ(gy[2], INFINITY);
    EXPECT_EQ(gy[3], -INFINITY);
  }
  // bfloat16: in float32, the loss rounded once.
  const Tensor p = rand({64}, kBFloat16), t = rand({64}, kBFloat16);
  expect_same_bits(binary_cross_entropy(p, t, {}, Reduction::None),
                   binary_cross_entropy(p.to(kFloat32), t.to(kFloat32), {}, Reduction::None).to(kBFloat16),
                   "bfloat16 binary_cross_entropy rounded once");
  auto fn = [](const std::vector<Tensor>& v) { return binary_cross_entropy(v[0], v[1]); };
  const std::vector<Tensor> in{(rand({2, 3}, kFloat64) * 0.8 + 0.1).requires_grad_(), rand({2, 3}, kFloat64).requires_grad_()};
  EXPECT_TRUE(autograd::gradcheck(fn, in));
  EXPECT_TRUE(autograd::gradgradcheck(fn, in));
  EXPECT_EQ(printed(*nn::BCELoss()), "BCELoss()");
  expect_error([] { binary_cross_entropy(tensor({1.5}), tensor({1.0})); },
               "[binary_cross_entropy] all elements of input should be between 0 and 1");
  expect_error([] { binary_cross_entropy(tensor({0.5}), tensor({-0.5})); },
               "[binary_cross_entropy] all elements of target should be between 0 and 1");
  expect_error([] { binary_cross_entropy(tensor({0.5, 0.5}), tensor({1.0})); }, "[binary_cross_entropy] the target's shape");
  expect_error([] { binary_cross_entropy(tensor({0.5}), tensor({1.0}, kFloat64)); }, "of one dtype");
  expect_error([] { binary_cross_entropy(tensor({0.5}), tensor({1.0}), ones({1}).requires_grad_()); },
               "the weight is a constant of the loss");
}

TEST(Functional, ModulesPrintAndBadInputIsAnErrorNamingTheOp) {
  EXPECT_EQ(printed(*nn::L1Loss()), "L1Loss()");
  EXPECT_EQ(printed(*nn::SmoothL1Loss()), "SmoothL1Loss()");
  EXPECT_EQ(printed(*nn::HuberLoss()), "HuberLoss()");
  expect_error([] { l1_loss(zeros({2}), tensor({1, 2})); }, "[l1_loss] expected floating-point input and target");
  expect_error([] { huber_loss(zeros({2}), zeros({3})); }, "[huber_loss]");
  expect_error([] { smooth_l1_loss(zeros({2}), zeros({2}), Reduction::Mean, -1); },
               "[smooth_l1_loss] beta must not be negative, got -1");
  expect_error([] { huber_loss(zeros({2}), zeros({2}), Reduction::Mean, 0); }, "[huber_loss] delta must be positive");
  expect_error([] { nn::HuberLoss(nn::HuberLossOptions{Reduction::Sum, -2}); }, "[HuberLoss]");
  expect_error([] { pad(zeros({2, 3}), {1, 1}, "wrap"); }, "[pad] mode must be");
  expect_error([] { pad(zeros({2, 3}), {1, 1, 1}); }, "[pad] expects (before, after) pairs");
  expect_error([] { pad(zeros({2, 3}), {1, 1, 1, 1, 1, 1}); }, "[pad] expects (before, after) pairs");
  expect_error([] { pad(zeros({2, 3}), {3, 0}, "reflect"); }, "[pad] reflect padding of (3, 0) along dim 1 of size 3");
  expect_error([] { pad(zeros({2, 3}), {0, 4}, "circular"); }, "[pad] circular padding of (0, 4) along dim 1 of size 3");
  expect_error([] { pad(zeros({2, 0}), {1, 0}, "replicate"); }, "the dim is empty");
  expect_error([] { pad(zeros({2, 3}), {1, 0}, "reflect", 2.0); }, "[pad] a value is for constant padding");
  expect_error([] { pad(zeros({2, 3}), {-2, -2}); }, "[pad] cropping (-2, -2) along dim 1 of size 3");
  expect_error([] { cosine_similarity(zeros({2, 3}), zeros({2, 4})); }, "[cosine_similarity]");
  // Integer tensors pad with an integer value; nothing to pad still gives a new tensor.
  EXPECT_EQ(pad(tensor({1, 2}), {1, 1}, "constant", 7).to_vector<int64_t>(), (std::vector<int64_t>{7, 1, 2, 7}));
  const Tensor x = tensor({1.0, 2.0});
  EXPECT_FALSE(pad(x, {0, 0}).is_same(x));
}

// On the stand-in GPU each runs on CUDA kernels (no fallback), forward and backward.
TEST(Functional, HaveCudaKernels) {
  if (cuda::is_available()) GTEST_SKIP() << "a real GPU is present: the tests above run there";
  StandInCuda stand_in(StandInCuda::Kernels::CpuWhereCudaHasOne);
  if (stand_in.native_ops() == 0) GTEST_SKIP() << "built without CUDA kernels";
  const auto before = fallback_counts();
  Tensor x = randn({2, 3, 4}).to(Device::cuda(0)).requires_grad_();
  const Tensor y = randn({2, 3, 4}).to(Device::cuda(0));
  (l1_loss(x, y) + smooth_l1_loss(x, y) + huber_loss(x, y) + cosine_similarity(x, y).sum() +
   F::normalize(x).sum() + pad(x, {1, 2, 1, 0}, "reflect").sum() + pad(x, {1, 1}, "circular").sum() +
   pad(x, {2, 1}, "replicate").sum() + pad(x, {1, 1, 1, 1}).sum() + binary_cross_entropy(sigmoid(x), sigmoid(y)))
      .backward();
  EXPECT_EQ(x.grad().device(), Device::cuda(0));
  EXPECT_EQ(fallback_counts(), before) << "an op fell back to the CPU";
}

}  // namespace
}  // namespace kiln::test
