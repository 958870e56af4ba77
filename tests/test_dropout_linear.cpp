// linear (values against a float64 loop, gradients, layouts, errors) and dropout (mask
// statistics, scaling, determinism, eval passthrough, backward).
#include <cmath>
#include <random>

#include "kiln/random.h"
#include "test_util.h"

namespace {

using namespace kiln;
using kiln::test::expect_close;
using kiln::test::expect_error;
using Vec = std::vector<double>;

Tensor rnd(const Shape& s, uint64_t seed, ScalarType dt = kFloat64) {
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<double> u(-1, 1);
  Vec v(static_cast<size_t>(shape_numel(s)));
  for (auto& x : v) x = u(g);
  return tensor(v, s, kFloat64).to(dt);
}

// y[r, o] = sum_i x[r, i] w[o, i] + b[o], over the rows of x flattened to [rows, in].
Vec linear_ref(const Tensor& x, const Tensor& w, const Tensor& b) {
  const int64_t in = w.size(1), out = w.size(0);
  int64_t rows = 1;
  for (int64_t d = 0; d + 1 < x.dim(); ++d) rows *= x.size(d);
  Vec xv = test::values(x), wv = test::values(w), bv = b.defined() ? test::values(b) : Vec(out, 0.0);
  Vec y;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < out; ++o) {
      double acc = bv[o];
      for (int64_t i = 0; i < in; ++i) acc += xv[r * in + i] * wv[o * in + i];
      y.push_back(acc);
    }
  return y;
}

TEST(Linear, MatchesFloat64Reference) {
  struct Case { Shape x; int64_t out; bool bias; };
  for (const Case& c : std::vector<Case>{{{3, 4}, 5, true}, {{3, 4}, 5, false}, {{2, 3, 4}, 6, true},
                                         {{2, 2, 3, 7}, 3, true}, {{4}, 3, true}, {{4}, 3, false},
                                         {{0, 4}, 3, true}, {{3, 0}, 2, true}, {{33, 65}, 17, true}})
    for (ScalarType dt : {kFloat32, kFloat64}) {
      SCOPED_TRACE(testing::Message() << c.x << " out " << c.out << " bias " << c.bias << " " << dt);
      const int64_t in = c.x.back();
      Tensor x = rnd(c.x, 1, dt), w = rnd({c.out, in}, 2, dt), b = c.bias ? rnd({c.out}, 3, dt) : Tensor();
      Shape want = c.x;
      want.back() = c.out;
      Tensor y = linear(x, w, b);
      EXPECT_EQ(y.dtype(), dt);
      const double tol = dt == kFloat32 ? 1e-5 : 1e-12;
      expect_close(y, linear_ref(x, w, b), want, tol, tol);
    }
}

TEST(Linear, NonContiguousOperands) {
  // x transposed in memory, weight a transposed view of an [in, out] buffer
  Tensor x = rnd({5, 3}, 4).t();                      // [3, 5]
  Tensor w = rnd({5, 4}, 5).t();                      // [4, 5]
  Tensor b = rnd({8}, 6).slice(0, 0, 8, 2);           // [4], stride 2
  expect_close(linear(x, w, b), linear_ref(x.contiguous(), w.contiguous(), b.contiguous()), {3, 4}, 1e-12, 1e-12);
}

TEST(Linear, Gradcheck) {
  using Inputs = std::vector<Tensor>;
  auto req = [](Tensor t) { return t.requires_grad_(); };
  for (Shape xs : {Shape{3, 4}, Shape{2, 3, 4}, Shape{4}}) {
    SCOPED_TRACE(testing::Message() << xs);
    EXPECT_TRUE(autograd::gradcheck([](const Inputs& in) { return linear(in[0], in[1], in[2]); },
                                    {req(rnd(xs, 7)), req(rnd({5, 4}, 8)), req(rnd({5}, 9))}));
    EXPECT_TRUE(autograd::gradcheck([](const Inputs& in) { return linear(in[0], in[1]); },
                                    {req(rnd(xs, 10)), req(rnd({5, 4}, 11))}));
  }
  // only some inputs need a gradient
  Tensor x = rnd({3, 4}, 12), w = req(rnd({2, 4}, 13)), b = rnd({2}, 14);
  EXPECT_TRUE(autograd::gradcheck([](const Inputs& in) { return linear(in[0], in[1], in[2]); }, {x, w, b}));
  EXPECT_TRUE(autograd::gradcheck([](const Inputs& in) { return linear(in[0], in[1], in[2]); },
                                  {req(rnd({3, 4}, 15)), rnd({2, 4}, 16), rnd({2}, 17)}));
}

