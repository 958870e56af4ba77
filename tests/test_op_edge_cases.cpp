// Ops at the edges PyTorch defines and Kiln once got wrong: numbers multiplying 16-bit floats,
// NaN in gradients and bounds, constant rows, ties in 16 bits, int64 ranges past 2^53, fill
// values that do not fit. Each expectation is PyTorch 2.15's result for the same call.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "kiln/kiln.h"
#include "test_util.h"

namespace kiln::test {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

double half_of(float v) { return static_cast<float>(Half(v)); }

// The number stays float32 in mul and div (PyTorch's opmath), the result is rounded once: a
// float16 loss scale undone by 65536 is not a division by inf, a tiny factor is not zero.
TEST(OpEdgeCases, MulAndDivOf16BitFloatsKeepTheNumberInFloat32) {
  const Tensor h = tensor({1000.0}, kFloat16);
  EXPECT_EQ(values(h / 65536.0)[0], 1000.0 / 65536.0);
  EXPECT_EQ(values(h / 1e5)[0], half_of(1000.0f / 1e5f));
  EXPECT_EQ(values(h * 1e-8)[0], half_of(1000.0f * 1e-8f));
  EXPECT_EQ(values(h / scalar_tensor(1e5))[0], half_of(1000.0f / 1e5f));  // a 0-d CPU tensor likewise
  EXPECT_EQ((h * 1e-8).dtype(), kFloat16);
  Tensor a = h.clone();
  a.div_(1e5);
  EXPECT_EQ(values(a)[0], half_of(1000.0f / 1e5f));
  Tensor o = empty({1}, kFloat16);
  mul_out(o, h, 1e-8);
  EXPECT_EQ(values(o)[0], half_of(1000.0f * 1e-8f));
  EXPECT_EQ(values(tensor({300.0}, kBFloat16) * 1.01)[0], 304.0);  // 303 rounded once, not 300 x 1.0078
  // Integers too: 65536 is inf in float16, 257 is 256 in bfloat16.
  EXPECT_EQ(values(h / 65536)[0], 1000.0 / 65536.0);
  EXPECT_EQ(values(zeros({2}, kFloat16) * 70000)[1], 0.0);  // not 0 x inf
  EXPECT_EQ(values(tensor({3.0}, kBFloat16) * 257)[0], 772.0);
  EXPECT_EQ(values(1e-8 * h)[0], half_of(1000.0f * 1e-8f));  // the number first
  EXPECT_EQ(values(65536.0 / tensor({2.0}, kFloat16))[0], 32768.0);
  // A number with an exact 16-bit value gives the same as before.
  EXPECT_EQ(values(h * 0.125)[0], 125.0);
  // The gradient through such a product keeps the number too.
  Tensor x = tensor({1000.0}, kFloat16).requires_grad_();
  (x * 1e-3).sum().backward();
  EXPECT_EQ(values(x.grad())[0], half_of(1e-3f));
}

// std's gradient is 0 where the std is 0 (PyTorch's std_backward), not NaN.
// abs(-0.0) is +0.0 in every float dtype (1 / abs(-0.0) was -inf), as torch's; integer powers
// whose intermediate squares would overflow (undefined behaviour, an abort under UBSan) give the
// value, as torch's; log_softmax and cross_entropy keep log(sum) apart from the largest logit,
// which rounded it away (at logits near 3000 a loss of 1.234e-4 came out 0), in the loss and its
// gradient.
TEST(OpEdgeCases, AbsOfNegativeZeroIntegerPowersAndLogSoftmaxOfLargeLogits) {
  for (Device dev : test::devices()) {
    for (ScalarType dt : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
      const Tensor z = full({2}, -0.0, TensorOptions(dt).device(dev));
      EXPECT_EQ(values(div(ones({2}, TensorOptions(dt).device(dev)), z.abs())),
                std::vector<double>(2, std::numeric_limits<double>::infinity()))
          << dtype_name(dt) << " on " << dev.str();
      Tensor w = z.clone();
      w.abs_();
      EXPECT_FALSE(std::signbit(values(w)[0])) << dtype_name(dt);
    }
    EXPECT_EQ(values(full({1}, 300, TensorOptions(kInt32).device(dev)).pow(2)), std::vector<double>{90000});
    EXPECT_EQ(values(full({1}, 2, TensorOptions(kInt64).device(dev)).pow(40)), std::vector<double>{std::ldexp(1.0, 40)});
    EXPECT_EQ(values(full({1}, int64_t{5000000000}, TensorOptions(kInt64).device(dev)).pow(1)),
              std::vector<double>{5e9});
    const Tensor logits = tensor({3000.0f, 2991.0f}).reshape({1, 2}).to(dev);
    const double want = std::log1p(std::exp(-9.0));  // 1.2340e-4
    EXPECT_NEAR(values(log_softmax(logits, 1))[0], -want, want * 1e-3) << dev.str();
    EXPECT_NEAR(values(log_softmax(logits.t().contiguous(), 0))[0], -want, want * 1e-3) << dev.str();
    EXPECT_NEAR(values(cross_entropy(logits, tensor({int64_t{0}}).to(dev)))[0], want, want * 1e-3) << dev.str();
    // Its gradient, softmax - onehot, too: exp(x - max) / sum, not exp(x - (max + log(sum))) with
    // the sum rounded away (the target's gradient came out 0).
    const Tensor leaf = logits.detach().requires_grad_();
    cross_entropy(leaf, tensor({int64_t{0}}).to(dev)).backward();
    const double p1 = std::exp(-9.0) / (1 + std::exp(-9.0));  // 1.2339e-4
    EXPECT_NEAR(values(leaf.grad())[0], -p1, p1 * 1e-3) << dev.str();
    EXPECT_NEAR(values(leaf.grad())[1], p1, p1 * 1e-3) << dev.str();
  }
}

// masked_fill as torch's: a mask may broadcast the result up (not in place), and a 0-d tensor
// value gets the gradient of the elements it filled.
TEST(OpEdgeCases, MaskedFillBroadcastsUpAndTakesATensorValue) {
  Tensor x = tensor({1.0f, 2.0f, 3.0f}).requires_grad_();
  Tensor mask = arange(6, kFloat32).reshape({2, 3}) > 3;  // [[F, F, F], [F, T, T]]
  Tensor v = scalar_tensor(-1.0, kFloat64).requires_grad_();
  Tensor y = x.masked_fill(mask, v);
  expect_close(y, {1, 2, 3, 1, -1, -1}, {2, 3});
  EXPECT_EQ(y.dtype(), kFloat32);
  (y * arange(6, kFloat32).reshape({2, 3})).sum().backward();
  expect_close(x.grad(), {3, 1, 2}, {3});  // 0 + 3, 1 + (4 filled), 2 + (5 filled)
  EXPECT_EQ(v.grad().item<double>(), 9.0);  // 4 + 5
  expect_close(x.detach().masked_fill(mask, 7), {1, 2, 3, 1, 7, 7}, {2, 3});
  Tensor z = x.detach().clone();
  expect_error([&] { z.masked_fill_(mask, 0); },
               "[masked_fill_] a mask of shape [2, 3] would make the result larger than the tensor's [3]");
  expect_error([&] { (void)z.masked_fill(mask, tensor({1.0f})); }, "[masked_fill] the value must be a 0-d tensor");
  z.masked_fill_(tensor({1.0f, 0.0f, 1.0f}) > 0.5, scalar_tensor(4.0));
  expect_close(z, {4, 2, 4}, {3});
}

// masked_fill_ writes into the tensor (a strided view too), reading a mask that is the tensor's own
// memory before it writes; its gradient reaches the tensor's history and the value.
TEST(OpEdgeCases, MaskedFillInPlace) {
  Tensor base = arange(12, kFloat64).reshape({3, 4});
  Tensor col = base.slice(1, 1, 4, 2);  // columns 1 and 3: strided
  col.masked_fill_(col > 5.0, -1.0);
  EXPECT_EQ(values(base), (std::vector<double>{0, 1, 2, 3, 4, 5, 6, -1, 8, -1, 10, -1}));
  Tensor flags = tensor({true, false, true});
  flags.masked_fill_(flags, false);  // the mask is the tensor itself
  EXPECT_EQ(flags.to_vector<int64_t>(), (std::vector<int64_t>{0, 0, 0}));
  Tensor x = tensor({1.0, 2.0, 3.0, 4.0}, kFloat64).requires_grad_();
  Tensor v = scalar_tensor(5.0, kFloat32).requires_grad_();
  Tensor y = x * 2;
  y.masked_fill_(tensor({false, true, false, true}), v);
  EXPECT_EQ(values(y), (std::vector<double>{2, 5, 6, 5}));
  (y * tensor({1.0, 2.0, 3.0, 4.0}, kFloat64)).sum().backward();
  EXPECT_EQ(values(x.grad()), (std::vector<double>{2, 0, 6, 0}));
  EXPECT_EQ(v.grad().dtype(), kFloat32);
  EXPECT_EQ(v.grad().item<double>(), 6.0);
}

TEST(OpEdgeCases, StdOfAConstantRowHasAZeroGradient) {
  Tensor x = tensor({1.0, 1.0, 1.0}, kFloat64).requires_grad_();
  std(x).backward();
  EXPECT_EQ(values(x.grad()), std::vector<double>(3, 0.0));
  Tensor y = tensor({2.0, 2.0, 1.0, 3.0}, kFloat64).reshape({2, 2}).requires_grad_();
  std(y, {1}).sum().backward();
  const std::vector<double> g = values(y.grad());
  EXPECT_EQ(g[0], 0.0);
  EXPECT_EQ(g[1], 0.0);
  EXPECT_NEAR(g[2], -1 / std::sqrt(2.0), 1e-12);  // (x - mean) / ((n - 1) std)
  EXPECT_NEAR(g[3], 1 / std::sqrt(2.0), 1e-12);
}

// max() and min() give a NaN result's gradient to the NaN element; maximum and minimum give
// the NaN operand the whole gradient; a NaN clamp bound gives NaN.
// isnan/isinf/isfinite on the special values of every float dtype, integers finite; round is half
// to even; floor, ceil, round and trunc keep -0, inf and NaN, and integer tensors as they are;
// bool tensors are refused.
TEST(OpEdgeCases, ClassifyingAndRoundingSpecialValues) {
  const double inf = std::numeric_limits<double>::infinity();
  for (ScalarType dt : {kFloat32, kFloat64, kBFloat16, kFloat16}) {
    const Tensor x = tensor({0.0, -0.0, 1.5, -inf, inf, kNaN, 2.5, -2.5, 0.5}, dt);
    EXPECT_EQ(values(isnan(x)), (std::vector<double>{0, 0, 0, 0, 0, 1, 0, 0, 0})) << dtype_name(dt);
    EXPECT_EQ(values(isinf(x)), (std::vector<double>{0, 0, 0, 1, 1, 0, 0, 0, 0})) << dtype_name(dt);
    EXPECT_EQ(values(x.isfinite()), (std::vector<double>{1, 1, 1, 0, 0, 0, 1, 1, 1})) << dtype_name(dt);
    const std::vector<double> r = values(round(x));
    EXPECT_EQ(r[2], 2.0);
    EXPECT_EQ(r[6], 2.0);
    EXPECT_EQ(r[7], -2.0);
    EXPECT_EQ(r[8], 0.0);
    EXPECT_TRUE(std::signbit(values(floor(x))[1]) && std::signbit(values(trunc(x))[1]));
    EXPECT_EQ(values(ceil(x))[3], -inf);
    EXPECT_TRUE(std::isnan(values(trunc(x))[5]));
    EXPECT_EQ(floor(x).dtype(), dt);
  }
  const Tensor i = tensor({-3, 7});
  EXPECT_EQ(values(isfinite(i)), (std::vector<double>{1, 1}));
  EXPECT_EQ(values(isinf(i)), (std::vector<double>{0, 0}));
  EXPECT_EQ(floor(i).dtype(), kInt64);
  EXPECT_EQ(values(round(i)), (std::vector<double>{-3, 7}));
  Tensor y = tensor({-1.5f, 1.7f});
  y.floor_();
  EXPECT_EQ(values(y), (std::vector<double>{-2, 1}));
  test::expect_error([] { floor(tensor({true})); }, "[floor] is not defined for bool tensors");
}

TEST(OpEdgeCases, NaNInExtremesAndClamp) {
  Tensor x = tensor({1.0, kNaN, 3.0}, kFloat64).requires_grad_();
  max(x).backward();
  EXPECT_EQ(values(x.grad()), (std::vector<double>{0, 1, 0}));
  Tensor a = tensor({kNaN, 1.0}, kFloat64).requires_grad_(), b = tensor({1.0, 2.0}, kFloat64).requires_grad_();
  maximum(a, b).sum().backward();
  EXPECT_EQ(values(a.grad()), (std::vector<double>{1, 0}));
  EXPECT_EQ(values(b.grad()), (std::vector<double>{1, 1}));
  Tensor c = tensor({kNaN, 1.0}, kFloat64).requires_grad_(), d = tensor({1.0, 1.0}, kFloat64).requires_grad_();
  minimum(c, d).sum().backward();
  EXPECT_EQ(values(c.grad()), (std::vector<double>{1, 0.5}));
  EXPECT_EQ(values(d.grad()), (std::vector<double>{1, 0.5}));
  for (double v : values(clamp(tensor({1.0, 2.0}), Scalar(kNaN)))) EXPECT_TRUE(std::isnan(v));
  for (double v : values(clamp(tensor({1.0, 2.0}), std::nullopt, Scalar(kNaN)))) EXPECT_TRUE(std::isnan(v));
}

// clamp passes the gradient strictly inside its bounds, as torch 2.15 (and relu at 0): an element
// exactly at a bound (a pixel at 0 or 1) gets none.
TEST(OpEdgeCases, ClampGivesNoGradientAtItsBounds) {
  Tensor x = tensor({0.0, 0.5, 1.0}, kFloat64).requires_grad_();
  clamp(x, 0.0, 1.0).sum().backward();
  EXPECT_EQ(values(x.grad()), (std::vector<double>{0, 1, 0}));
  Tensor y = tensor({0.0, 0.5, 1.0}, kFloat64).requires_grad_();
  (clamp_min(y, 0.0) + clamp_max(y, 1.0)).sum().backward();
  EXPECT_EQ(values(y.grad()), (std::vector<double>{1, 2, 1}));
}

// Ties are counted in float32: 70,000 tied float16 zeros share the gradient (1/70000 each), where
// a float16 count is inf past 65504.
TEST(OpEdgeCases, ManyTiesIn16BitsShareTheGradient) {
  Tensor x = zeros({70000}, kFloat16).requires_grad_();
  amax(x).backward();
  EXPECT_EQ(values(x.grad())[0], half_of(1.0f / 70000.0f));
  Tensor y = zeros({70000}, kFloat16).requires_grad_();
  norm(y, std::numeric_limits<double>::infinity()).backward();
  EXPECT_TRUE(std::isfinite(values(y.grad())[0]));
}

// Integer ranges are counted and filled in int64, exact past 2^53.
TEST(OpEdgeCases, Int64RangesPastTwoToThe53) {
  const int64_t big = int64_t{1} << 60;
  Tensor r = arange(big, big + 3);
  ASSERT_EQ(r.numel(), 3);
  EXPECT_EQ(r.to_vector<int64_t>(), (std::vector<int64_t>{big, big + 1, big + 2}));
  const int64_t b53 = int64_t{1} << 53;
  EXPECT_EQ((arange(b53, b53 + 5) - b53).to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(arange(10, 0, -3).to_vector<int64_t>(), (std::vector<int64_t>{10, 7, 4, 1}));
  EXPECT_EQ(arange(0, 7, 2, kInt32).to_vector<int32_t>(), (std::vector<int32_t>{0, 2, 4, 6}));
}

// A fill value that does not fit the dtype is an error (PyTorch's checked conversion), not a
// wrapped value; an integer into uint8 may be -255..255, as PyTorch's checked conversion allows, a
// float may not be negative.
TEST(OpEdgeCases, FillValuesMustFitTheDtype) {
  expect_error([] { full({2}, 300, kUInt8); }, "[full] value 300 cannot be converted to uint8 without overflow");
  EXPECT_EQ(full({1}, -1, kUInt8).to_vector<uint8_t>()[0], 255);
  expect_error([] { zeros({2}, kInt32).masked_fill(tensor({true, false}), -INFINITY); },
               "[masked_fill] value -inf cannot be converted to int32");
  expect_error([] { zeros({2}, kInt32).fill_(int64_t{1} << 40); }, "[fill_] value");
  expect_error([] { full({1}, 1e39, kFloat32); }, "cannot be converted to float32");
  EXPECT_EQ(full({1}, 2.5, kInt64).to_vector<int64_t>()[0], 2);
  expect_error([] { full({2}, 70000.0, kFloat16); }, "[full] value 70000 cannot be converted to float16");
  expect_error([] { full({2}, -1.0, kUInt8); }, "cannot be converted to uint8");
  expect_error([] { full({2}, -0.5, kUInt8); }, "cannot be converted to uint8");
  EXPECT_TRUE(std::isinf(values(full({1}, INFINITY, kFloat16))[0]));  // inf fills as it is
}

TEST(OpEdgeCases, ExpandToANegativeSizeIsAnExpandError) {
  expect_error([] { zeros({1}).expand({-2}); }, "[expand] negative size -2 in the target shape [-2]");
}

// An integer sum has no gradient (it would send an integer one back).
TEST(OpEdgeCases, AnIntegerSumDoesNotRequireGrad) {
  Tensor x = tensor({1.0, 2.0}).requires_grad_();
  EXPECT_FALSE(sum(x, {}, false, kInt32).requires_grad());
  EXPECT_TRUE(sum(x, {}, false, kFloat64).requires_grad());
}

// The divisor's gradient is -g * (a / b) / b, as torch forms it: b * b overflows float16 once
// |b| > 256 (the gradient was -0), and float32 past 1.8e19.
TEST(OpEdgeCases, DivisorGradientDoesNotSquareTheDivisor) {
  Tensor a = tensor({1.0, 2.0}, kFloat16).requires_grad_();
  Tensor b = tensor({300.0, 1000.0}, kFloat16).requires_grad_();
  (a / b).sum().backward();
  const std::vector<double> gb = values(b.grad());
  // torch 2.15's float16 results (subnormals: steps of 2^-24, about 6e-8); it was -0 for both.
  EXPECT_NEAR(gb[0], -1.1086e-05, 6e-8);
  EXPECT_NEAR(gb[1], -2.0266e-06, 6e-8);
  Tensor c = tensor({1e30f}).requires_grad_(), d = tensor({1e20f}).requires_grad_();
  (c / d).sum().backward();
  EXPECT_NEAR(values(d.grad())[0], -1e-10, 1e-15);
}

// linear with no input or no output features trains (nn::Linear takes 0): its backward reshapes
// with the rows it knows, not -1.
TEST(OpEdgeCases, LinearWithZeroFeaturesHasGradients) {
  Tensor x = zeros({3, 0}, kFloat64).requires_grad_();
  Tensor w = zeros({4, 0}, kFloat64).requires_grad_();
  Tensor b = ones({4}, kFloat64).requires_grad_();
  linear(x, w, b).sum().backward();
  EXPECT_EQ(w.grad().shape(), (Shape{4, 0}));
  EXPECT_EQ(values(b.grad()), std::vector<double>(4, 3.0));
  Tensor x2 = ones({2, 5}, kFloat64).requires_grad_();
  Tensor w2 = zeros({0, 5}, kFloat64).requires_grad_();
  linear(x2, w2).sum().backward();
  EXPECT_EQ(values(x2.grad()), std::vector<double>(10, 0.0));
  EXPECT_EQ(w2.grad().shape(), (Shape{0, 5}));
}

// An empty batch in training (the last one split across processes) is an empty output, and the
// running statistics stay as they were, as in torch.
TEST(OpEdgeCases, BatchNormTakesAnEmptyBatchInTraining) {
  Tensor rm = zeros({3}), rv = ones({3});
  Tensor x = zeros({0, 3, 5}).requires_grad_();
  Tensor w = ones({3}).requires_grad_();
  Tensor y = batch_norm(x, rm, rv, w, {}, /*training=*/true);
  EXPECT_EQ(y.shape(), (Shape{0, 3, 5}));
  EXPECT_EQ(values(rm), std::vector<double>(3, 0.0));
  EXPECT_EQ(values(rv), std::vector<double>(3, 1.0));
  y.sum().backward();
  EXPECT_EQ(values(w.grad()), std::vector<double>(3, 0.0));
  expect_error([] { batch_norm(zeros({1, 3}), zeros({3}), ones({3}), {}, {}, true); },
               "expected more than 1 value per channel when training");
}

// Window parameters are ints, as in torch: past INT32_MAX a span d * (k - 1) + 1 overflows. A
// max window far larger than the input takes the input's time, not the kernel's.
TEST(OpEdgeCases, HugePoolingAndConvParametersAreErrorsAndLargeWindowsAreQuick) {
  Tensor x = arange(25, kFloat32).reshape({1, 1, 5, 5});
  const int64_t big = int64_t{1} << 62;
  expect_error([&] { max_pool2d(x, {big, 1}, {1, 1}, {big / 2, 0}); }, "[max_pool2d] kernel_size must be at most 2147483647");
  expect_error([&] { max_pool2d(x, {5, 1}, {1, 1}, {0, 0}, {big, 1}); }, "[max_pool2d] dilation must be at most");
  expect_error([&] { avg_pool2d(x, {big, 1}, {1, 1}, {big / 2, 0}); }, "[avg_pool2d] kernel_size must be at most");
  expect_error([&] { conv2d(x, ones({1, 1, 5, 1}), {}, {1, 1}, {0, 0}, {big, 1}); }, "[conv2d] dilation must be at most");
  // A 2^30-row window over 5 rows (padding half of it): every output is the column's max.
  const int64_t k = int64_t{1} << 30;
  Tensor y = max_pool2d(x, {k + 1, 1}, {k, 1}, {k / 2, 0});
  EXPECT_EQ(y.shape(), (Shape{1, 1, 1, 5}));
  EXPECT_EQ(values(y), (std::vector<double>{20, 21, 22, 23, 24}));
}

// Class weights: with probability targets the loss is differentiable in them (torch's composite);
// with class indices torch's nll_loss has no gradient for them, and one that wants it is an error.
TEST(OpEdgeCases, LossClassWeightsThatRequireGrad) {
  manual_seed(3);
  Tensor x = randn({3, 4}, kFloat64), t = softmax(randn({3, 4}, kFloat64), 1);
  Tensor w = rand({4}, kFloat64).add(0.5).requires_grad_();
  EXPECT_TRUE(autograd::gradcheck(
      [&](const std::vector<Tensor>& in) { return cross_entropy(x, t, in[0], Reduction::Mean, -100, 0.1); }, {w}));
  Tensor idx = tensor(std::vector<int64_t>{0, 3, 1});
  expect_error([&] { cross_entropy(x, idx, w); }, "[cross_entropy] is not differentiable with respect to weight");
  expect_error([&] { nll_loss(x, idx, w); }, "[nll_loss] is not differentiable with respect to weight");
  NoGradGuard ng;
  EXPECT_TRUE(std::isfinite(cross_entropy(x, idx, w).item<double>()));
}

// Tensor basics at their edges: a 0-d tensor has no size(0); an integer copy of a float is a
// constant; full_like checks its value as full does; empty tensors are contiguous; index
// arithmetic near INT64_MAX is an error, not an overflow.
TEST(OpEdgeCases, TensorBasicsAtTheirEdges) {
  expect_error([] { scalar_tensor(3.0).size(0); }, "[size] dim 0 asked of a 0-d tensor");
  expect_error([] { scalar_tensor(3.0).stride(-1); }, "[stride] dim -1 asked of a 0-d tensor");
  Tensor x = tensor({1.5, -2.5}).requires_grad_();
  Tensor i = zeros({2}, kInt64);
  i.copy_(x);
  EXPECT_FALSE(i.requires_grad());
  (i.to(kFloat32) * x).sum().backward();
  EXPECT_EQ(values(x.grad()), (std::vector<double>{1, -2}));
  expect_error([] { full_like(zeros({2}, kUInt8), 300); }, "[full_like] value 300 cannot be converted to uint8");
  expect_error([] { full_like(zeros({2}, kFloat16), 1e6); }, "[full_like] value 1e+06 cannot be converted to float16");
  EXPECT_TRUE(zeros({4, 6}).slice(1, 0, 6, 2).slice(0, 0, 0).is_contiguous());
  expect_error([] { arange(10).narrow(0, 1, std::numeric_limits<int64_t>::max()); }, "[narrow] start 1 + length");
  EXPECT_EQ(arange(10).slice(0, 1, 10, std::numeric_limits<int64_t>::max()).shape(), (Shape{1}));
  expect_error([] { scalar_tensor(1.0).flatten(5, 7); }, "[flatten]");
}

}  // namespace
}  // namespace kiln::test
