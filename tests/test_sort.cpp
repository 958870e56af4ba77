// sort, argsort and topk: torch's stable sort and its topk values, bit for bit and index for index
// (tests/fixtures/numerics/sort.safetensors, made by tests/fixtures/make_sort_fixtures.py), in every
// dtype on every device present; zero-size and 0-d tensors, strided inputs, bad input; kthvalue,
// median and nanmedian. flip, roll
// and repeat: their results and bad input. On the stand-in GPU, all of them and cumsum without a
// fallback; the logic of CUDA's topk of a few, run on the CPU.
// (Gradients, first and second order, are rows of tests/test_gradcheck.cpp.)
#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backend/sort_math.h"
#include "fixture_util.h"
#include "stand_in_device.h"
#include "test_util.h"

namespace kiln::test {
namespace {

const char* const kFixture = "numerics/sort.safetensors";

Tensor want(const std::string& key) { return fixture_tensor(kFixture, key); }

void expect_same_indices(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.dtype(), kInt64) << what;
  ASSERT_EQ(got.shape(), want.shape()) << what;
  EXPECT_EQ(got.to_vector<int64_t>(), want.to_vector<int64_t>()) << what;
}

class SortTorch : public ::testing::TestWithParam<std::string> {};

TEST_P(SortTorch, EqualsTorchsStableSortOnEveryDevice) {
  const std::string name = GetParam();
  for (Device d : devices()) {
    const Tensor x = want(name + ".x").to(d);
    const std::string where = name + " on " + d.str() + ": ";
    for (auto [key, dim, descending] : {std::tuple{"sort_last", -1, false}, std::tuple{"sort_last_desc", -1, true},
                                        std::tuple{"sort_first", 0, false}, std::tuple{"sort_first_desc", 0, true}}) {
      const std::string k = name + "." + key;
      auto [values, indices] = sort(x, dim, descending);
      expect_same_bits(values.cpu(), want(k + ".values"), where + key);
      expect_same_indices(indices.cpu(), want(k + ".indices"), where + key);
      expect_same_indices(x.argsort(dim, descending).cpu(), want(k + ".indices"), where + key + " (argsort)");
    }
    // topk: torch's values; the indices are the stable sort's first 7 (ties to the first position).
    for (bool largest : {true, false}) {
      auto [values, indices] = topk(x, 7, -1, largest);
      const std::string sorted = name + (largest ? ".sort_last_desc" : ".sort_last");
      if (name != "bool")
        expect_same_bits(values.cpu(), want(name + (largest ? ".topk.values" : ".topk_smallest.values")),
                         where + "topk values");
      else
        expect_same_bits(values.cpu(), want(sorted + ".values").narrow(1, 0, 7), where + "topk values");
      expect_same_indices(indices.cpu(), want(sorted + ".indices").narrow(1, 0, 7).contiguous(),
                          where + "topk indices");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, SortTorch,
                         ::testing::Values("float64", "float32", "bfloat16", "float16", "int64", "int32", "uint8",
                                           "bool"));

// Rows long enough, and many rows short enough, for each of a GPU sort's ways of sorting a row.
TEST(Sort, LongRowsAndManyShortRowsEqualTorch) {
  for (Device d : devices()) {
    for (const std::string name : {"long", "many"}) {
      const Tensor x = want(name + ".x").to(d);
      for (bool descending : {false, true}) {
        const std::string k = name + (descending ? ".sort_desc" : ".sort");
        auto [values, indices] = x.sort(-1, descending);
        expect_same_bits(values.cpu(), want(k + ".values"), k + " on " + d.str());
        expect_same_indices(indices.cpu(), want(k + ".indices"), k + " on " + d.str());
        // topk of more than a few (no one-pass selection): the sort's first ones.
        auto [tv, ti] = x.topk(std::min<int64_t>(25, x.size(1) - 1), -1, descending);
        const Tensor first = want(k + ".indices").narrow(1, 0, ti.size(1)).contiguous();
        expect_same_indices(ti.cpu(), first, k + " topk on " + d.str());
        expect_same_bits(tv.cpu(), want(k + ".values").narrow(1, 0, ti.size(1)).contiguous(), k + " topk on " + d.str());
      }
    }
  }
}

TEST(Sort, StridedInputsEqualDenseCopies) {
  for (Device d : devices()) {
    const Tensor base = want("float32.x").to(d);
    for (const Tensor& x : {base.t(), base.slice(1, 1, std::nullopt, 3), base.unsqueeze(1).expand({6, 3, 40})}) {
      for (int64_t dim = 0; dim < x.dim(); ++dim) {
        auto [v, i] = sort(x, dim, true);
        auto [vd, id] = sort(x.contiguous(), dim, true);
        expect_same_bits(v.cpu(), vd.cpu(), "sort of a view on " + d.str());
        expect_same_indices(i.cpu(), id.cpu(), "sort of a view on " + d.str());
      }
    }
  }
}

TEST(Sort, ZeroDimAndZeroSizeTensors) {
  for (Device d : devices()) {
    const Tensor s = scalar_tensor(2.5).to(d);
    auto [v, i] = sort(s);
    EXPECT_EQ(v.dim(), 0);
    EXPECT_EQ(v.item<double>(), 2.5);
    EXPECT_EQ(i.item<int64_t>(), 0);
    auto [tv, ti] = topk(s, 1, 0);
    EXPECT_EQ(tv.item<double>(), 2.5);
    EXPECT_EQ(std::get<0>(topk(s, 0)).shape(), (Shape{0}));  // torch 2.15 gives s itself, a 0-d tensor
    const Tensor e = zeros({3, 0}, TensorOptions(kFloat32).device(d));
    EXPECT_EQ(std::get<0>(sort(e, 1)).shape(), (Shape{3, 0}));
    EXPECT_EQ(std::get<1>(sort(e, 0)).shape(), (Shape{3, 0}));
    EXPECT_EQ(std::get<0>(topk(e, 0, 1)).shape(), (Shape{3, 0}));
    const Tensor x = arange(12, TensorOptions(kFloat32).device(d)).reshape({3, 4});
    EXPECT_EQ(std::get<0>(topk(x, 0, 1)).shape(), (Shape{3, 0}));
    expect_same_bits(std::get<0>(topk(x, 2, 0)).cpu(), tensor(std::vector<double>{8, 9, 10, 11, 4, 5, 6, 7}, Shape{2, 4}, kFloat32),
                     "topk along dim 0");
  }
}

// torch 2.15's results for these inputs.
TEST(Sort, KthvalueMedianAndNanmedianAsTorch) {
  const double nan = std::nan("");
  for (Device d : devices()) {
    const Tensor t = tensor({{3.0, nan, 1.0, nan}, {4.0, 2.0, 2.0, 1.0}}, TensorOptions(kFloat32).device(d));
    auto check = [&](std::tuple<Tensor, Tensor> r, std::vector<double> v, std::vector<int64_t> i, const char* what) {
      expect_same_bits(std::get<0>(r).cpu(), tensor(v, Shape{static_cast<int64_t>(v.size())}, kFloat32),
                       std::string(what) + " on " + d.str());
      EXPECT_EQ(std::get<1>(r).cpu().to_vector<int64_t>(), i) << what << " on " << d.str();
    };
    check(median(t, 1), {nan, 2}, {1, 1}, "median");
    check(t.nanmedian(1), {1, 2}, {2, 1}, "nanmedian");
    check(kthvalue(t, 2, 1), {3, 2}, {0, 1}, "kthvalue");
    check(t.kthvalue(1, 0), {3, 2, 1, 1}, {0, 1, 0, 1}, "kthvalue along dim 0");
    EXPECT_TRUE(std::isnan(median(t).item<double>()));
    EXPECT_EQ(nanmedian(t).item<double>(), 2.0);
    EXPECT_EQ(std::get<0>(median(t, 0, true)).shape(), (Shape{1, 4}));
    EXPECT_TRUE(std::isnan(nanmedian(full({2}, nan, TensorOptions(kFloat32).device(d))).item<double>()));
    EXPECT_TRUE(std::isnan(median(zeros({0}, TensorOptions(kFloat32).device(d))).item<double>()));
    EXPECT_EQ(median(tensor({3, 1, 2}, TensorOptions().device(d))).item<int64_t>(), 2);
    auto [sv, si] = median(scalar_tensor(5.0, TensorOptions(kFloat32).device(d)), 0);
    EXPECT_EQ(sv.dim(), 0);
    EXPECT_EQ(sv.item<double>(), 5.0);
    EXPECT_EQ(si.item<int64_t>(), 0);
  }
  const Tensor x = zeros({2, 4});
  expect_error([&] { kthvalue(x, 5); }, "[kthvalue] k (5) is out of range for dim 1 of size 4");
  expect_error([&] { kthvalue(x, 0, 0); }, "[kthvalue] k (0) is out of range");
  expect_error([&] { median(zeros({2, 0}), 1); }, "[median] dim 1 of shape [2, 0] is empty");
  expect_error([&] { median(tensor({true, false})); }, "[median] does not take bool tensors");
  expect_error([&] { nanmedian(x, 2); }, "[nanmedian]");
}

// The median of all elements passes its gradient evenly to every element equal to it (every NaN
// when it is NaN), as torch's.
TEST(Sort, MedianOfAllSpreadsItsGradientOverTies) {
  Tensor x = tensor({1.0, 2.0, 2.0, 3.0, 2.0}, kFloat64).requires_grad_();
  median(x).backward();
  expect_close(x.grad(), {0, 1.0 / 3, 1.0 / 3, 0, 1.0 / 3}, {5});
  Tensor y = tensor({1.0, std::nan(""), 0.0, std::nan("")}, kFloat64).requires_grad_();
  median(y).backward();
  expect_close(y.grad(), {0, 0.5, 0, 0.5}, {4});
  Tensor z = tensor({1.0, std::nan(""), 4.0}, kFloat64).requires_grad_();
  nanmedian(z).backward();
  expect_close(z.grad(), {1, 0, 0}, {3});
}

TEST(Sort, OnlyValuesCarryAGradient) {
  Tensor x = tensor({3.0, -1.0, 2.0, 5.0}, kFloat64).requires_grad_();
  auto [v, i] = topk(x, 2);
  EXPECT_TRUE(v.requires_grad());
  EXPECT_FALSE(i.requires_grad());
  (v * tensor({10.0, 1.0}, kFloat64)).sum().backward();
  expect_close(x.grad(), {1, 0, 0, 10}, {4});
  EXPECT_FALSE(argsort(x).requires_grad());
}

TEST(Sort, BadInputIsAnErrorNamingTheOp) {
  const Tensor x = zeros({2, 5});
  expect_error([&] { topk(x, 6); }, "[topk] k (6) is out of range for dim 1 of size 5");
  expect_error([&] { topk(x, -1, 0); }, "[topk] k (-1) is out of range for dim 0 of size 2");
  expect_error([&] { sort(x, 2); }, "[sort]");
  expect_error([&] { argsort(x, -3); }, "[argsort]");
  expect_error([&] { sort(Tensor()); }, "[sort]");
  expect_error([&] { topk(scalar_tensor(1.0), 2); }, "[topk] k (2) is out of range");
}

TEST(Rearrange, FlipRollRepeatAsTorch) {
  for (Device d : devices()) {
    const Tensor x = arange(6, TensorOptions(kInt64).device(d)).reshape({2, 3});
    auto is = [&](const Tensor& got, std::vector<double> v, Shape shape, const char* what) {
      expect_same_bits(got.cpu(), tensor(v, shape, kInt64), std::string(what) + " on " + d.str());
    };
    is(flip(x, {0}), {3, 4, 5, 0, 1, 2}, {2, 3}, "flip 0");
    is(x.flip({-1, 0}), {5, 4, 3, 2, 1, 0}, {2, 3}, "flip both");
    is(x.t().flip({0}), {2, 5, 1, 4, 0, 3}, {3, 2}, "flip of a transpose");
    is(roll(x, {1}, {1}), {2, 0, 1, 5, 3, 4}, {2, 3}, "roll 1 along dim 1");
    is(roll(x, {-1}), {1, 2, 3, 4, 5, 0}, {2, 3}, "roll -1 flattened");
    is(roll(x, {3, -4}, {0, 1}), {4, 5, 3, 1, 2, 0}, {2, 3}, "roll along both dims");
    is(repeat(x, {1, 2}), {0, 1, 2, 0, 1, 2, 3, 4, 5, 3, 4, 5}, {2, 6}, "repeat 1, 2");
    is(x.repeat({2, 1, 1}), {0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5}, {2, 2, 3}, "repeat with a new dim");
    is(repeat(x.select(0, 1), {2, 2}), {3, 4, 5, 3, 4, 5, 3, 4, 5, 3, 4, 5}, {2, 6}, "repeat of a 1-D row");
    EXPECT_EQ(repeat(x, {0, 3}).shape(), (Shape{0, 9}));
    EXPECT_EQ(roll(zeros({0, 3}), {2}, {0}).shape(), (Shape{0, 3}));
    // Nothing moves, and still a new tensor, as torch's.
    for (const Tensor& same : {flip(x, {}), roll(x, {6}, {1}), repeat(x, {1, 1}), flip(x.narrow(0, 0, 1), {0})}) {
      EXPECT_NE(same.storage(), x.storage());
      EXPECT_EQ(same.cpu().to_vector<int64_t>(), same.cpu().clone().to_vector<int64_t>());
    }
  }
}

// torch.repeat_interleave: a number or a count per element, along a dim or flattened, with the
// gradient summed back; repeat_interleave(counts) of positions, counts of 0 among them.
TEST(Rearrange, RepeatInterleaveAsTorch) {
  const Tensor x = tensor({{1.0, 2.0}, {3.0, 4.0}});
  for (Device d : devices()) {
    const Tensor xd = x.to(d);
    EXPECT_EQ(values(repeat_interleave(xd, 2)), (std::vector<double>{1, 1, 2, 2, 3, 3, 4, 4})) << d.str();
    EXPECT_EQ(values(xd.repeat_interleave(2, 0)), (std::vector<double>{1, 2, 1, 2, 3, 4, 3, 4})) << d.str();
    EXPECT_EQ(xd.repeat_interleave(2, 0).shape(), (Shape{4, 2}));
    EXPECT_EQ(values(repeat_interleave(xd, tensor({1, 0}), -1)), (std::vector<double>{1, 3})) << d.str();
    EXPECT_EQ(values(repeat_interleave(xd, tensor({3}), 1)),
              (std::vector<double>{1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4})) << d.str();
    EXPECT_EQ(repeat_interleave(tensor({0, 2, 0, 3, 0}, TensorOptions().device(d))).cpu().to_vector<int64_t>(),
              (std::vector<int64_t>{1, 1, 3, 3, 3})) << d.str();
    EXPECT_EQ(repeat_interleave(xd, 0).shape(), Shape{0});
    Tensor g = xd.detach().requires_grad_();
    repeat_interleave(g, tensor({2, 3}), 0).sum().backward();
    EXPECT_EQ(values(g.grad()), (std::vector<double>{2, 2, 3, 3})) << d.str();
  }
  expect_error([] { repeat_interleave(tensor({1.0}), -1); }, "[repeat_interleave] repeats must not be negative");
  expect_error([] { repeat_interleave(tensor({1, -2})); }, "[repeat_interleave] repeats must not be negative");
  expect_error([] { repeat_interleave(tensor({1.5})); }, "[repeat_interleave] expects a 1-D integer tensor");
  expect_error([] { repeat_interleave(zeros({3}), tensor({1, 2})); }, "one per element along the dim (3)");
}

TEST(Rearrange, BadInputIsAnErrorNamingTheOp) {
  const Tensor x = zeros({2, 3});
  expect_error([&] { flip(x, {0, -2}); }, "[flip] dim 0 appears more than once");
  expect_error([&] { flip(x, {2}); }, "[flip]");
  expect_error([&] { roll(x, {1, 2}); }, "[roll] without dims, expects one shift");
  expect_error([&] { roll(x, {1, 2}, {0}); }, "[roll] expects a shift per dim");
  expect_error([&] { roll(x, {}, {}); }, "[roll] expects at least one shift");
  expect_error([&] { repeat(x, {2}); }, "[repeat] expects at least one repeat per dim");
  expect_error([&] { repeat(x, {1, -1}); }, "[repeat] repeats must not be negative");
  expect_error([&] { repeat(x, {INT64_MAX, 1}); }, "[repeat]");
  expect_error([&] { repeat(x, {int64_t{1} << 40, int64_t{1} << 40}); }, "[repeat] shape");
}

// A 16-bit NaN keeps its sign and payload through the copies these ops make (a same-dtype copy
// moves bits, not values through float), as torch's do.
TEST(Rearrange, SixteenBitNaNsKeepTheirBits) {
  for (Device d : devices()) {
    for (ScalarType dt : {kBFloat16, kFloat16}) {
      Tensor x = empty({2, 3}, dt);
      const std::vector<uint16_t> bits = {0xffc1, 0x7fc3, 0x3f80, 0xff81, 0x8000, 0x7e01};
      auto* p = static_cast<uint16_t*>(x.data_ptr());
      std::copy(bits.begin(), bits.end(), p);
      auto bits_of = [](const Tensor& t) {
        const Tensor c = t.cpu().contiguous();
        const auto* q = static_cast<const uint16_t*>(c.data_ptr());
        return std::vector<uint16_t>(q, q + c.numel());
      };
      const Tensor xd = x.to(d);
      const std::string where = std::string(dtype_name(dt)) + " on " + d.str();
      EXPECT_EQ(bits_of(xd.t().contiguous().t().contiguous()), bits) << where;
      EXPECT_EQ(bits_of(flip(flip(xd, {0, 1}), {1, 0})), bits) << where;
      EXPECT_EQ(bits_of(repeat(xd, {1, 1})), bits) << where;
      std::vector<uint16_t> sorted = bits_of(std::get<0>(sort(xd, 0))), want = bits;  // along a strided dim
      std::sort(sorted.begin(), sorted.end());
      std::sort(want.begin(), want.end());
      EXPECT_EQ(sorted, want) << where;
    }
  }
}

// CUDA's topk of a few (select_first_kernel in backend/cuda/sort.cu), its logic run here: each of
// `threads` threads selects the first k of every threads-th element in a backend::sort::BestK, then k rounds
// take the least head; the positions must be the stable sort's first k, ties and NaN included.
TEST(Sort, BlockSelectionOfAFewEqualsTheStableSortsFirstK) {
  using K = backend::sort::key_t<float>;
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    const int64_t n = 1 + static_cast<int64_t>(rng() % 3000);
    const int k = 1 + static_cast<int>(rng() % backend::sort::kMaxSelect), threads = trial % 2 ? 256 : 1 + static_cast<int>(rng() % 40);
    const bool descending = trial % 3 == 0;
    std::vector<float> row(static_cast<size_t>(n));
    for (float& v : row) v = static_cast<float>(static_cast<int>(rng() % 9) - 4) / 2;  // many ties
    for (int j = 0; j < 3 && n > 10; ++j) row[rng() % n] = j == 0 ? std::nanf("") : (j == 1 ? -0.0f : INFINITY);
    if (k >= n) continue;
    std::vector<backend::sort::BestK<K>> lists(static_cast<size_t>(threads), backend::sort::BestK<K>(k));
    for (int64_t j = 0; j < n; ++j) lists[j % threads].offer({backend::sort::key_of(row[j], descending), j});
    std::vector<int> taken(static_cast<size_t>(threads), 0);
    std::vector<int64_t> got;
    for (int round = 0; round < k; ++round) {
      int winner = -1;
      for (int t = 0; t < threads; ++t)
        if (taken[t] < lists[t].count &&
            (winner < 0 || backend::sort::before(lists[t].items[taken[t]], lists[winner].items[taken[winner]])))
          winner = t;
      got.push_back(lists[winner].items[taken[winner]++].pos);
    }
    std::vector<int64_t> want(static_cast<size_t>(n));
    std::iota(want.begin(), want.end(), 0);
    std::stable_sort(want.begin(), want.end(), [&](int64_t a, int64_t b) {
      const float x = row[a], y = row[b];
      if (std::isnan(x) || std::isnan(y)) return descending ? std::isnan(x) && !std::isnan(y) : !std::isnan(x) && std::isnan(y);
      return descending ? x > y : x < y;
    });
    want.resize(static_cast<size_t>(k));
    ASSERT_EQ(got, want) << "n " << n << ", k " << k << ", " << threads << " threads, descending " << descending;
  }
}

// On the stand-in GPU each op runs its CUDA kernel's case (no fallback), forward and backward.
TEST(Sort, HaveCudaKernels) {
  if (cuda::is_available()) GTEST_SKIP() << "a real GPU is present: SortTorch runs these there";
  StandInCuda stand_in(StandInCuda::Kernels::CpuWhereCudaHasOne);
  if (stand_in.native_ops() == 0) GTEST_SKIP() << "built without CUDA kernels";
  const auto before = fallback_counts();
  const Device d = Device::cuda(0);
  Tensor x = randn({4, 6}).to(d).requires_grad_();
  Tensor y = std::get<0>(sort(x, 0)) + std::get<0>(topk(x, 6, 1, false)) + flip(x, {1}) + roll(x, {2}, {1}) +
             repeat(x, {1, 2}).narrow(1, 3, 6) + cumsum(x, 0) + cumsum(x, 1) + x.repeat_interleave(2, 1).narrow(1, 0, 6) +
             repeat_interleave(x, tensor({2, 1, 1, 1, 1, 0}).to(d), 1);
  y.sum().backward();
  EXPECT_EQ(argsort(x, 1).device(), d);
  EXPECT_EQ(x.grad().device(), d);
  EXPECT_EQ(fallback_counts(), before) << "an op fell back to the CPU";
}

}  // namespace
}  // namespace kiln::test
