// MNIST / FashionMNIST: a fabricated directory, bad directories, and the real Fashion-MNIST files.
#include <filesystem>

#include "data_util.h"
#include "kiln/data/mnist.h"
#include "test_util.h"

namespace kiln::test {
namespace {

using data::FashionMNIST;
using data::MNIST;

constexpr uint32_t kSide = 28;

Bytes images(uint32_t n, uint32_t side = kSide) {
  Bytes pixels;
  for (uint32_t i = 0; i < n * side * side; ++i) pixels.push_back(static_cast<uint8_t>((i * 7 + 3) % 256));
  return idx_bytes(0x08, {n, side, side}, pixels);
}

Bytes labels(const Bytes& values) { return idx_bytes(0x08, {static_cast<uint32_t>(values.size())}, values); }

// A directory like Debian's: train files gzip-compressed, test files raw.
void fabricate(const TempDir& dir) {
  write_file(dir.file("train-images-idx3-ubyte.gz"), gzip(images(5)));
  write_file(dir.file("train-labels-idx1-ubyte.gz"), gzip(labels({3, 0, 9, 9, 1})));
  write_file(dir.file("t10k-images-idx3-ubyte"), images(2));
  write_file(dir.file("t10k-labels-idx1-ubyte"), labels({7, 2}));
}

TEST(DataMNIST, FabricatedDirectory) {
  TempDir dir;
  fabricate(dir);
  MNIST train(dir.str());
  ASSERT_EQ(train.size(), 5);
  EXPECT_TRUE(train.is_train());
  EXPECT_EQ(train.images().shape(), (Shape{5, 28, 28}));
  EXPECT_EQ(train.targets().to_vector<int64_t>(), (std::vector<int64_t>{3, 0, 9, 9, 1}));
  data::Example e = train.get(2);
  ASSERT_EQ(e.data.shape(), (Shape{1, 28, 28}));
  ASSERT_EQ(e.data.dtype(), kFloat32);
  EXPECT_EQ(e.target.dtype(), kInt64);
  EXPECT_EQ(e.target.dim(), 0);
  EXPECT_EQ(e.target.item<int64_t>(), 9);
  auto v = e.data.to_vector<float>();
  for (uint32_t i = 0; i < kSide * kSide; ++i) {
    uint32_t flat = 2 * kSide * kSide + i;
    ASSERT_EQ(v[i], static_cast<float>((flat * 7 + 3) % 256) / 255.0f) << i;
  }
  FashionMNIST test(dir.str(), /*train=*/false);
  ASSERT_EQ(test.size(), 2);
  EXPECT_EQ(test.get(0).target.item<int64_t>(), 7);
  EXPECT_EQ(test.get(1).target.item<int64_t>(), 2);
  expect_error([&] { test.get(2); }, "[MNIST] index 2 out of range for a dataset of size 2");
  expect_error([&] { test.get(-1); }, "[MNIST] index -1 out of range");
}

TEST(DataMNIST, BadDirectoriesRejected) {
  TempDir dir;
  expect_error([&] { MNIST(dir.file("missing")); }, "[MNIST] directory " + dir.file("missing") + " does not exist");
  write_file(dir.file("train-images-idx3-ubyte.gz"), gzip(images(3)));
  expect_error([&] { MNIST m(dir.str()); },
               "[MNIST] missing train-labels-idx1-ubyte (or train-labels-idx1-ubyte.gz) in directory " + dir.str());
  write_file(dir.file("train-labels-idx1-ubyte"), labels({1, 2}));
  expect_error([&] { MNIST m(dir.str()); }, "has 3 images but");
  write_file(dir.file("train-labels-idx1-ubyte"), labels({1, 10, 2}));
  expect_error([&] { MNIST m(dir.str()); }, "label 10 at index 1 is not below 10");
  write_file(dir.file("train-images-idx3-ubyte.gz"), gzip(images(3, 27)));
  expect_error([&] { MNIST m(dir.str()); }, "expected uint8 images [N, 28, 28], got uint8 [3, 27, 27]");
  write_file(dir.file("train-images-idx3-ubyte.gz"), {0x1f, 0x8b, 8, 0});
  expect_error([&] { MNIST m(dir.str()); }, "[read_idx] " + dir.file("train-images-idx3-ubyte.gz") + ": ");
}

// The real Fashion-MNIST from Debian's dataset-fashion-mnist package.
TEST(DataMNIST, RealFashionMNIST) {
  const std::string root = "/usr/share/datasets/fashion-mnist";
  if (!std::filesystem::exists(root + "/train-images-idx3-ubyte.gz"))
    GTEST_SKIP() << root << " is not installed (apt install dataset-fashion-mnist)";
  for (bool train : {true, false}) {
    FashionMNIST ds(root, train);
    int64_t n = train ? 60000 : 10000;
    ASSERT_EQ(ds.size(), n);
    std::vector<int64_t> histogram(10, 0);
    for (int64_t label : ds.targets().to_vector<int64_t>()) ++histogram[static_cast<size_t>(label)];
    for (int c = 0; c < 10; ++c) EXPECT_EQ(histogram[static_cast<size_t>(c)], n / 10) << "class " << c;
    data::Example e = ds.get(n - 1);
    EXPECT_EQ(e.data.shape(), (Shape{1, 28, 28}));
    EXPECT_GE(e.data.min().item<double>(), 0.0);
    EXPECT_LE(e.data.max().item<double>(), 1.0);
    EXPECT_GT(e.data.max().item<double>(), 0.0);
  }
}

}  // namespace
}  // namespace kiln::test
