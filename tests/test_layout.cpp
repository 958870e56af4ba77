// Memory layout: elementwise results, clone and *_like keep a dense input's dim order
// (channels-last, transposed), contiguous() is row-major, and gradients stored in .grad() are dense.
#include "test_util.h"

using namespace kiln;

namespace {
// Logical NCHW, memory NHWC.
Tensor channels_last(const Shape& nchw) {
  return randn({nchw[0], nchw[2], nchw[3], nchw[1]}).permute({0, 3, 1, 2});
}
const Shape kNhwcStrides{60, 1, 15, 3};  // for [2, 3, 4, 5]
}  // namespace

TEST(Layout, ElementwiseResultsKeepChannelsLast) {
  manual_seed(1);
  Tensor x = channels_last({2, 3, 4, 5});
  ASSERT_EQ(x.strides(), kNhwcStrides);
  Tensor bias = randn({3, 1, 1});
  Tensor y = relu(x * 2.0 + bias);
  EXPECT_EQ(y.strides(), kNhwcStrides);
  EXPECT_EQ(sigmoid(x).strides(), kNhwcStrides);
  EXPECT_EQ(where(x > 0, x, bias).strides(), kNhwcStrides);
  EXPECT_EQ((x > 0).strides(), kNhwcStrides);
  EXPECT_EQ(x.to(kFloat64).strides(), kNhwcStrides);
  // Values are those of the same computation on a row-major copy.
  Tensor xc = x.contiguous();
  EXPECT_TRUE(xc.is_contiguous());
  test::expect_close(y, test::values(relu(xc * 2.0 + bias)), {2, 3, 4, 5}, 0, 0);
}

TEST(Layout, TransposedInputsGiveTransposedResults) {
  Tensor a = arange(6, kFloat32).reshape({2, 3}).t();
  Tensor b = a + 1;
  EXPECT_EQ(b.strides(), a.strides());
  test::expect_close(b, {1, 4, 2, 5, 3, 6}, {3, 2});
  EXPECT_TRUE(b.contiguous().is_contiguous());
}

TEST(Layout, CloneAndLikeKeepTheLayout) {
  manual_seed(2);
  Tensor x = channels_last({2, 3, 4, 5});
  EXPECT_EQ(x.clone().strides(), kNhwcStrides);
  EXPECT_EQ(empty_like(x).strides(), kNhwcStrides);
  EXPECT_EQ(zeros_like(x).strides(), kNhwcStrides);
  EXPECT_EQ(ones_like(x, kFloat64).strides(), kNhwcStrides);
  // rand_like fills in logical order, whatever the layout.
  manual_seed(9);
  Tensor r = rand_like(x);
  manual_seed(9);
  Tensor r_rowmajor = rand({2, 3, 4, 5});
  EXPECT_EQ(r.strides(), kNhwcStrides);
  test::expect_close(r, test::values(r_rowmajor), {2, 3, 4, 5}, 0, 0);
}

TEST(Layout, NonDenseInputsGiveRowMajorResults) {
  Tensor base = arange(24, kFloat32).reshape({4, 6});
  Tensor sliced = base.slice(1, 0, 6, 2);  // gaps between elements
  EXPECT_TRUE((sliced * 2.0).is_contiguous());
  Tensor expanded = ones({1, 3}).expand({4, 3});
  EXPECT_TRUE((expanded + 0.0).is_contiguous());
  EXPECT_TRUE(expanded.clone().is_contiguous());
}

TEST(Layout, GradientsInGradAreDense) {
  // sum's backward broadcasts one value; .grad() must still own one element per entry.
  Tensor x = ones({3}).requires_grad_();
  x.sum().backward();
  Tensor g = x.grad();
  EXPECT_TRUE(g.is_contiguous());
  EXPECT_EQ(g.stride(0), 1);
  g.mul_(2.0);
  test::expect_close(x.grad(), {2, 2, 2}, {3});
  // A channels-last leaf gets a channels-last gradient, as in PyTorch.
  Tensor w = channels_last({2, 3, 4, 5}).detach().requires_grad_();
  (w * 3.0).sum().backward();
  EXPECT_EQ(w.grad().strides(), kNhwcStrides);
  test::expect_close(w.grad(), std::vector<double>(120, 3.0), {2, 3, 4, 5});
}

// Copies between layouts put every element where its indices say: row-major to channels-last and
// back, and 2-D transposes, with runs long enough for the CPU's tiled transposing copy (more than
// 512 elements) and sizes that leave partial tiles, with and without a change of dtype.
TEST(Layout, CopiesBetweenLayoutsPutEveryElementInPlace) {
  for (const Shape& s : {Shape{3, 5, 33, 17}, Shape{2, 700, 3, 7}, Shape{1, 1000, 1, 1}, Shape{2, 3, 4, 5}}) {
    SCOPED_TRACE(::testing::Message() << "shape " << s);
    const int64_t N = s[0], C = s[1], H = s[2], W = s[3];
    // Row-major to channels-last: element [n, c, h, w] (value its row-major index) lands at
    // n H W C + (h W + w) C + c.
    Tensor x = arange(N * C * H * W, kFloat32).reshape(s);
    Tensor y = x.contiguous(MemoryFormat::ChannelsLast);
    ASSERT_TRUE(y.is_contiguous(MemoryFormat::ChannelsLast));
    const float* yp = y.data_ptr<float>();
    int64_t bad = 0;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t c = 0; c < C; ++c)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t w = 0; w < W; ++w)
            bad += yp[n * H * W * C + (h * W + w) * C + c] != static_cast<float>(((n * C + c) * H + h) * W + w);
    EXPECT_EQ(bad, 0);
    // And back, into float64.
    Tensor z = empty(s, kFloat64);
    z.copy_(y);
    const double* zp = z.data_ptr<double>();
    bad = 0;
    for (int64_t i = 0; i < N * C * H * W; ++i) bad += zp[i] != static_cast<double>(i);
    EXPECT_EQ(bad, 0);
  }
  for (const auto& [R, C] : {std::pair<int64_t, int64_t>{600, 37}, {37, 600}, {1024, 1024}}) {
    Tensor t = arange(R * C, kInt64).reshape({R, C}).t().contiguous();  // [C, R]
    const int64_t* tp = t.data_ptr<int64_t>();
    int64_t bad = 0;
    for (int64_t i = 0; i < C; ++i)
      for (int64_t j = 0; j < R; ++j) bad += tp[i * R + j] != j * C + i;
    EXPECT_EQ(bad, 0) << R << " x " << C;
  }
}
