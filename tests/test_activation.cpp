// leaky_relu, elu, softplus, hardtanh and relu6 (functions, nn modules, F::): torch's values and
// gradients (tests/fixtures/numerics/activations.safetensors, made by
// tests/fixtures/make_activation_fixtures.py) in float64, float32, bfloat16 and float16 on every
// device present; bad input; and on the stand-in GPU, no fallback. (Second-order gradients are
// rows of tests/test_gradcheck.cpp.)
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
const char* const kFixture = "numerics/activations.safetensors";

struct Case {
  std::string name;
  std::function<Tensor(const Tensor&)> fn;
  bool exact;  // no exp/log1p inside: torch's bits
};

std::vector<Case> cases() {
  return {
      {"leaky_relu", [](const Tensor& x) { return leaky_relu(x); }, true},
      {"leaky_relu_02", [](const Tensor& x) { return F::leaky_relu(x, {0.2}); }, true},
      {"elu", [](const Tensor& x) { return nn::ELU()(x); }, false},
      {"elu_05", [](const Tensor& x) { return elu(x, 0.5); }, false},
      {"softplus", [](const Tensor& x) { return F::softplus(x); }, false},
      {"softplus_2_5", [](const Tensor& x) { return nn::Softplus(nn::SoftplusOptions{2, 5})(x); }, false},
      {"hardtanh", [](const Tensor& x) { return nn::Hardtanh()(x); }, true},
      {"relu6", [](const Tensor& x) { return F::relu6(x); }, true},
  };
}

class ActivationTorch : public ::testing::TestWithParam<ScalarType> {};