TEST(Linear, WeightGradientIsDenseLikeTheWeight) {
  Tensor x = rnd({2, 3, 4}, 18, kFloat32), w = rnd({5, 4}, 19, kFloat32).requires_grad_();
  Tensor b = rnd({5}, 20, kFloat32).requires_grad_();
  Tensor g = rnd({2, 3, 5}, 21, kFloat32);
  linear(x, w, b).backward(g);
  ASSERT_TRUE(w.grad().defined());
  EXPECT_TRUE(w.grad().is_contiguous());
  // dW = g^T x over the flattened rows, db = column sums of g
  Vec gv = test::values(g), xv = test::values(x), gw(20, 0.0), gb(5, 0.0);
  for (int r = 0; r < 6; ++r)
    for (int o = 0; o < 5; ++o) {
      gb[o] += gv[r * 5 + o];
      for (int i = 0; i < 4; ++i) gw[o * 4 + i] += gv[r * 5 + o] * xv[r * 4 + i];
    }
  expect_close(w.grad(), gw, {5, 4}, 1e-5, 1e-5);
  expect_close(b.grad(), gb, {5}, 1e-5, 1e-5);
}

TEST(Linear, InPlaceOnTheResultKeepsTheGradient) {
  // a 1-D input gives a result that must not be a view of a hidden temporary: an in-place op
  // on it would otherwise lose linear's history
  for (Shape xs : {Shape{4}, Shape{2, 4}}) {
    SCOPED_TRACE(testing::Message() << xs);
    Tensor x = rnd(xs, 34).requires_grad_(), w = rnd({3, 4}, 35).requires_grad_();
    Tensor y = linear(x, w);
    y.mul_(2.0);
    y.sum().backward();
    ASSERT_TRUE(x.grad().defined());
    Vec wv = test::values(w), gx = test::values(x.grad());
    for (size_t i = 0; i < gx.size(); ++i) {
      double want = 0;
      for (int o = 0; o < 3; ++o) want += 2 * wv[o * 4 + i % 4];
      EXPECT_NEAR(gx[i], want, 1e-12) << i;
    }
  }
}

TEST(Linear, Errors) {
  Tensor x = zeros({3, 4}), w = zeros({5, 4});
  expect_error([&] { linear(zeros({3, 6}), w); }, "[linear] input of shape [3, 6] and weight of shape [5, 4]");
  expect_error([&] { linear(x, zeros({5, 4, 1})); }, "[linear] weight must be 2-D [out, in], got shape [5, 4, 1]");
  expect_error([&] { linear(x, w, zeros({4})); }, "[linear] bias must have shape [5] for weight of shape [5, 4], got [4]");
  expect_error([&] { linear(x, zeros({5, 4}, kFloat64)); }, "[linear] input has dtype float32 but weight has float64");
  expect_error([&] { linear(x, w, zeros({5}, kFloat64)); }, "[linear] input has dtype float32 but bias has float64");
  expect_error([&] { linear(scalar_tensor(1.0), w); }, "[linear] input must have at least 1 dim");
  expect_error([&] { linear(Tensor(), w); }, "[linear] got an undefined tensor");
}

// ---- dropout

TEST(Dropout, FractionOfZerosAndExactScaling) {
  const int64_t n = 100000;
  for (double p : {0.1, 0.5, 0.8}) {
    SCOPED_TRACE(p);
    manual_seed(42);
    Tensor x = rnd({n}, 22, kFloat32) + 2.0;  // no zeros of its own
    Tensor y = dropout(x, p, true);
    Vec xv = test::values(x), yv = test::values(y);
    int64_t zeros = 0;
    const float scale = static_cast<float>(1.0 / (1.0 - p));
    for (int64_t i = 0; i < n; ++i) {
      if (yv[i] == 0) ++zeros;
      else ASSERT_EQ(static_cast<float>(yv[i]), static_cast<float>(xv[i]) * scale) << i;
    }
    // binomial standard deviation sqrt(n p (1-p)) <= 158; allow 6 of them
    EXPECT_NEAR(static_cast<double>(zeros), p * static_cast<double>(n), 6 * std::sqrt(n * p * (1 - p)));
  }
}

