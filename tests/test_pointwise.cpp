// addcmul, addcdiv, lerp, and add/sub with alpha: torch's results bit for bit (tests/fixtures/numerics/pointwise.safetensors,
// made by tests/fixtures/make_pointwise_fixtures.py), on every device present; strides and
// broadcasting, type promotion, the in-place forms, bad input, and the stand-in GPU's kernels.
// (Their gradients, first and second order, are rows of tests/test_gradcheck.cpp.)
#include <cmath>
#include <string>
#include <vector>

#include "fixture_util.h"
#include "stand_in_device.h"
#include "test_util.h"

namespace kiln::test {
namespace {

const char* const kFixture = "numerics/pointwise.safetensors";

class PointwiseTorch : public ::testing::TestWithParam<ScalarType> {};

TEST_P(PointwiseTorch, EqualsTorchBitForBitOnEveryDevice) {
  const ScalarType dt = GetParam();
  const std::string name = dtype_name(dt);
  for (Device d : devices()) {
    auto in = [&](const char* k) { return fixture_tensor(kFixture, k).to(d, dt); };
    const Tensor s = in("self"), a = in("t1"), b = in("t2"), w = in("w");
    auto want = [&](const std::string& k) { return fixture_tensor(kFixture, name + "." + k); };
    const std::string where = name + " on " + d.str() + ": ";
    expect_same_bits(addcmul(s, a, b, 0.37).cpu(), want("addcmul"), where + "addcmul");
    expect_same_bits(addcdiv(s, a, b, -0.61).cpu(), want("addcdiv"), where + "addcdiv");
    expect_same_bits(lerp(s, a, 0.1).cpu(), want("lerp_small"), where + "lerp(0.1)");
    expect_same_bits(lerp(s, a, 0.75).cpu(), want("lerp_large"), where + "lerp(0.75)");
    expect_same_bits(lerp(s, a, 1.0).cpu(), want("lerp_one"), where + "lerp(1)");
    expect_same_bits(lerp(s, a, w).cpu(), want("lerp"), where + "lerp(tensor)");
    expect_same_bits(add(s, a, -0.0123).cpu(), want("add_alpha"), where + "add(alpha)");
    expect_same_bits(s.sub(a, 0.37).cpu(), want("sub_alpha"), where + "sub(alpha)");
    // The in-place forms compute the same.
    Tensor x = s.clone();
    x.addcmul_(a, b, 0.37);
    expect_same_bits(x.cpu(), want("addcmul"), where + "addcmul_");
    x = s.clone();
    x.addcdiv_(a, b, -0.61);
    expect_same_bits(x.cpu(), want("addcdiv"), where + "addcdiv_");
    x = s.clone();
    x.lerp_(a, w);
    expect_same_bits(x.cpu(), want("lerp"), where + "lerp_");
    x = s.clone();
    x.add_(a, -0.0123);
    expect_same_bits(x.cpu(), want("add_alpha"), where + "add_(alpha)");
    x = s.clone();
    x.sub_(a, 0.37);
    expect_same_bits(x.cpu(), want("sub_alpha"), where + "sub_(alpha)");
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, PointwiseTorch, ::testing::Values(kFloat64, kFloat32, kBFloat16, kFloat16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// Strided and broadcast operands (the loops' general path) compute what dense copies do.
TEST(Pointwise, ViewsAndBroadcastingEqualDenseCopies) {
  for (Device d : devices()) {
    for (ScalarType dt : {kFloat32, kBFloat16}) {
      Tensor base = randn({6, 5}).to(d, dt);
      Tensor s = base.t(), a = randn({6}).to(d, dt), b = randn({5, 1}).to(d, dt).abs() + 0.5;
      Tensor w = rand({5, 6}).to(d, dt).slice(1, 0, 6, 2);  // [5, 3], strided
      const Tensor se = s.contiguous(), ae = a.expand({5, 6}).contiguous(), be = b.expand({5, 6}).contiguous();
      const std::string what = std::string(dtype_name(dt)) + " on " + d.str();
      expect_same_bits(addcmul(s, a, b, 1.5).cpu(), addcmul(se, ae, be, 1.5).cpu(), what + " addcmul");
      expect_same_bits(addcdiv(s, a, b, 1.5).cpu(), addcdiv(se, ae, be, 1.5).cpu(), what + " addcdiv");
      expect_same_bits(lerp(s.slice(1, 0, 6, 2), a.slice(0, 0, 6, 2), w).cpu(),
                       lerp(s.slice(1, 0, 6, 2).contiguous(), a.slice(0, 0, 6, 2).expand({5, 3}).contiguous(),
                            w.contiguous())
                           .cpu(),
                       what + " lerp");
      EXPECT_EQ(addcmul(s, a, b).shape(), (Shape{5, 6}));
      EXPECT_EQ(lerp(empty({0, 3}, TensorOptions(dt).device(d)), empty({3}, TensorOptions(dt).device(d)), 0.5).shape(),
                (Shape{0, 3}));
    }
  }
}

// Lerp at its ends and its switch point, and addcmul/addcdiv with value 0 (torch's forms: start
// + w * d below |w| = 0.5, end - d * (1 - w) from there).
TEST(Pointwise, LerpEndsAndValueZero) {
  Tensor s = tensor({1.0f, -3.0f, 1e-8f}), e = tensor({2.0f, 5.0f, 1.0f});
  expect_same_bits(lerp(s, e, 0.0), s, "weight 0");
  expect_same_bits(lerp(s, e, 1.0), e, "weight 1");
  expect_close(lerp(s, e, 0.5), {1.5, 1.0, 0.5}, {3});
  expect_close(lerp(s, e, tensor({-1.0f, 2.0f, 0.25f})), {0.0, 13.0, 0.25 + 1e-8 * 0.75}, {3});
  expect_same_bits(addcmul(s, e, e, 0), s, "addcmul value 0");
  expect_same_bits(addcdiv(s, e, e, 0), s, "addcdiv value 0");
}

TEST(Pointwise, TypePromotion) {
  // Integers: addcmul exact in int64 (torch allows it with an integer value).
  Tensor i = tensor(std::vector<int64_t>{1, 2, 3}, {3}, kInt64);
  Tensor r = addcmul(i, i, i, 2);
  EXPECT_EQ(r.dtype(), kInt64);
  EXPECT_EQ(values(r), (std::vector<double>{3, 10, 21}));
  // Mixed floats promote (float16 self with float32 tensors gives float32), an int self too.
  Tensor h = tensor({1.0f, 2.0f}).to(kFloat16), f = tensor({0.5f, 0.25f});
  EXPECT_EQ(addcmul(h, f, f).dtype(), kFloat32);
  EXPECT_EQ(addcdiv(tensor(std::vector<int64_t>{1, 2}, {2}, kInt64), f, f).dtype(), kFloat32);
  expect_close(addcdiv(h, f, f, 3), {4.0, 5.0}, {2});
  // A bfloat16 tensor updated in place from float32 operands: computed in float32, rounded once.
  Tensor p = tensor({1.0f, 1.0f}).to(kBFloat16);
  p.addcmul_(f, f, 0.1);
  EXPECT_EQ(p.dtype(), kBFloat16);
  EXPECT_EQ(values(p), (std::vector<double>{1.0234375, 1.0078125}));  // 1.025 and 1.00625, rounded
  // add and sub with alpha: integers exact; alpha 1 is the plain op (bool tensors too).
  EXPECT_EQ(values(add(i, i, 3)), (std::vector<double>{4, 8, 12}));
  EXPECT_EQ(values(sub(i, i, -2)), (std::vector<double>{3, 6, 9}));
  EXPECT_EQ(add(i, f.to(kFloat64).narrow(0, 0, 1), 2).dtype(), kFloat64);
  Tensor bools = tensor({true, false});
  EXPECT_EQ(values(add(bools, bools, 1)), (std::vector<double>{1, 0}));
  // A 0-d tensor joins any device and any dtype's promotion rules, as a number does.
  EXPECT_EQ(addcmul(f, scalar_tensor(2.0, TensorOptions(kFloat64)), f).dtype(), kFloat32);
}

TEST(Pointwise, InPlaceFormsChangeSelfAndItsVersion) {
  Tensor x = tensor({1.0f, 2.0f, 3.0f}), y = tensor({2.0f, 2.0f, 2.0f});
  const auto v0 = x.storage()->version.load();
  Tensor& r = x.addcmul_(y, y, 0.5);
  EXPECT_TRUE(r.is_same(x));
  EXPECT_GT(x.storage()->version.load(), v0);
  expect_close(x, {3, 4, 5}, {3});
  x.addcdiv_(y, y, -1);
  expect_close(x, {2, 3, 4}, {3});
  x.lerp_(y, 0.25);
  expect_close(x, {2, 2.75, 3.5}, {3});
  // An operand that is self, or a view of it, is read before the write: x[i] + x[i] * x[i].
  Tensor z = tensor({1.0f, 2.0f, 3.0f});
  z.addcmul_(z, z);
  expect_close(z, {2, 6, 12}, {3});
  Tensor m = tensor({1.0f, 2.0f, 3.0f, 4.0f}).reshape({2, 2});
  m.lerp_(m[0], 1.0);  // every row becomes the first row as it was
  expect_close(m, {1, 2, 1, 2}, {2, 2});
}

TEST(Pointwise, BadInputIsAnErrorNamingTheOp) {
  Tensor f = tensor({1.0f, 2.0f}), i = tensor(std::vector<int64_t>{1, 2}, {2}, kInt64);
  Tensor bools = tensor(std::vector<bool>{true, false}, {2}, kBool);
  expect_error([&] { addcdiv(i, i, i); }, "[addcdiv] integer division is not supported (got int64 and int64 tensors)");
  expect_error([&] { addcdiv(f, i, i); }, "[addcdiv] integer division");  // a float self too, as torch
  // value and alpha must fit the type they are converted to (torch: "cannot be converted ... without overflow").
  Tensor u8 = tensor(std::vector<int64_t>{1, 2}, {2}, kInt64).to(kUInt8);
  expect_error([&] { addcmul(u8, u8, u8, 300); }, "[addcmul] value 300 cannot be converted to uint8 without overflow");
  expect_error([&] { add(f.to(kFloat16), f.to(kFloat16), 1e5); }, "[add] value 100000 cannot be converted to float16");
  expect_error([&] { addcmul(f, f, f, 1e300); }, "cannot be converted to float32");
  EXPECT_EQ(addcmul(f.to(kFloat16), f.to(kFloat16), f.to(kFloat16), 1e5).dtype(), kFloat16);  // float32 opmath: fits
  // A bool alpha is for bool tensors; a float alpha of 1 is still a float alpha for integers.
  expect_error([&] { add(f, f, true); }, "[add] a bool alpha is only for bool tensors");
  expect_error([&] { add(i, i, 1.0); }, "[add] for int64 tensors the alpha must be an integer, got 1");
  EXPECT_EQ(values(addcmul(i, i, i, true)), (std::vector<double>{2, 6}));  // a bool value is an integer one
  expect_error([&] { addcmul(i, i, i, 0.5); }, "[addcmul] for int64 tensors the value must be an integer, got 0.5");
  expect_error([&] { addcmul(bools, bools, bools); }, "[addcmul] is not implemented for bool tensors");
  expect_error([&] { lerp(i, i, 0.5); }, "[lerp] needs floating-point tensors, got int64");
  expect_error([&] { add(i, i, 0.5); }, "[add] for int64 tensors the alpha must be an integer, got 0.5");
  expect_error([&] { Tensor j = i.clone(); j.sub_(i, 1.5); }, "[sub_] for int64 tensors the alpha must be an integer");
  expect_error([&] { lerp(f, f.to(kFloat64), 0.5); }, "[lerp] expected dtype float32 for `end` but got dtype float64");
  expect_error([&] { lerp(f, f, f.to(kFloat16)); }, "[lerp] expected dtype float32 for `weight` but got dtype float16");
  // A 0-d weight of another dtype is taken (torch 2.15), its gradient in its own dtype.
  Tensor w64 = scalar_tensor(0.25, TensorOptions(kFloat64)).requires_grad_();
  Tensor l = lerp(tensor({1.0f, 3.0f}), tensor({5.0f, 7.0f}), w64);
  EXPECT_EQ(l.dtype(), kFloat32);
  EXPECT_EQ(values(l), (std::vector<double>{2, 4}));
  l.sum().backward();
  EXPECT_EQ(w64.grad().dtype(), kFloat64);
  EXPECT_EQ(values(w64.grad()), (std::vector<double>{8}));
  expect_error([&] { addcmul(f, tensor({1.0f, 2.0f, 3.0f}), f); }, "addcmul");
  expect_error([&] { addcmul(Tensor(), f, f); }, "addcmul");
  expect_error([&] { lerp(f, Tensor(), 0.5); }, "lerp");
  // In place: the result must fit self's shape and dtype.
  Tensor small = tensor({1.0f, 2.0f});
  expect_error([&] { small.addcmul_(tensor({1.0f, 2.0f}).reshape({2, 1}), small); },
               "[addcmul_] the result of shape [2, 2] does not fit the tensor of shape [2]");
  Tensor ints = i.clone();
  expect_error([&] { ints.addcmul_(f, f); }, "[addcmul_] result type float32 cannot be written into a tensor of type int64");
  Tensor flags = tensor({true, false});
  expect_error([&] { flags.add_(i, 2); }, "[add_] result type int64 cannot be written into a tensor of type bool");
  // A leaf that requires grad is not changed in place.
  Tensor leaf = tensor({1.0f, 2.0f}).requires_grad_();
  expect_error([&] { leaf.lerp_(f, 0.5); }, "lerp_");
  EXPECT_EQ(values(leaf), (std::vector<double>{1, 2}));
}

// The gradient of the in-place forms equals the out-of-place forms' (torch's formulas), also for
// lerp's weight, which reads self's value from before the op.
TEST(Pointwise, InPlaceGradientsEqualOutOfPlace) {
  auto grads = [](bool in_place) {
    manual_seed(5);
    Tensor s = randn({3, 4}).requires_grad_(), a = randn({4}).requires_grad_(), w = rand({3, 1}).requires_grad_();
    Tensor b = (randn({3, 4}).abs() + 0.5).requires_grad_();
    Tensor y;
    if (in_place) {
      y = s * 1.0;
      y.addcmul_(a, b, 0.3);
      y.addcdiv_(a, b, -0.7);
      y.lerp_(a.expand({3, 4}) * 2.0, w);
    } else {
      y = lerp(addcdiv(addcmul(s * 1.0, a, b, 0.3), a, b, -0.7), a.expand({3, 4}) * 2.0, w);
    }
    (y * y).sum().backward();
    return std::vector<Tensor>{y.detach(), s.grad(), a.grad(), b.grad(), w.grad()};
  };
  const auto in_place = grads(true), out_of_place = grads(false);
  for (size_t k = 0; k < in_place.size(); ++k)
    expect_same_bits(in_place[k], out_of_place[k], "tensor " + std::to_string(k));
}

// On the stand-in GPU each op runs its CUDA kernel's case (no fallback), forward and backward.
TEST(Pointwise, HaveCudaKernels) {
  if (cuda::is_available()) GTEST_SKIP() << "a real GPU is present: PointwiseTorch runs these there";
  StandInCuda stand_in(StandInCuda::Kernels::CpuWhereCudaHasOne);
  if (stand_in.native_ops() == 0) GTEST_SKIP() << "built without CUDA kernels";
  const auto before = fallback_counts();
  const Device d = Device::cuda(0);
  Tensor s = randn({4, 3}).to(d).requires_grad_(), a = randn({3}).to(d).requires_grad_();
  Tensor w = rand({4, 3}).to(d).requires_grad_();
  Tensor y = addcmul(s, a, a, 0.5) + addcdiv(s, a, a.abs() + 1) + lerp(s, a.expand({4, 3}), w) + lerp(s, s, 0.25);
  y.sum().backward();
  Tensor p = randn({4, 3}).to(d);
  p.addcmul_(p, p).addcdiv_(p, p.abs() + 1).lerp_(p, 0.5);
  EXPECT_EQ(s.grad().device(), d);
  EXPECT_EQ(fallback_counts(), before) << "an op fell back to the CPU";
}

}  // namespace
}  // namespace kiln::test
