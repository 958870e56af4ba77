// nn::utils::clip_grad_norm_ and clip_grad_value_ against torch.nn.utils
// (tests/fixtures/optim/clip_grad.txt), and their edge cases and errors.
#include <cmath>
#include <limits>
#include <map>
#include <string>

#include "kiln/nn/utils.h"
#include "optim_fixture.h"
#include "test_util.h"

namespace kiln::test {
namespace {

using nn::utils::clip_grad_norm_;
using nn::utils::clip_grad_value_;

Shape shape_of(const std::vector<std::string>& w, size_t at) {
  Shape s;
  for (int64_t d = 0; d < std::stoll(w[at]); ++d) s.push_back(std::stoll(w[at + 1 + d]));
  return s;
}

TEST(NnClipGrad, MatchesPyTorch) {
  auto cases = read_fixture_cases("optim/clip_grad.txt");
  ASSERT_EQ(cases.size(), 9u);
  for (const auto& c : cases) {
    const ScalarType dtype = c.with("dtype").at(0).at(1) == "float32" ? kFloat32 : kFloat64;
    const auto args = nums(c.with("args").at(0), 1);
    std::map<int64_t, Tensor> by_index;
    for (const auto& w : c.with("grad")) {
      const Shape s = shape_of(w, 2);
      Tensor p = zeros(s, dtype).requires_grad_();
      p.set_grad(tensor(nums(w, 3 + s.size()), s, kFloat64).to(dtype));
      by_index[std::stoll(w[1])] = p;
    }
    for (const auto& w : c.with("nograd")) by_index[std::stoll(w[1])] = zeros(shape_of(w, 2), dtype).requires_grad_();
    std::vector<Tensor> params;
    for (auto& [i, p] : by_index) params.push_back(p);
    const double total = clip_grad_norm_(params, args[0], args[1]);
    const double want = num(c.with("total").at(0).at(1));
    const double rtol = dtype == kFloat32 ? 1e-6 : 1e-13;
    EXPECT_NEAR(total, want, rtol * want) << c.name;
    for (const auto& w : c.with("clipped")) {
      const Tensor& p = by_index.at(std::stoll(w[1]));
      expect_close(p.grad(), nums(w, 2), p.shape(), rtol, 1e-30, c.name + " grad " + w[1]);
    }
    for (const auto& w : c.with("nograd")) EXPECT_FALSE(by_index.at(std::stoll(w[1])).grad().defined()) << c.name;
  }
}

TEST(NnClipGrad, NormByHand) {
  Tensor a = zeros({2}).requires_grad_(), b = zeros({1}).requires_grad_();
  a.set_grad(tensor({3.0f, 0.0f}));
  b.set_grad(tensor({4.0f}));
  EXPECT_NEAR(clip_grad_norm_({a, b}, 1.0), 5.0, 1e-6);  // sqrt(9 + 16)
  expect_close(a.grad(), {0.6, 0.0}, {2}, 1e-6);
  expect_close(b.grad(), {0.8}, {1}, 1e-6);
  a.set_grad(tensor({-3.0f, 0.5f}));
  EXPECT_EQ(clip_grad_norm_({a, b}, 10.0, INFINITY), 3.0);  // max |g|, below max_norm: unchanged
  EXPECT_EQ(values(a.grad()), (std::vector<double>{-3.0, 0.5}));
}

TEST(NnClipGrad, NoGradsEmptyGradsAndMixedDtypes) {
  Tensor a = zeros({2}).requires_grad_();
  EXPECT_EQ(clip_grad_norm_({a}, 1.0), 0.0);
  EXPECT_EQ(clip_grad_norm_({}, 1.0), 0.0);
  Tensor e = zeros({0}).requires_grad_();
  e.set_grad(zeros({0}));
  a.set_grad(tensor({0.0f, -2.0f}));
  EXPECT_NEAR(clip_grad_norm_({e, a}, 1.0, INFINITY), 2.0, 1e-6);
  expect_close(a.grad(), {0.0, -1.0}, {2}, 1e-6);
  Tensor d = zeros({1}, kFloat64).requires_grad_();
  d.set_grad(tensor({2.0}, kFloat64));
  a.set_grad(tensor({0.0f, 2.0f}));
  EXPECT_NEAR(clip_grad_norm_({a, d}, 1.0), std::sqrt(8.0), 1e-6);
  expect_close(d.grad(), {2.0 / std::sqrt(8.0)}, {1}, 1e-6);
  EXPECT_EQ(d.grad().dtype(), kFloat64);
}

TEST(NnClipGrad, NonFinite) {
  Tensor a = zeros({2}).requires_grad_();
  a.set_grad(tensor({NAN, 1.0f}));
  expect_error([&] { clip_grad_norm_({a}, 1.0, 2.0, true); },
               "[clip_grad_norm_] the total norm of order 2 of the gradients is non-finite (nan)");
  EXPECT_TRUE(std::isnan(values(a.grad())[0]));
  EXPECT_EQ(values(a.grad())[1], 1.0);  // the error scaled nothing
  a.set_grad(tensor({INFINITY, 1.0f}));
  EXPECT_TRUE(std::isinf(clip_grad_norm_({a}, 1.0)));  // scaled by max_norm / inf = 0, as PyTorch
  EXPECT_EQ(values(a.grad())[1], 0.0);
}

// Many gradients of three dtypes and assorted layouts: per dtype one ForeachNorm and one
// ForeachMul (more than 48 tensors: several launches; an empty one; one spanning several of the
// kernels' chunks; channels-last; a strided view), against the norms computed here in double
// and rounded as torch rounds them (each gradient's norm to its dtype, the total in float64 when
// a float64 gradient is present).
TEST(NnClipGrad, MultiTensorNormsAndScalingMatchAComputationByHand) {
  for (double p : {2.0, 1.0, 3.0, 0.0, std::numeric_limits<double>::infinity()}) {
    SCOPED_TRACE("p = " + std::to_string(p));
    manual_seed(9);
    std::vector<Tensor> params, grads;
    std::vector<Shape> strides;
    auto add = [&](Tensor g) {
      params.push_back(zeros(g.shape(), g.dtype()).requires_grad_());
      params.back().set_grad(g);
      grads.push_back(g.clone());
      strides.push_back(g.strides());
    };
    for (int i = 0; i < 60; ++i) add(randn({i % 7 + 1, 3}) * 0.1);
    add(zeros({0}));
    add(randn({20000}) * 0.01);  // three chunks of 8192
    add(randn({2, 3, 4, 5}).contiguous(MemoryFormat::ChannelsLast));
    add(randn({4, 9}).narrow(1, 2, 5));
    for (int i = 0; i < 5; ++i) add(randn({11}, kFloat64));
    for (int i = 0; i < 3; ++i) add(randn({13}).to(kBFloat16));
    // by hand: each norm in double, rounded to its gradient's dtype, then the norm of those
    auto norm_of = [&](const std::vector<double>& v) {
      double s = 0;
      for (double x : v) {
        const double a = std::abs(x);
        if (std::isinf(p))
          s = std::max(s, a);
        else if (p == 0)
          s += a != 0;
        else
          s += std::pow(a, p);
      }
      return std::isinf(p) || p == 0 ? s : std::pow(s, 1 / p);
    };
    std::vector<double> per;
    for (const Tensor& g : grads) per.push_back(values(full({}, norm_of(values(g))).to(g.dtype()))[0]);
    const double want = norm_of(per), max_norm = want / 2;
    profiler::Session session({.timing = false});
    const double total = clip_grad_norm_(params, max_norm, p);
    std::map<std::string, int64_t> ops;
    for (const profiler::OpStat& st : session.stats()) ops[st.op] += st.count;
    EXPECT_EQ(ops["ForeachNorm"], 3);  // float32, float64, bfloat16
    EXPECT_EQ(ops["ForeachMul"], 3);
    EXPECT_EQ(ops["Norm"], 1);              // the total
    EXPECT_NEAR(total, want, 1e-6 * want);  // a float32 norm may round the other way (another sum order)
    const double coef = max_norm / (want + 1e-6);
    for (size_t i = 0; i < grads.size(); ++i) {
      const double tol = grads[i].dtype() == kBFloat16 ? 1e-2 : 1e-6;
      EXPECT_EQ(params[i].grad().strides(), strides[i]) << i;  // scaled in place
      const std::vector<double> got = values(params[i].grad()), before = values(grads[i]);
      for (size_t j = 0; j < got.size(); ++j)
        ASSERT_NEAR(got[j], before[j] * coef, tol * std::abs(before[j]) + 1e-12) << i;
    }
  }
}

TEST(NnClipGrad, ClipValue) {
  Tensor a = zeros({4}).requires_grad_(), b = zeros({1}).requires_grad_();
  a.set_grad(tensor({-2.0f, -0.5f, 0.25f, 3.0f}));
  clip_grad_value_({a, b}, 1.0);
  EXPECT_EQ(values(a.grad()), (std::vector<double>{-1.0, -0.5, 0.25, 1.0}));
  EXPECT_FALSE(b.grad().defined());
  expect_error([&] { clip_grad_value_({a}, -1.0); }, "[clip_grad_value_] clip_value must be non-negative, got -1");
}

// The two halves (torch.nn.utils.get_total_norm and clip_grads_with_norm_) do what
// clip_grad_norm_ does, the norm left a tensor.
TEST(NnClipGrad, TotalNormAndClipWithNormAreClipGradNormInTwo) {
  auto params = [](float scale) {
    Tensor a = zeros({3}).requires_grad_(), b = zeros({2}, kFloat64).requires_grad_(), c = zeros({1}).requires_grad_();
    a.set_grad(tensor({3.0f * scale, 0.0f, -1.0f}));
    b.set_grad(tensor(std::vector<double>{4.0 * scale, 2.0}, Shape{2}, kFloat64));
    return std::vector<Tensor>{a, b, c};  // c has no gradient
  };
  for (const double p : {2.0, 1.0, static_cast<double>(INFINITY)}) {
    SCOPED_TRACE(p);
    std::vector<Tensor> one = params(1.5f), two = params(1.5f);
    const double total = clip_grad_norm_(one, 2.0, p);
    const Tensor t = nn::utils::get_total_norm({two[0].grad(), two[1].grad(), two[2].grad()}, p);
    EXPECT_EQ(t.dim(), 0);
    EXPECT_EQ(t.dtype(), kFloat64);  // float32 and float64 norms promote
    EXPECT_EQ(t.item<double>(), total);
    EXPECT_EQ(two[0].grad().to_vector<float>(), params(1.5f)[0].grad().to_vector<float>());  // reading changes nothing
    nn::utils::clip_grads_with_norm_(two, 2.0, t);
    for (size_t i = 0; i < 2; ++i) EXPECT_EQ(one[i].grad().to_vector<double>(), two[i].grad().to_vector<double>()) << i;
    EXPECT_FALSE(two[2].grad().defined());
  }
  // Below max_norm: unchanged. No tensors: a zero norm.
  std::vector<Tensor> small = params(0.0f);
  nn::utils::clip_grads_with_norm_(small, 10.0, nn::utils::get_total_norm({small[0].grad(), small[1].grad()}));
  expect_close(small[0].grad(), {0.0, 0.0, -1.0}, {3}, 1e-7);
  EXPECT_EQ(nn::utils::get_total_norm({}).item<double>(), 0.0);
  EXPECT_EQ(nn::utils::get_total_norm({Tensor()}).item<double>(), 0.0);
}

TEST(NnClipGrad, TotalNormAndClipWithNormErrors) {
  Tensor a = zeros({2}).requires_grad_();
  a.set_grad(tensor({NAN, 1.0f}));
  expect_error([&] { nn::utils::get_total_norm({a.grad()}, 2.0, true); },
               "[get_total_norm] the total norm of order 2 of the gradients is non-finite (nan)");
  expect_error([&] { nn::utils::get_total_norm({a.grad()}, -1.0); },
               "[get_total_norm] norm_type must be >= 0 or inf, got -1");
  expect_error([&] { nn::utils::clip_grads_with_norm_({a}, -1.0, ones({})); },
               "[clip_grads_with_norm_] max_norm must be non-negative, got -1");
  expect_error(
      [&] { nn::utils::clip_grads_with_norm_({a}, 1.0, Tensor()); },
      "[clip_grads_with_norm_] total_norm must be a one-element floating-point tensor, got an undefined tensor");
  expect_error([&] { nn::utils::clip_grads_with_norm_({a}, 1.0, ones({2})); },
               "[clip_grads_with_norm_] total_norm must be a one-element floating-point tensor, got float32 [2]");
  expect_error([&] { nn::utils::clip_grads_with_norm_({a}, 1.0, ones({}, kInt64)); },
               "[clip_grads_with_norm_] total_norm must be a one-element floating-point tensor, got int64 []");
  expect_error(
      [&] {
        nn::utils::clip_grads_with_norm_({a, Tensor()}, 1.0, ones({}));
      },
      "[clip_grads_with_norm_] parameter 1 is an undefined tensor");
}

TEST(NnClipGrad, Errors) {
  Tensor a = zeros({2}).requires_grad_();
  expect_error([&] { clip_grad_norm_({a}, -1.0); }, "[clip_grad_norm_] max_norm must be non-negative, got -1");
  expect_error([&] { clip_grad_norm_({a}, 1.0, -2.0); }, "[clip_grad_norm_] norm_type must be >= 0 or inf, got -2");
  expect_error([&] { clip_grad_norm_({a, Tensor()}, 1.0); }, "[clip_grad_norm_] parameter 1 is an undefined tensor");
}

}  // namespace
}  // namespace kiln::test