TEST(Dropout, SameSeedSameMaskAndStreamAdvances) {
  Tensor x = ones({64, 33});
  manual_seed(7);
  Vec a = test::values(dropout(x, 0.5));
  Vec b = test::values(dropout(x, 0.5));
  manual_seed(7);
  Vec c = test::values(dropout(x, 0.5));
  EXPECT_EQ(a, c);
  EXPECT_NE(a, b);  // the second call drew fresh numbers
  // the mask follows the generator's uniforms: element i kept iff rand()[i] >= p
  manual_seed(7);
  Vec u = test::values(rand({64, 33}));
  for (size_t i = 0; i < u.size(); ++i) ASSERT_EQ(a[i] != 0, u[i] >= 0.5) << i;
  // and does not depend on x's dtype or layout
  manual_seed(7);
  Vec d = test::values(dropout(ones({33, 64}, kFloat64).t(), 0.5));
  manual_seed(7);
  Vec e = test::values(dropout(ones({64, 33}, kFloat64), 0.5));
  EXPECT_EQ(d, e);
  for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a[i] != 0, e[i] != 0) << i;
}

// The 16-bit types: a kept element is x * scale computed in float with the scale rounded once to
// float (PyTorch's fused dropout), its gradient likewise (here from sum(), an expanded, non-
// contiguous gradient); the generator moves on as rand() of the same shape moves it.
TEST(Dropout, HalfTypesScaleInFloatAndTheGeneratorMovesAsRand) {
  const double p = 0.1;
  const float scale = static_cast<float>(1.0 / (1.0 - p));
  for (ScalarType dt : {kBFloat16, kFloat16}) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor x = (rnd({37, 9}, 28, kFloat32) * 3).to(dt).requires_grad_();
    manual_seed(4);
    Tensor y = dropout(x, p);
    y.sum().backward();
    const Vec next = test::values(rand({3}));
    manual_seed(4);
    Tensor keep = ge(rand({37, 9}), p);
    EXPECT_EQ(test::values(rand({3})), next);
    EXPECT_EQ(y.dtype(), dt);
    EXPECT_EQ(test::values(y), test::values(where(keep, x.detach().to(kFloat32) * scale, 0).to(dt)));
    EXPECT_EQ(test::values(x.grad()), test::values(where(keep, ones({37, 9}) * scale, 0).to(dt)));
  }
}

TEST(Dropout, PassthroughAndExtremes) {
  Tensor x = rnd({4, 5}, 23, kFloat32).requires_grad_();
  GeneratorState before = get_rng_state();
  EXPECT_TRUE(dropout(x, 0.5, false).is_same(x));  // eval: the same tensor
  EXPECT_TRUE(dropout(x, 0.0, true).is_same(x));   // p = 0: the same tensor
  EXPECT_EQ(get_rng_state().offset, before.offset);  // and no numbers drawn
  Tensor z = dropout(x, 1.0, true);
  expect_close(z, Vec(20, 0.0), {4, 5});
  z.sum().backward();
  expect_close(x.grad(), Vec(20, 0.0), {4, 5});
  Tensor e = zeros({0, 3});
  EXPECT_EQ(dropout(e, 0.5).shape(), (Shape{0, 3}));
}

// A dropped element is x * 0, as PyTorch's: NaN and inf stay NaN (a NaN must not vanish before
// GradScaler's check), a negative value is -0; kept ones are x * scale.
TEST(Dropout, ADroppedNaNStaysNaN) {
  for (ScalarType dt : {kFloat32, kFloat64, kBFloat16}) {
    Tensor x = full({64}, NAN, dt);
    x.narrow(0, 0, 16).fill_(INFINITY);
    x.narrow(0, 16, 16).fill_(-2.0);
    manual_seed(7);
    std::vector<double> y = test::values(dropout(x, 0.5));
    int nan = 0, inf = 0, neg_zero = 0, kept_neg = 0;
    for (size_t i = 0; i < y.size(); ++i) {
      nan += std::isnan(y[i]);
      inf += std::isinf(y[i]);
      if (i >= 16 && i < 32) {
        neg_zero += y[i] == 0 && std::signbit(y[i]);
        kept_neg += y[i] == -4.0;
      }
    }
    EXPECT_EQ(nan + inf, 48) << dtype_name(dt);  // a dropped inf is NaN, a kept one inf
    EXPECT_GT(nan, 32) << dtype_name(dt);
    EXPECT_EQ(neg_zero + kept_neg, 16) << dtype_name(dt);
    EXPECT_GT(neg_zero, 0) << dtype_name(dt);
  }
}

