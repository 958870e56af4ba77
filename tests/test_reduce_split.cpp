// Whole-tensor reductions large enough to be split across threads match a float64 loop,
// whatever the thread count, and keep NaN and logical semantics across the split.
#include <cmath>
#include <utility>

#include "core/tensor_util.h"
#include "test_util.h"

using namespace kiln;

namespace {
constexpr int64_t kN = 300001;  // odd, so the threads' slices differ in length

struct Threads {
  int saved = get_num_threads();
  explicit Threads(int n) { set_num_threads(n); }
  ~Threads() { set_num_threads(saved); }
};
}  // namespace

TEST(ReduceSplit, MatchesAFloat64LoopForOneAndTwoThreads) {
  manual_seed(21);
  Tensor x = randn({kN});
  std::vector<double> v = test::values(x);
  double sum = 0, prod_small = 1, mx = -INFINITY, sq = 0;
  for (double e : v) {
    sum += e;
    mx = std::max(mx, e);
    sq += e * e;
  }
  for (int threads : {1, 2}) {
    Threads t(threads);
    test::expect_close(x.sum(), {sum}, {}, 1e-4, 1e-2, "sum");
    test::expect_close(x.mean(), {sum / kN}, {}, 1e-4, 1e-6, "mean");
    test::expect_close(x.amax({}), {mx}, {}, 0, 0, "amax");
    test::expect_close(norm(x), {std::sqrt(sq)}, {}, 1e-5, 0, "norm");
    test::expect_close(norm(x, INFINITY), {std::max(mx, -test::values(x.amin({}))[0])}, {}, 0, 0, "norm inf");
    Tensor ones_x = ones({kN}, kFloat64) * 1.000001;
    test::expect_close(ones_x.prod(), {std::pow(1.000001, kN)}, {}, 1e-9, 0, "prod");
    (void)prod_small;
  }
}

TEST(ReduceSplit, NanAndLogicalResultsSurviveTheSplit) {
  for (int threads : {1, 2}) {
    Threads t(threads);
    Tensor x = zeros({kN});
    x.narrow(0, kN - 2, 1).fill_(NAN);  // in the last thread's slice
    EXPECT_TRUE(std::isnan(x.amax({}).item<double>()));
    EXPECT_TRUE(std::isnan(x.sum().item<double>()));
    Tensor b = ones({kN}, kBool);
    EXPECT_TRUE(all(b).item<bool>());
    b.narrow(0, kN - 1, 1).fill_(false);
    EXPECT_FALSE(all(b).item<bool>());
    EXPECT_TRUE(any(b).item<bool>());
    Tensor ints = ones({kN}, kInt32);
    EXPECT_EQ(ints.sum().item<int64_t>(), kN);
    EXPECT_EQ(ints.sum().dtype(), kInt64);
  }
}

// A view whose 26 reduced dims cannot be merged (overlapping unit strides over 27 elements):
// one clear error, not a walk past the end of the kernel's fixed index array.
TEST(ReduceSplit, TooManyUnmergeableDimsIsAnError) {
  Tensor base = arange(27, kFloat32);
  Tensor v = make_view(base, Shape(26, 2), Shape(26, 1), 0);
  test::expect_error([&] { (void)v.sum(); }, "exceeds the limit of 25");
  Tensor w = make_view(base, Shape(25, 2), Shape(25, 1), 0);  // at the limit: fine
  // Element i is reached once per choice of the dims at index 1 summing to i: sum = 25 * 2^24.
  EXPECT_NEAR(w.sum().item<double>(), 25.0 * 16777216.0, 1.0);
}

// Per-thread partial sums are added in the threads' order, not in the order they finish: with a
// large value in the first and third of four slices (+F, -F) and 1 in the second and fourth, that
// order gives ((F + 1) - F) + 1 = 1 every time (others would give 0 or 2). Batch norm's
// statistics over channels-last rows and layer norm's bias gradient over rows are split so.
TEST(ReduceSplit, ThreadsPartialSumsAreAddedInTheirOrder) {
  Threads t(4);
  const float F = 1e17f;  // F + 1 == F in double
  for (int run = 0; run < 20; ++run) {
    // [16, 2, 64, 64] channels-last: 65536 rows of 2 channels, 16384 rows to a thread.
    Tensor x = zeros({16, 2, 64, 64}).contiguous(MemoryFormat::ChannelsLast);
    Tensor rm = zeros({2}), rv = ones({2});
    // At w = 1: the channel's first value (w = 0), which its sums are taken relative to, stays 0.
    for (const auto& [n, v] : {std::pair<int64_t, float>{0, F}, {4, 1.0f}, {8, -F}, {12, 1.0f}})
      x.select(0, n).select(0, 0).select(0, 0).narrow(0, 1, 1).fill_(v);
    batch_norm(x, rm, rv, {}, {}, true, /*momentum=*/1.0);
    EXPECT_EQ(rm.select(0, 0).item<float>(), 1.0f / 65536) << "run " << run;
    // layer norm over 1024 rows of 64: 256 rows to a thread.
    Tensor g = zeros({1024, 64});
    for (const auto& [r, v] : {std::pair<int64_t, float>{0, F}, {256, 1.0f}, {512, -F}, {768, 1.0f}})
      g.select(0, r).narrow(0, 0, 1).fill_(v);
    Tensor w = ones({64}).requires_grad_(), b = zeros({64}).requires_grad_();
    layer_norm(randn({1024, 64}), {64}, w, b).backward(g);
    EXPECT_EQ(b.grad().select(0, 0).item<float>(), 1.0f) << "run " << run;
  }
}

// A sum over an outer dim (a bias gradient over the batch), over several unmergeable dims, or down
// a strided column is as accurate as a sum over one contiguous run: float32 blocks added in
// double. One float32 accumulator per output was 1% off for 2^20 elements of 0.1.
TEST(ReduceSplit, SumsOverAnyDimsAreAccurate) {
  const int64_t n = int64_t{1} << 20;
  const double exact = static_cast<double>(0.1f) * static_cast<double>(n);
  auto check = [&](const Tensor& s, double want, const char* what) {
    for (double v : test::values(s)) EXPECT_NEAR(v, want, want * 1e-6) << what;
  };
  for (int threads : {1, 2}) {
    Threads t(threads);
    check(full({n, 3}, 0.1).sum({0}), exact, "sum over the outer dim");
    check(full({n, 3}, 0.1).mean({0}), 0.1f, "mean over the outer dim");
    check(full({1024, 1024, 3}, 0.1).sum({0, 1}), exact, "two outer dims");
    check(full({1024, 5, 1024, 3}, 0.1).sum({0, 2}), exact, "two outer dims, unmergeable");
    check(full({n, 6}, 0.1).slice(1, 0, 6, 2).sum({0}), exact, "a strided kept dim");
    check(full({3, n}, 0.1).sum({1}), exact, "the inner dim");
    check(full({n, 3}, 0.1).t().sum({1}), exact, "a transposed inner dim");
    check(full({n, 3}, 0.1).sum(), 3 * exact, "everything");
    // float64 sums are exact for these; 16-bit data accumulate in float32 too.
    Tensor h = full({n, 3}, 0.1).to(kBFloat16);
    const double hv = test::values(h.flatten().narrow(0, 0, 1))[0] * static_cast<double>(n);
    for (double v : test::values(h.sum({0}).to(kFloat64))) EXPECT_NEAR(v, hv, hv * 4e-3) << "bfloat16";
  }
}
