// nonzero, argwhere, masked_select and count_nonzero: torch's results (worked out here element by
// element) on every device present, for every rank, strided and broadcast inputs, empty and 0-d
// tensors; masked_select's gradient; bad input; and on the stand-in GPU, no fallback.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "stand_in_device.h"
#include "test_util.h"

namespace kiln::test {
namespace {

// The row-major coordinates of t's nonzero elements (NaN is nonzero), as torch.nonzero.
std::vector<int64_t> nonzero_ref(const Tensor& t) {
  const std::vector<double> v = values(t);
  std::vector<int64_t> out;
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i] == 0) continue;
    std::vector<int64_t> c(static_cast<size_t>(t.dim()));
    int64_t rest = static_cast<int64_t>(i);
    for (int64_t k = t.dim() - 1; k >= 0; --k) {
      c[static_cast<size_t>(k)] = rest % t.size(k);
      rest /= t.size(k);
    }
    out.insert(out.end(), c.begin(), c.end());
  }
  return out;
}

TEST(Select, NonzeroAsTorchOnEveryDevice) {
  const Tensor r = randn({3, 50, 7});
  const std::vector<Tensor> inputs = {
      r > 0.5,                                      // bool
      (r * 3).to(kInt32).to(kFloat32),              // floats with zeros
      r.to(kFloat64).permute({2, 0, 1}) > 1.0,      // strided
      tensor({0.0, -0.0, std::nan(""), 2.0}),       // -0 is zero, NaN is not
      randint(0, 3, {5000}, kInt64),                // longer than a GPU's scan tile
      randn({300, 1000}) > 1.0,                     // in chunks on the CPU's threads
      zeros({4, 0, 2}),                             // empty
  };
  for (Device d : devices())
    for (const Tensor& x : inputs) {
      const std::string where = "nonzero of " + ::testing::PrintToString(x.shape()) + " " + dtype_name(x.dtype()) + " on " + d.str();
      const Tensor got = nonzero(x.to(d));
      const std::vector<int64_t> want = nonzero_ref(x);
      EXPECT_EQ(got.dtype(), kInt64) << where;
      EXPECT_EQ(got.shape(), (Shape{static_cast<int64_t>(want.size()) / std::max<int64_t>(x.dim(), 1), x.dim()}))
          << where;
      EXPECT_EQ(got.cpu().to_vector<int64_t>(), want) << where;
      EXPECT_EQ(x.to(d).argwhere().cpu().to_vector<int64_t>(), want) << where;
      EXPECT_EQ(count_nonzero(x.to(d)).item<int64_t>(), static_cast<int64_t>(want.size()) / std::max<int64_t>(x.dim(), 1))
          << where;
    }
  // 0-d: [1, 0] or [0, 0], as torch's.
  EXPECT_EQ(nonzero(scalar_tensor(5.0)).shape(), (Shape{1, 0}));
  EXPECT_EQ(nonzero(scalar_tensor(0.0)).shape(), (Shape{0, 0}));
}

TEST(Select, CountNonzeroOverDims) {
  const Tensor x = tensor({{0.0, 1.0, 2.0}, {0.0, 0.0, 3.0}});
  for (Device d : devices()) {
    EXPECT_EQ(x.to(d).count_nonzero({0}).cpu().to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 2})) << d.str();
    EXPECT_EQ(count_nonzero(x.to(d), {1}).cpu().to_vector<int64_t>(), (std::vector<int64_t>{2, 1})) << d.str();
    EXPECT_EQ(count_nonzero(x.to(d), {0, 1}).dtype(), kInt64);
  }
}

TEST(Select, MaskedSelectAsTorchWithItsGradient) {
  const Tensor x = randn({4, 5}), mask = randn({4, 5}) > 0, row = tensor({true, false, true, true, false});
  for (Device d : devices()) {
    // Broadcast either way: a row mask over x, and x's row over a full mask.
    Tensor xg = x.to(d).requires_grad_();
    Tensor picked = masked_select(xg, row.to(d));
    std::vector<double> want;
    const std::vector<double> xv = values(x), mv = values(mask);
    for (int64_t i = 0; i < 4; ++i)
      for (int64_t j : {0, 2, 3}) want.push_back(xv[static_cast<size_t>(i * 5 + j)]);
    EXPECT_EQ(values(picked), want) << d.str();
    picked.backward(ones_like(picked) * 2);
    std::vector<double> grad(20, 0.0);
    for (int64_t i = 0; i < 4; ++i)
      for (int64_t j : {0, 2, 3}) grad[static_cast<size_t>(i * 5 + j)] = 2;
    EXPECT_EQ(values(xg.grad()), grad) << d.str();

    want.clear();
    for (size_t i = 0; i < 20; ++i)
      if (mv[i] != 0) want.push_back(xv[i]);
    EXPECT_EQ(values(x.to(d).t().contiguous().t().masked_select(mask.to(d))), want) << d.str();
    std::vector<double> from_row;
    for (size_t i = 0; i < 20; ++i)
      if (mv[i] != 0) from_row.push_back(xv[i % 5]);
    EXPECT_EQ(values(masked_select(x.to(d)[0], mask.to(d))), from_row) << d.str();
    EXPECT_EQ(masked_select(x.to(d), zeros({4, 5}, kBool).to(d)).shape(), Shape{0}) << d.str();
  }
}