TEST(Dropout, BackwardIsMaskTimesGradOverKeep) {
  const double p = 0.3;
  Tensor x = (rnd({50, 40}, 24, kFloat64) + 2.0).requires_grad_();
  Tensor g = rnd({50, 40}, 25, kFloat64);
  manual_seed(3);
  Tensor y = dropout(x, p);
  y.backward(g);
  Vec yv = test::values(y), gv = test::values(g), gx = test::values(x.grad());
  int kept = 0;
  for (size_t i = 0; i < yv.size(); ++i) {
    const double want = yv[i] != 0 ? gv[i] / (1 - p) : 0.0;
    ASSERT_DOUBLE_EQ(gx[i], want) << i;
    kept += yv[i] != 0;
  }
  EXPECT_GT(kept, 0);
  EXPECT_LT(kept, 2000);
  // gradcheck with the mask fixed by reseeding before each evaluation
  auto fn = [p](const std::vector<Tensor>& in) {
    manual_seed(5);
    return dropout(in[0], p);
  };
  EXPECT_TRUE(autograd::gradcheck(fn, {rnd({4, 6}, 26).requires_grad_()}));
}

TEST(Dropout, KeepsChannelsLastLayoutAndHalfTypes) {
  // [N, C, H, W] with NHWC strides: the result keeps them, the mask still follows logical order
  Tensor nhwc = rnd({2, 3, 4, 5}, 27, kFloat32).permute({0, 2, 3, 1}).contiguous().permute({0, 3, 1, 2});
  manual_seed(9);
  Tensor y = dropout(nhwc, 0.5);
  EXPECT_EQ(y.strides(), nhwc.strides());
  manual_seed(9);
  Vec ref = test::values(dropout(nhwc.contiguous(), 0.5));
  EXPECT_EQ(test::values(y), ref);
  for (ScalarType dt : {kFloat16, kBFloat16}) {
    manual_seed(9);
    Tensor h = dropout(ones({1000}, dt), 0.25);
    EXPECT_EQ(h.dtype(), dt);
    for (double v : test::values(h)) ASSERT_TRUE(v == 0 || std::abs(v - 4.0 / 3.0) < 1e-2) << v;
  }
}

TEST(Dropout, Errors) {
  expect_error([] { dropout(ones({3}), 1.5); }, "[dropout] probability must be in [0, 1], got 1.5");
  expect_error([] { dropout(ones({3}), -0.1); }, "[dropout] probability must be in [0, 1]");
  expect_error([] { dropout(ones({3}, kInt64), 0.5); }, "[dropout] expects a floating-point tensor, got int64");
  expect_error([] { dropout(Tensor(), 0.5); }, "[dropout] got an undefined tensor");
}

// ---- every other built device against the CPU (skipped where the CPU is the only one)

TEST(NnOpsDevices, MatchTheCpu) {
  auto devs = test::devices();
  if (devs.size() < 2) GTEST_SKIP() << "no device besides the CPU in this build";
  Tensor x = rnd({6, 5}, 30, kFloat32), w = rnd({4, 5}, 31, kFloat32), b = rnd({4}, 32, kFloat32);
  Tensor t = tensor({0, 3, -100, 1, 2, 3});
  Tensor cw = rnd({4}, 33, kFloat32) + 2.0;
  manual_seed(11);
  Vec mask_cpu = test::values(dropout(ones({1000}), 0.4));
  Tensor logits_cpu = linear(x, w, b).detach().requires_grad_();
  Tensor loss_cpu = cross_entropy(logits_cpu, t, cw, Reduction::Mean, -100, 0.1);
  loss_cpu.backward();
  for (size_t i = 1; i < devs.size(); ++i) {
    Device d = devs[i];
    SCOPED_TRACE(d.str());
    manual_seed(11);
    EXPECT_EQ(test::values(dropout(ones({1000}, TensorOptions(kFloat32).device(d)), 0.4)), mask_cpu);
    Tensor logits = linear(x.to(d), w.to(d), b.to(d)).detach().requires_grad_();
    expect_close(logits, test::values(logits_cpu), {6, 4}, 1e-4, 1e-5);
    Tensor loss = cross_entropy(logits, t.to(d), cw.to(d), Reduction::Mean, -100, 0.1);
    expect_close(loss, test::values(loss_cpu), {}, 1e-5, 1e-6);
    loss.backward();
    expect_close(logits.grad(), test::values(logits_cpu.grad()), {6, 4}, 1e-4, 1e-6);
    expect_error([&] { nll_loss(logits, tensor({0, 1, 2, 3, 4, 0}).to(d)); }, "[nll_loss] target 4 is out of range");
  }
}

}  // namespace