TEST_P(ActivationTorch, ValuesAndGradientsAsTorchOnEveryDevice) {
  const ScalarType dt = GetParam();
  const std::string name = dtype_name(dt);
  // 16-bit results are rounded once from float32, torch's too: an ulp where the float32 values
  // straddle a rounding boundary. float32's exp/expm1/log1p are Kiln's vector functions (a few ulp).
  const double ulps = dt == kFloat64 ? 4 : dt == kFloat32 ? 8 : 1;
  for (Device d : devices()) {
    const Tensor x = fixture_tensor(kFixture, "x").to(d, dt), g = fixture_tensor(kFixture, "g").to(d, dt);
    for (const Case& c : cases()) {
      const std::string where = name + " " + c.name + " on " + d.str();
      Tensor xg = x.detach().requires_grad_();
      Tensor y = c.fn(xg);
      y.backward(g);
      const Tensor want = fixture_tensor(kFixture, name + "." + c.name),
                   want_grad = fixture_tensor(kFixture, name + "." + c.name + ".grad");
      if (c.exact) {
        expect_same_bits(y.detach().cpu(), want, where);
        expect_same_bits(xg.grad().cpu(), want_grad, where + " gradient");
      } else {
        expect_within_ulps(y.detach().cpu(), want, ulps, where);
        expect_within_ulps(xg.grad().cpu(), want_grad, ulps, where + " gradient");
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, ActivationTorch, ::testing::Values(kFloat64, kFloat32, kBFloat16, kFloat16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(Activation, StridedInputsAndModulesPrintAsTorch) {
  const Tensor x = randn({4, 6});
  expect_same_bits(leaky_relu(x.t(), 0.3), leaky_relu(x.t().contiguous(), 0.3), "leaky_relu of a transpose");
  expect_same_bits(softplus(x.slice(1, 0, std::nullopt, 2)), softplus(x.slice(1, 0, std::nullopt, 2).contiguous()),
                   "softplus of a slice");
  EXPECT_EQ(printed(*nn::LeakyReLU()), "LeakyReLU(negative_slope=0.01)");
  EXPECT_EQ(printed(*nn::ELU(nn::ELUOptions{0.5})), "ELU(alpha=0.5)");
  EXPECT_EQ(printed(*nn::Softplus()), "Softplus(beta=1.0, threshold=20.0)");
  EXPECT_EQ(printed(*nn::Hardtanh()), "Hardtanh(min_val=-1.0, max_val=1.0)");
  EXPECT_EQ(printed(*nn::ReLU6()), "ReLU6()");
  EXPECT_EQ(printed(*nn::Softplus(nn::SoftplusOptions{1e5, 1e16})), "Softplus(beta=100000.0, threshold=1e+16)");
  EXPECT_EQ(printed(*nn::LeakyReLU(nn::LeakyReLUOptions{1e-5})), "LeakyReLU(negative_slope=1e-05)");
  EXPECT_EQ(printed(*nn::ELU(nn::ELUOptions{-0.0001})), "ELU(alpha=-0.0001)");
  // The gradient keeps a channels-last input's layout, as relu's.
  Tensor c = randn({2, 3, 4, 5}).contiguous(MemoryFormat::ChannelsLast).requires_grad_();
  leaky_relu(c).sum().backward();
  EXPECT_EQ(c.grad().strides(), c.strides());
}

// Second derivatives as torch's: 0 at elu's kink and at softplus's threshold, and finite where the
// branch `where` leaves out would overflow (exp(800) in float64, exp(12 beta) in float16).
TEST(Activation, SecondDerivativesAsTorch) {
  auto second = [](const std::function<Tensor(const Tensor&)>& f, std::vector<double> v, ScalarType dt) {
    Tensor x = tensor(v, Shape{static_cast<int64_t>(v.size())}, dt).requires_grad_();
    Tensor g = autograd::grad({f(x).sum()}, {x}, {}, false, false, true)[0];
    return values(autograd::grad({g.sum()}, {x})[0]);
  };
  EXPECT_EQ(second([](const Tensor& x) { return elu(x, 0.5); }, {0.0, -0.0, 800.0, 2.0}, kFloat64),
            (std::vector<double>{0, 0, 0, 0}));
  const std::vector<double> sp = second([](const Tensor& x) { return softplus(x, 2, 5); }, {2.5, 800.0, -800.0}, kFloat64);
  EXPECT_EQ(sp, (std::vector<double>{0, 0, 0}));
  for (double v : second([](const Tensor& x) { return softplus(x); }, {12.0, 15.0, -3.0}, kFloat16))
    EXPECT_TRUE(std::isfinite(v)) << v;
  // A float16 first derivative under create_graph equals the kernel's.
  Tensor x = tensor(std::vector<double>{12.0, 15.0, -3.0, 0.5}, Shape{4}, kFloat16).requires_grad_();
  const Tensor with_graph = autograd::grad({softplus(x).sum()}, {x}, {}, false, false, true)[0];
  const Tensor plain = autograd::grad({softplus(x).sum()}, {x})[0];
  expect_within_ulps(with_graph.detach(), plain, 1, "float16 softplus gradient under create_graph");
  // hardtanh's ends compared in float32, as the kernel does, not rounded to bfloat16.
  Tensor b = tensor(std::vector<double>{-0.30078125}, Shape{1}, kBFloat16).requires_grad_();
  EXPECT_EQ(values(autograd::grad({hardtanh(b, -0.301, 1).sum()}, {b}, {}, false, false, true)[0]),
            std::vector<double>{1});
}

TEST(Activation, BadInputIsAnErrorNamingTheOp) {
  expect_error([] { leaky_relu(tensor({1, 2})); }, "[leaky_relu] expects a floating-point tensor, got int64");
  expect_error([] { elu(Tensor()); }, "[elu]");
  expect_error([] { softplus(zeros({2}), 0.0); }, "[softplus] beta must not be 0");
  expect_error([] { hardtanh(zeros({2}), 1, -1); }, "[hardtanh] min_val (1) must not be above max_val (-1)");
  expect_error([] { nn::Hardtanh(nn::HardtanhOptions{2, 1}); }, "[Hardtanh]");
}

// On the stand-in GPU each runs its CUDA kernel's case (no fallback), forward and backward.
TEST(Activation, HaveCudaKernels) {
  if (cuda::is_available()) GTEST_SKIP() << "a real GPU is present: ActivationTorch runs these there";
  StandInCuda stand_in(StandInCuda::Kernels::CpuWhereCudaHasOne);
  if (stand_in.native_ops() == 0) GTEST_SKIP() << "built without CUDA kernels";
  const auto before = fallback_counts();
  Tensor x = randn({4, 6}).to(Device::cuda(0)).requires_grad_();
  (leaky_relu(x) + elu(x) + softplus(x) + hardtanh(x) + relu6(x)).sum().backward();
  EXPECT_EQ(x.grad().device(), Device::cuda(0));
  EXPECT_EQ(fallback_counts(), before) << "an op fell back to the CPU";
}

}  // namespace
}  // namespace kiln::test
