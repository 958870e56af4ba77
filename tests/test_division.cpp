// floor_divide, remainder, fmod, div with a rounding mode, and atan2: torch's values and gradients
// (tests/fixtures/numerics/division.safetensors, made by tests/fixtures/make_division_fixtures.py)
// in float64, float32, bfloat16, float16, int64 and int32 on every device present; integer
// division by zero and the lowest value by -1; methods, operators and in-place forms; bad input;
// the bitwise ops; and on the stand-in GPU, no fallback.
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "fixture_util.h"
#include "stand_in_device.h"
#include "test_util.h"

namespace kiln::test {
namespace {

const char* const kFixture = "numerics/division.safetensors";

struct Case {
  std::string name;
  std::function<Tensor(const Tensor&, const Tensor&)> fn;
  bool differentiable;
};

std::vector<Case> cases() {
  return {
      {"floor_divide", [](const Tensor& a, const Tensor& b) { return floor_divide(a, b); }, false},
      {"remainder", [](const Tensor& a, const Tensor& b) { return a % b; }, true},
      {"trunc", [](const Tensor& a, const Tensor& b) { return a.div(b, "trunc"); }, false},
      {"fmod", [](const Tensor& a, const Tensor& b) { return fmod(a, b); }, true},
      {"atan2", [](const Tensor& a, const Tensor& b) { return a.atan2(b); }, true},
  };
}

class DivisionTorch : public ::testing::TestWithParam<ScalarType> {};

TEST_P(DivisionTorch, ValuesAndGradientsAsTorchOnEveryDevice) {
  const ScalarType dt = GetParam();
  const std::string name = dtype_name(dt);
  for (Device d : devices()) {
    const Tensor a = fixture_tensor(kFixture, "a").to(d, dt), b = fixture_tensor(kFixture, "b").to(d, dt),
                 g = fixture_tensor(kFixture, "g").to(d, dt);
    for (const Case& c : cases()) {
      const std::string where = name + " " + c.name + " on " + d.str();
      Tensor ag = a.detach().requires_grad_(), bg = b.detach().requires_grad_();
      Tensor y = c.fn(ag, bg);
      const Tensor want = fixture_tensor(kFixture, name + "." + c.name);
      // atan2 is libm's (glibc's or CUDA's), torch's float32 Sleef's: an ulp or two apart. The
      // rounded quotients and remainders are exact: torch's bits.
      if (c.name == "atan2") expect_within_ulps(y.detach().cpu(), want, dt == kFloat64 || dt == kFloat32 ? 2 : 1, where);
      else expect_same_bits(y.detach().cpu(), want, where);
      y.backward(g);
      if (!c.differentiable) {  // piecewise constant: zero, as torch's div with a rounding mode
        expect_same_bits(ag.grad().cpu(), zeros_like(g).cpu(), where + " gradient of a");
        expect_same_bits(bg.grad().cpu(), zeros_like(g).cpu(), where + " gradient of b");
        continue;
      }
      const Tensor want_a = fixture_tensor(kFixture, name + "." + c.name + ".grad_a"),
                   want_b = fixture_tensor(kFixture, name + "." + c.name + ".grad_b");
      if (c.name == "atan2") {
        expect_within_ulps(ag.grad().cpu(), want_a, 1, where + " gradient of a");
        expect_within_ulps(bg.grad().cpu(), want_b, 1, where + " gradient of b");
      } else {
        expect_same_bits(ag.grad().cpu(), want_a, where + " gradient of a");
        expect_same_bits(bg.grad().cpu(), want_b, where + " gradient of b");
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, DivisionTorch, ::testing::Values(kFloat64, kFloat32, kBFloat16, kFloat16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// Integers stay integers, Python's // and % and C's / and %, the lowest value by -1 wrapped
// (torch's floor_divide wraps it; its trunc division traps, the fixture holds the wrapped value).
TEST(Division, IntegersAsTorchOnEveryDevice) {
  for (const char* name : {"int64", "int32"})
    for (Device d : devices()) {
      const Tensor a = fixture_tensor(kFixture, std::string(name) + ".a").to(d),
                   b = fixture_tensor(kFixture, std::string(name) + ".b").to(d);
      for (const Case& c : cases()) {
        if (c.name == "atan2") continue;
        const std::string where = std::string(name) + " " + c.name + " on " + d.str();
        const Tensor got = c.fn(a, b), want = fixture_tensor(kFixture, std::string(name) + "." + c.name);
        ASSERT_EQ(got.dtype(), want.dtype()) << where;
        EXPECT_EQ(got.cpu().to_vector<int64_t>(), want.to_vector<int64_t>()) << where;
      }
    }
}

// An integer divided by zero gives 0 (NumPy's answer) on every device: no trap, no garbage.
TEST(Division, IntegerDivisionByZeroIsZero) {
  for (Device d : devices())
    for (ScalarType dt : {kInt64, kInt32, kUInt8}) {
      const Tensor a = tensor({7, 0, 3}, TensorOptions(dt).device(d)), z = zeros({3}, TensorOptions(dt).device(d));
      const std::vector<int64_t> none{0, 0, 0};
      EXPECT_EQ(floor_divide(a, z).cpu().to_vector<int64_t>(), none) << d.str();
      EXPECT_EQ(remainder(a, 0).cpu().to_vector<int64_t>(), none) << d.str();
      EXPECT_EQ(fmod(a, z).cpu().to_vector<int64_t>(), none) << d.str();
      EXPECT_EQ(div(a, z, "trunc").cpu().to_vector<int64_t>(), none) << d.str();
    }
  // uint8 has no signs to mend: 200 // 7 and 200 % 7.
  const Tensor u = tensor({200, 13}, kUInt8);
  EXPECT_EQ(floor_divide(u, 7).to_vector<int64_t>(), (std::vector<int64_t>{28, 1}));
  EXPECT_EQ(remainder(u, 7).dtype(), kUInt8);
  EXPECT_EQ(remainder(u, 7).to_vector<int64_t>(), (std::vector<int64_t>{4, 6}));
}

TEST(Division, NumbersMethodsAndInPlaceForms) {
  // A number first (torch.remainder(3, t)); promotion as torch's: an int tensor by a float number is float.
  EXPECT_EQ(remainder(3, tensor({2, -2})).to_vector<int64_t>(), (std::vector<int64_t>{1, -1}));
  EXPECT_EQ(floor_divide(tensor({7, -7}), 2.0).dtype(), kFloat32);
  EXPECT_EQ(values(floor_divide(tensor({7, -7}), 2.0)), (std::vector<double>{3, -4}));
  EXPECT_EQ(values(tensor({7, -7}).div(2, "floor")), (std::vector<double>{3, -4}));
  EXPECT_EQ(tensor({7, -7}).div(2, "floor").dtype(), kInt64);
  expect_close(atan2(tensor({1, -1}), 0), {M_PI / 2, -M_PI / 2}, {2}, 1e-7, 0);
  EXPECT_EQ(atan2(tensor({1}), tensor({1})).dtype(), kFloat32);
  Tensor x = tensor({5.5, -5.5, 7.0});
  x.remainder_(2);
  EXPECT_EQ(values(x), (std::vector<double>{1.5, 0.5, 1.0}));
  x.fmod_(tensor({1.0, -0.375, 0.75}));
  EXPECT_EQ(values(x), (std::vector<double>{0.5, 0.125, 0.25}));
  x.floor_divide_(0.125);
  EXPECT_EQ(values(x), (std::vector<double>{4, 1, 2}));
  EXPECT_EQ(values(tensor({-7.0}) % 3), std::vector<double>{2});
  EXPECT_EQ(values(tensor({-7.0}).fmod(3)), std::vector<double>{-1});
  // remainder_ records its gradient (the value before, for d/db); floor_divide_ gives zero.
  Tensor a = tensor({5.0, -5.0}).requires_grad_(), b = tensor({3.0, 3.0}).requires_grad_();
  Tensor c = a * 1;
  c.remainder_(b);
  c.sum().backward();
  EXPECT_EQ(values(a.grad()), (std::vector<double>{1, 1}));
  EXPECT_EQ(values(b.grad()), (std::vector<double>{-1, 2}));
  // The rounded quotients' gradient is zero even where the incoming one is inf or NaN (a / 0).
  Tensor n = tensor({1.0, 2.0}).requires_grad_(), dz = tensor({3.0, 0.0}).requires_grad_();
  div(n, dz, "floor").backward(tensor({INFINITY, NAN}));
  EXPECT_EQ(values(n.grad()), (std::vector<double>{0, 0}));
  EXPECT_EQ(values(dz.grad()), (std::vector<double>{0, 0}));
  // A number first, with the operators; %= in place.
  EXPECT_EQ((7 % tensor({4, -4})).to_vector<int64_t>(), (std::vector<int64_t>{3, -1}));
  Tensor r = tensor({7.5, -7.5});
  r %= 2;
  EXPECT_EQ(values(r), (std::vector<double>{1.5, 0.5}));
  // Strided and broadcast operands.
  const Tensor m = randn({4, 6}) * 5;
  expect_same_bits(remainder(m.t(), 1.5), remainder(m.t().contiguous(), 1.5), "remainder of a transpose");
  expect_same_bits(floor_divide(m, tensor({2.0, -3.0, 0.5, 1.0, -1.0, 4.0})),
                   floor_divide(m, tensor({2.0, -3.0, 0.5, 1.0, -1.0, 4.0}).expand({4, 6}).contiguous()),
                   "floor_divide broadcast");
}

TEST(Division, BadInputIsAnErrorNamingTheOp) {
  expect_error([] { remainder(tensor({true}), tensor({true})); }, "[remainder] is not defined for bool tensors");
  expect_error([] { floor_divide(tensor({true}), tensor({false})); }, "[floor_divide]");
  expect_error([] { div(tensor({1.0}), tensor({2.0}), "round"); },
               "[div] rounding_mode must be \"trunc\" or \"floor\", got \"round\"");
  expect_error([] { atan2(Tensor(), tensor({1.0})); }, "[atan2]");
  expect_error([] { fmod(zeros({2}), zeros({3})); }, "[fmod]");
  expect_error([] { Tensor x = tensor({1, 2}); x.remainder_(0.5); }, "[remainder_]");
}

// Bitwise ops (torch's & | ^ ~): integers bit by bit, bool masks logically, bool with int promoted.
TEST(Bitwise, IntegersAndMasksOnEveryDevice) {
  for (Device d : devices()) {
    const TensorOptions on = TensorOptions().device(d);
    const Tensor a = tensor({12, -1, 0, 5}, on), b = tensor({10, 7, -1, 3}, on);
    EXPECT_EQ((a & b).cpu().to_vector<int64_t>(), (std::vector<int64_t>{8, 7, 0, 1})) << d.str();
    EXPECT_EQ((a | b).cpu().to_vector<int64_t>(), (std::vector<int64_t>{14, -1, -1, 7})) << d.str();
    EXPECT_EQ((a ^ b).cpu().to_vector<int64_t>(), (std::vector<int64_t>{6, -8, -1, 6})) << d.str();
    EXPECT_EQ((~a).cpu().to_vector<int64_t>(), (std::vector<int64_t>{-13, 0, -1, -6})) << d.str();
    EXPECT_EQ((a & 4).cpu().to_vector<int64_t>(), (std::vector<int64_t>{4, 4, 0, 4})) << d.str();
    EXPECT_EQ((6 | a).cpu().to_vector<int64_t>(), (std::vector<int64_t>{14, -1, 6, 7})) << d.str();
    EXPECT_EQ((1 ^ a).cpu().to_vector<int64_t>(), (std::vector<int64_t>{13, -2, 1, 4})) << d.str();
    Tensor c = a.clone();
    c &= 6;
    c |= 1;
    c ^= 2;
    EXPECT_EQ(c.cpu().to_vector<int64_t>(), (std::vector<int64_t>{7, 5, 3, 7})) << d.str();
    const Tensor u = tensor({0xF0, 0x0F}, on.dtype(kUInt8));
    EXPECT_EQ((~u).cpu().to_vector<int64_t>(), (std::vector<int64_t>{0x0F, 0xF0})) << d.str();
    const Tensor m = tensor({true, true, false, false}, on), n = tensor({true, false, true, false}, on);
    EXPECT_EQ((m & n).dtype(), kBool);
    EXPECT_EQ(values(m & n), (std::vector<double>{1, 0, 0, 0})) << d.str();
    EXPECT_EQ(values(m | n), (std::vector<double>{1, 1, 1, 0})) << d.str();
    EXPECT_EQ(values(m ^ n), (std::vector<double>{0, 1, 1, 0})) << d.str();
    EXPECT_EQ(values(~m), (std::vector<double>{0, 0, 1, 1})) << d.str();
    EXPECT_EQ((m & a).dtype(), kInt64);
    Tensor k = m.clone();
    k &= n;
    k |= tensor({false, false, false, true}, on);
    EXPECT_EQ(values(k), (std::vector<double>{1, 0, 0, 1})) << d.str();
    k ^= m;
    EXPECT_EQ(values(k), (std::vector<double>{0, 1, 0, 1})) << d.str();
  }
  expect_error([] { return tensor({1.0}) & tensor({1.0}); }, "[bitwise_and] expects integer or bool tensors, got float32");
  expect_error([] { return ~tensor({1.5}); }, "[bitwise_not] expects integer or bool tensors, got float32");
  expect_error([] { Tensor m = tensor({true}); m |= tensor({2}); }, "[bitwise_or_]");
}

// On the stand-in GPU each runs its CUDA kernel's case (no fallback), forward and backward.
TEST(Division, HaveCudaKernels) {
  if (cuda::is_available()) GTEST_SKIP() << "a real GPU is present: DivisionTorch runs these there";
  StandInCuda stand_in(StandInCuda::Kernels::CpuWhereCudaHasOne);
  if (stand_in.native_ops() == 0) GTEST_SKIP() << "built without CUDA kernels";
  const auto before = fallback_counts();
  Tensor a = randn({4, 6}).to(Device::cuda(0)).requires_grad_(), b = (randn({6}) + 3).to(Device::cuda(0));
  (floor_divide(a, b) + a % b + fmod(a, 2) + a.div(b, "trunc") + atan2(a, b)).sum().backward();
  const Tensor i = tensor({7, -7}).to(Device::cuda(0));
  (floor_divide(i, 2) + remainder(i, 3) + fmod(i, -2) + (i & 3) + (i | 1) + (i ^ i) + ~i).sum().item<int64_t>();
  EXPECT_EQ(a.grad().device(), Device::cuda(0));
  EXPECT_EQ(fallback_counts(), before) << "an op fell back to the CPU";
}

}  // namespace
}  // namespace kiln::test
