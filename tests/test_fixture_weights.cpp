// The C++ formula weights (fixture_weights.h) against the bits make_resnet_fixture.py recorded.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <sstream>

#include "fixture_weights.h"
#include "test_util.h"

namespace kiln::test {
namespace {

struct ChecksumLine {
  std::string name;
  Shape shape;
  int64_t numel = 0;
  uint64_t bits_sum = 0;
  std::vector<std::pair<int64_t, uint64_t>> probes;  // (flat index, float32 bits or int64 value)
};

// formula_checksums.txt: "name AxBxC numel bits_sum (index hexbits)..." per line, '#' comments.
std::vector<ChecksumLine> read_checksums(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  std::vector<ChecksumLine> lines;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream ss(line);
    ChecksumLine c;
    std::string shape;
    ss >> c.name >> shape >> c.numel >> c.bits_sum;
    if (shape != "scalar") {
      std::istringstream dims(shape);
      for (std::string d; std::getline(dims, d, 'x');) c.shape.push_back(std::stoll(d));
    }
    int64_t index;
    std::string hex;
    while (ss >> index >> hex) c.probes.emplace_back(index, std::stoull(hex, nullptr, 16));
    EXPECT_FALSE(ss.bad()) << line;
    lines.push_back(std::move(c));
  }
  return lines;
}

// The bit pattern of element i, as the Python script wrote it.
uint64_t element_bits(const Tensor& t, int64_t i) {
  if (t.dtype() == kInt64) return static_cast<uint64_t>(t.data_ptr<int64_t>()[i]);
  uint32_t b;
  std::memcpy(&b, t.data_ptr<float>() + i, sizeof b);
  return b;
}

// Every ResNet-18 state_dict entry and the input, all ~11.7M values, match PyTorch's bit for bit.
TEST(FixtureWeights, MatchesPythonBitForBit) {
  std::vector<ChecksumLine> lines = read_checksums(fixture_path("resnet/formula_checksums.txt"));
  ASSERT_EQ(lines.size(), 123u);  // 122 resnet18 state_dict entries + "input"
  for (const ChecksumLine& c : lines) {
    Tensor t = formula_tensor(c.name, c.shape);
    ASSERT_EQ(t.numel(), c.numel) << c.name;
    ASSERT_FALSE(c.probes.empty()) << c.name;
    ASSERT_EQ(t.dtype(), formula_ends_with(c.name, "num_batches_tracked") ? kInt64 : kFloat32) << c.name;
    uint64_t sum = 0;
    for (int64_t i = 0; i < t.numel(); ++i) sum += element_bits(t, i);
    EXPECT_EQ(sum, c.bits_sum) << c.name;
    for (auto [i, bits] : c.probes) EXPECT_EQ(element_bits(t, i), bits) << c.name << " element " << i;
  }
}

TEST(FixtureWeights, RulesAndRanges) {
  // Batch-norm statistics and gammas stay in their documented ranges; running_var is positive.
  for (double v : values(formula_tensor("bn1.running_var", {512}))) EXPECT_TRUE(v >= 0.375 && v <= 0.625) << v;
  for (double v : values(formula_tensor("bn1.weight", {512}))) EXPECT_TRUE(v >= 0.375 && v <= 0.625) << v;
  // A conv weight has the variance of He's init, 2 / fan_in (fan_in = 64 * 3 * 3 here).
  std::vector<double> w = values(formula_tensor("layer1.0.conv1.weight", {64, 64, 3, 3}));
  double sq = 0;
  for (double v : w) sq += v * v;
  EXPECT_NEAR(sq / static_cast<double>(w.size()), 2.0 / 576.0, 0.05 * 2.0 / 576.0);
  // Other dtypes hold the same float32-rounded values.
  Tensor f32 = formula_tensor("fc.weight", {10, 512});
  Tensor f64 = formula_tensor("fc.weight", {10, 512}, kFloat64);
  EXPECT_EQ(f64.dtype(), kFloat64);
  EXPECT_EQ(values(f32), values(f64));
  // Different names give different values.
  EXPECT_NE(values(formula_tensor("a.bias", {4})), values(formula_tensor("b.bias", {4})));
  // A state dict built from another one keeps its keys, shapes and dtypes.
  std::map<std::string, Tensor> like{{"bn.weight", zeros({3})}, {"bn.num_batches_tracked", zeros({}, kInt64)},
                                     {"lin.weight", zeros({2, 3}, kFloat64)}};
  auto sd = formula_state_dict(like);
  ASSERT_EQ(sd.size(), 3u);
  EXPECT_EQ(sd["lin.weight"].dtype(), kFloat64);
  EXPECT_EQ(sd["lin.weight"].shape(), (Shape{2, 3}));
  EXPECT_EQ(sd["bn.num_batches_tracked"].item<int64_t>(), 0);
  EXPECT_EQ(values(formula_state_dict({{"bn.weight", Shape{3}}})["bn.weight"]), values(sd["bn.weight"]));
}

TEST(FixtureWeights, UnknownNameIsAnError) {
  expect_error([] { formula_tensor("layer1.gamma", {4}); }, "[formula_scale] no formula for the name \"layer1.gamma\"");
}

}  // namespace
}  // namespace kiln::test
