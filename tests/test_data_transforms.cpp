// Transforms checked by hand on small inputs, and the per-sample random stream's reproducibility.
#include <map>
#include <set>

#include "kiln/data/transforms.h"
#include "test_util.h"

namespace kiln::test {
namespace {

using data::SampleGenerator;
using data::transforms::Normalize;
using data::transforms::RandomCrop;
using data::transforms::RandomHorizontalFlip;

TEST(DataTransforms, SampleGeneratorIsCounterBased) {
  auto draw = [](uint64_t seed, uint64_t epoch, int64_t index) {
    SampleGenerator g(seed, epoch, index);
    std::vector<uint32_t> v;
    for (int i = 0; i < 9; ++i) v.push_back(g.next_u32());
    return v;
  };
  EXPECT_EQ(draw(1, 2, 3), draw(1, 2, 3));
  EXPECT_NE(draw(1, 2, 3), draw(1, 2, 4));
  EXPECT_NE(draw(1, 2, 3), draw(1, 3, 3));
  EXPECT_NE(draw(1, 2, 3), draw(2, 2, 3));
  std::set<uint32_t> distinct;
  for (uint32_t w : draw(5, 0, 0)) distinct.insert(w);
  EXPECT_EQ(distinct.size(), 9u);
  SampleGenerator g(0, 0, 0);
  std::vector<int64_t> hist(5, 0);
  for (int i = 0; i < 5000; ++i) {
    double u = g.uniform();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    int64_t r = g.randint(5);
    ASSERT_GE(r, 0);
    ASSERT_LT(r, 5);
    ++hist[static_cast<size_t>(r)];
  }
  for (int64_t h : hist) EXPECT_NEAR(h, 1000, 150);
  expect_error([] { SampleGenerator(0, 0, -1); }, "[SampleGenerator] sample index -1 out of range");
  expect_error([&] { g.randint(0); }, "[SampleGenerator] randint needs n > 0, got 0");
}

TEST(DataTransforms, NormalizePerChannel) {
  Tensor x = tensor({0.0f, 1.0f, 0.5f, 0.25f, 2.0f, 3.0f, -1.0f, 1.0f}).reshape({2, 2, 2});
  Normalize norm({0.5, 1.0}, {0.5, 2.0});
  expect_close(norm(x), {-1.0, 1.0, 0.0, -0.5, 0.5, 1.0, -1.0, 0.0}, {2, 2, 2});
  Normalize one({1.0}, {4.0});
  expect_close(one(x.to(kFloat64)), {-0.25, 0.0, -0.125, -0.1875, 0.25, 0.5, -0.5, 0.0}, {2, 2, 2});
  EXPECT_EQ(one(x.to(kFloat64)).dtype(), kFloat64);
  // A non-contiguous input is read in logical order.
  expect_close(norm(x.transpose(1, 2)), {-1.0, 0.0, 1.0, -0.5, 0.5, -1.0, 1.0, 0.0}, {2, 2, 2});
  expect_error([&] { Normalize({0.1, 0.2, 0.3}, {1, 1, 1})(x); }, "[Normalize] has 3 means but the input [2, 2, 2] has 2 channels");
  expect_error([] { Normalize({0.1}, {0.0}); }, "[Normalize] std must be nonzero");
  expect_error([] { Normalize({0.1}, {1e-50}); }, "[Normalize] std must be nonzero in float32, got 1e-50");
  expect_error([] { Normalize({0.1, 0.2}, {1.0}); }, "[Normalize] needs as many means as stds");
  expect_error([&] { norm(arange(4, kInt64).reshape({2, 2})); }, "[Normalize] expects a floating-point image, got int64");
}

// The channel dim of a batch [B, C, H, W] (or a clip [T, C, H, W]) is dim 1, as torchvision's
// dim -3, not dim 0: with B == C the batch was normalised per sample.
TEST(DataTransforms, NormalizeOfABatchIsPerChannel) {
  Normalize norm({0, 1, 2}, {1, 1, 1});
  expect_close(norm(ones({3, 3, 1, 1})), {1, 0, -1, 1, 0, -1, 1, 0, -1}, {3, 3, 1, 1});
  const Tensor clips = norm(ones({2, 2, 3, 1, 2}));  // [B, T, C, H, W]: C is dim 2
  for (int64_t c = 0; c < 3; ++c) EXPECT_EQ(values(clips.select(2, c)), std::vector<double>(8, 1.0 - c)) << c;
  // 16-bit images, computed in float32 and rounded once
  for (ScalarType dt : {kFloat16, kBFloat16}) {
    const Tensor y = norm(ones({3, 1, 2}, dt));
    EXPECT_EQ(y.dtype(), dt);
    EXPECT_EQ(values(y), (std::vector<double>{1, 1, 0, 0, -1, -1})) << dtype_name(dt);
  }
}

// The padded 3x3 input is
//   0 0 0 0 0
//   0 1 2 3 0
//   0 4 5 6 0
//   0 7 8 9 0
//   0 0 0 0 0
TEST(DataTransforms, RandomCropWithPadding) {
  Tensor x = arange(1, 10, 1, kFloat32).reshape({1, 3, 3});
  RandomCrop crop(3, 1);
  std::map<std::pair<int64_t, int64_t>, std::vector<double>> windows;
  for (int64_t i = 0; i < 200; ++i) {
    SampleGenerator g(0, 0, i), peek(0, 0, i);
    int64_t top = peek.randint(3), left = peek.randint(3);
    Tensor y = crop(x, g);
    ASSERT_EQ(y.shape(), (Shape{1, 3, 3}));
    windows[{top, left}] = values(y);
  }
  ASSERT_EQ(windows.size(), 9u);  // every offset occurs
  EXPECT_EQ((windows[{0, 0}]), (std::vector<double>{0, 0, 0, 0, 1, 2, 0, 4, 5}));
  EXPECT_EQ((windows[{1, 1}]), (std::vector<double>{1, 2, 3, 4, 5, 6, 7, 8, 9}));
  EXPECT_EQ((windows[{2, 1}]), (std::vector<double>{4, 5, 6, 7, 8, 9, 0, 0, 0}));
  EXPECT_EQ((windows[{0, 2}]), (std::vector<double>{0, 0, 0, 2, 3, 0, 5, 6, 0}));
  // Smaller window, no padding, two channels of uint8: top and left in {0, 1}.
  Tensor two = arange(18, kUInt8).reshape({2, 3, 3});
  std::set<std::vector<double>> seen;
  for (int64_t i = 0; i < 100; ++i) {
    SampleGenerator g(1, 0, i);
    Tensor y = RandomCrop(2)(two, g);
    ASSERT_EQ(y.dtype(), kUInt8);
    seen.insert(values(y));
  }
  EXPECT_EQ(seen.count({0, 1, 3, 4, 9, 10, 12, 13}), 1u);
  EXPECT_EQ(seen.count({4, 5, 7, 8, 13, 14, 16, 17}), 1u);
  EXPECT_EQ(seen.size(), 4u);
  SampleGenerator g(0, 0, 0);
  expect_error([&] { RandomCrop(6, 1)(x, g); }, "[RandomCrop] cannot cut 6x6 from shape [1, 3, 3] padded by 1");
  expect_error([&] { RandomCrop(2)(arange(3, kFloat32), g); }, "[RandomCrop] expects at least 2 dims, got shape [3]");
}

TEST(DataTransforms, RandomHorizontalFlip) {
  Tensor x = arange(6, kFloat32).reshape({1, 2, 3});
  SampleGenerator g(0, 0, 0);
  expect_close(RandomHorizontalFlip(1.0)(x, g), {2, 1, 0, 5, 4, 3}, {1, 2, 3});
  expect_close(RandomHorizontalFlip(0.0)(x, g), {0, 1, 2, 3, 4, 5}, {1, 2, 3});
  int flipped = 0;
  for (int64_t i = 0; i < 1000; ++i) {
    SampleGenerator gi(3, 1, i), again(3, 1, i);
    Tensor a = RandomHorizontalFlip()(x, gi), b = RandomHorizontalFlip()(x, again);
    EXPECT_EQ(values(a), values(b));
    flipped += values(a)[0] == 2.0;
  }
  EXPECT_GT(flipped, 400);
  EXPECT_LT(flipped, 600);
  expect_error([] { RandomHorizontalFlip(1.5); }, "[RandomHorizontalFlip] p must be in [0, 1], got 1.5");
}

TEST(DataTransforms, TransformDatasetAppliesInOrder) {
  Tensor data = arange(1, 10, 1, kFloat32).reshape({1, 1, 3, 3});
  data::TransformDataset ds(data::TensorDataset(data, arange(1, kInt64)),
                            {RandomHorizontalFlip(1.0), Normalize({1.0}, {2.0})});
  expect_close(ds.get(0).data, {1.0, 0.5, 0.0, 2.5, 2.0, 1.5, 4.0, 3.5, 3.0}, {1, 3, 3});
  // Random transforms: get(i, gen) depends only on the generator's (seed, epoch, index).
  data::TransformDataset random(data::TensorDataset(data, arange(1, kInt64)), {RandomCrop(3, 2)});
  SampleGenerator a(4, 2, 0), b(4, 2, 0);
  EXPECT_EQ(values(random.get(0, a).data), values(random.get(0, b).data));
  expect_error([&] { ds.get(1); }, "[TransformDataset] index 1 out of range for a dataset of size 1");
}

}  // namespace
}  // namespace kiln::test