TEST(Select, UniqueAsTorchOnEveryDevice) {
  const Tensor x = tensor({{3.0, 1.0, 3.0}, {std::nan(""), -0.0, 0.0}, {1.0, std::nan(""), 2.0}});
  for (Device d : devices()) {
    // torch: values [-0 (or 0), 1, 2, 3, nan, nan], counts [2, 2, 1, 2, 1, 1], NaNs distinct.
    const auto [v, inverse, counts] = unique(x.to(d), true, true, true);
    const std::vector<double> vv = values(v);
    ASSERT_EQ(vv.size(), 6u) << d.str();
    EXPECT_EQ(std::vector<double>(vv.begin(), vv.begin() + 4), (std::vector<double>{0, 1, 2, 3})) << d.str();
    EXPECT_TRUE(std::isnan(vv[4]) && std::isnan(vv[5])) << d.str();
    EXPECT_EQ(counts.cpu().to_vector<int64_t>(), (std::vector<int64_t>{2, 2, 1, 2, 1, 1})) << d.str();
    EXPECT_EQ(inverse.shape(), x.shape());
    EXPECT_EQ(inverse.cpu().to_vector<int64_t>(), (std::vector<int64_t>{3, 1, 3, 4, 0, 0, 1, 5, 2})) << d.str();
    // Only what is asked for.
    const auto [only, no_inverse, no_counts] = unique(tensor({2, 2, 7, -1}, TensorOptions().device(d)));
    EXPECT_EQ(only.cpu().to_vector<int64_t>(), (std::vector<int64_t>{-1, 2, 7})) << d.str();
    EXPECT_FALSE(no_inverse.defined());
    EXPECT_FALSE(no_counts.defined());
    // unique_consecutive keeps the order and counts runs.
    const auto [c, ci, cc] = unique_consecutive(tensor({1, 1, 2, 2, 3, 1, 1, 2}, TensorOptions().device(d)), true, true);
    EXPECT_EQ(c.cpu().to_vector<int64_t>(), (std::vector<int64_t>{1, 2, 3, 1, 2})) << d.str();
    EXPECT_EQ(ci.cpu().to_vector<int64_t>(), (std::vector<int64_t>{0, 0, 1, 1, 2, 3, 3, 4})) << d.str();
    EXPECT_EQ(cc.cpu().to_vector<int64_t>(), (std::vector<int64_t>{2, 2, 1, 2, 1})) << d.str();
    // Bool and empty tensors.
    EXPECT_EQ(values(std::get<0>(unique(tensor({true, false, true}, TensorOptions().device(d))))),
              (std::vector<double>{0, 1}));
    const auto [e, ei, ec] = unique(zeros({2, 0}, TensorOptions().device(d)), true, true, true);
    EXPECT_EQ(e.shape(), Shape{0});
    EXPECT_EQ(ei.shape(), (Shape{2, 0}));
    EXPECT_EQ(ec.shape(), Shape{0});
  }
  expect_error([] { unique(Tensor()); }, "[unique]");
}

TEST(Select, BadInputIsAnErrorNamingTheOp) {
  expect_error([] { nonzero(Tensor()); }, "[nonzero]");
  expect_error([] { masked_select(zeros({3}), tensor({1, 0, 1})); }, "[masked_select] expects a bool mask, got int64");
  expect_error([] { masked_select(zeros({3}), zeros({2}, kBool)); }, "[masked_select]");
  expect_error([] { count_nonzero(zeros({3}), {1}); }, "[count_nonzero] dim 1");
  expect_error([] { count_nonzero(zeros({3, 2}), {0, -2}); }, "[count_nonzero] dim 0 appears more than once");
}

// On the stand-in GPU each runs on CUDA kernels (no fallback), masked_select's gradient too.
TEST(Select, HaveCudaKernels) {
  if (cuda::is_available()) GTEST_SKIP() << "a real GPU is present: the tests above run there";
  StandInCuda stand_in(StandInCuda::Kernels::CpuWhereCudaHasOne);
  if (stand_in.native_ops() == 0) GTEST_SKIP() << "built without CUDA kernels";
  const auto before = fallback_counts();
  Tensor x = randn({4, 6}).to(Device::cuda(0)).requires_grad_();
  masked_select(x, x.detach() > 0).sum().backward();
  const auto [u, ui, uc] = unique(x.detach(), true, true, true);
  EXPECT_EQ(ui.device(), Device::cuda(0));
  EXPECT_EQ(nonzero(x.detach() > 0).device(), Device::cuda(0));
  EXPECT_EQ(count_nonzero(x.detach()).device(), Device::cuda(0));
  EXPECT_EQ(x.grad().device(), Device::cuda(0));
  EXPECT_EQ(fallback_counts(), before) << "an op fell back to the CPU";
}

}  // namespace
}  // namespace kiln::test
