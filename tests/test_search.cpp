// searchsorted and bucketize: torch's positions (the values torch gives for the same calls, beside
// each), NaN and ties, dtypes, sorters, bad input, and on the stand-in GPU, no fallback.
#include <cmath>
#include <string>
#include <vector>

#include "backend/search_math.h"
#include "stand_in_device.h"
#include "test_util.h"

namespace kiln::test {
namespace {

std::vector<int64_t> ints(const Tensor& t) { return t.cpu().to_vector<int64_t>(); }

// The kernels' search itself (search_math.h), on the host.
TEST(SearchSorted, BinarySearchIsTorchs) {
  const float row[] = {1, 2, 2, 3, NAN};
  EXPECT_EQ((backend::search::bound<float>(row, 5, 2.0f, false)), 1);
  EXPECT_EQ((backend::search::bound<float>(row, 5, 2.0f, true)), 5);  // torch's answer too (the NaN at the end)
  EXPECT_EQ((backend::search::bound<float>(row, 4, 2.0f, true)), 3);
  EXPECT_EQ((backend::search::bound<float>(row, 5, NAN, false)), 5);
  EXPECT_EQ((backend::search::bound<float>(row, 0, 2.0f, false)), 0);
}

TEST(SearchSorted, PositionsAsTorch) {
  for (Device d : devices()) {
    const std::string where = d.str();
    const TensorOptions f = TensorOptions(kFloat32).device(d);
    const Tensor s = tensor({1.0f, 2.0f, 2.0f, 3.0f, NAN}, f);
    const Tensor v = tensor({NAN, 2.0f, 0.0f, 5.0f, -INFINITY, INFINITY}, f);
    EXPECT_EQ(ints(searchsorted(s, v)), (std::vector<int64_t>{5, 1, 0, 5, 0, 5})) << where;
    EXPECT_EQ(ints(searchsorted(s, v, false, true)), (std::vector<int64_t>{5, 5, 0, 5, 0, 5})) << where;
    EXPECT_EQ(ints(searchsorted(s.slice(0, 0, 4), v, false, false, "right")), (std::vector<int64_t>{4, 3, 0, 4, 0, 4}))
        << where;
    // A sequence per row; int64 sequences with int64 values, int32 out.
    const Tensor rows = tensor({1, 3, 5, 7, 2, 4, 6, 8}, TensorOptions(kInt64).device(d)).view({2, 4});
    const Tensor vals = tensor({3, 6, 9, 3, 6, 9}, TensorOptions(kInt64).device(d)).view({2, 3});
    EXPECT_EQ(ints(searchsorted(rows, vals)), (std::vector<int64_t>{1, 3, 4, 1, 2, 4})) << where;
    const Tensor r32 = searchsorted(rows, vals, true, true);
    EXPECT_EQ(r32.dtype(), kInt32) << where;
    EXPECT_EQ(ints(r32.to(kInt64)), (std::vector<int64_t>{2, 3, 4, 1, 3, 4})) << where;
    // Promotion: an int64 sequence searched for 2.5 compares in float.
    EXPECT_EQ(ints(searchsorted(tensor({1, 2, 3}, TensorOptions(kInt64).device(d)), tensor({2.5f}, f))),
              (std::vector<int64_t>{2}))
        << where;
    const Tensor scalar = searchsorted(tensor({1, 2, 3}, TensorOptions(kInt64).device(d)), 2.5);
    EXPECT_EQ(scalar.dim(), 0) << where;
    EXPECT_EQ(scalar.item<int64_t>(), 2) << where;
    // A sorter: the sequence read through it.
    const Tensor sorter = tensor({1, 2, 0}, TensorOptions(kInt64).device(d));
    EXPECT_EQ(ints(searchsorted(tensor({3.0f, 1.0f, 2.0f}, f), tensor({2.5f, 0.5f, 3.0f}, f), false, false, std::nullopt,
                                sorter)),
              (std::vector<int64_t>{2, 0, 2}))
        << where;
    // bucketize: values of any shape against 1-D boundaries.
    const Tensor b = bucketize(tensor({0.5f, 3.0f, 7.0f, 100.0f}, f).view({2, 2}), tensor({1.0f, 3.0f, 5.0f}, f));
    EXPECT_EQ(b.shape(), (Shape{2, 2})) << where;
    EXPECT_EQ(ints(b), (std::vector<int64_t>{0, 1, 3, 3})) << where;
    EXPECT_EQ(ints(bucketize(3.0, tensor({1.0f, 3.0f, 5.0f}, f), false, true)), (std::vector<int64_t>{2})) << where;
    // 16-bit, empty sequences and values.
    EXPECT_EQ(ints(searchsorted(tensor({1.0f, 2.0f, 3.0f}, f).to(kFloat16), tensor({2.5f}, f).to(kFloat16))),
              (std::vector<int64_t>{2}))
        << where;
    EXPECT_EQ(ints(searchsorted(empty({0}, f), tensor({2.5f}, f))), (std::vector<int64_t>{0})) << where;
    EXPECT_EQ(searchsorted(ones({2, 3}, f), empty({2, 0}, f)).shape(), (Shape{2, 0})) << where;
  }
}

// Against a search by definition (the count of smaller elements) on random sorted rows.
TEST(SearchSorted, MatchesCountsOnRandomRows) {
  const Tensor s = std::get<0>(sort(randint(0, 50, {4, 64}, kInt64).to(kFloat64), -1));
  const Tensor v = randint(-5, 55, {4, 300}, kInt64).to(kFloat64);
  const Tensor left = (s.unsqueeze(1) < v.unsqueeze(2)).sum({2}).to(kInt64);
  const Tensor right = (s.unsqueeze(1) <= v.unsqueeze(2)).sum({2}).to(kInt64);
  EXPECT_EQ(ints(searchsorted(s, v)), ints(left));
  EXPECT_EQ(ints(searchsorted(s, v, false, true)), ints(right));
}

TEST(SearchSorted, BadInputIsAnErrorNamingTheOp) {
  const Tensor s = tensor({1.0f, 2.0f, 3.0f});
  expect_error([&] { searchsorted(ones({2, 3}), ones({3, 1})); },
               "[searchsorted] boundaries tensor should be 1 dimension or the first N-1 dimensions of boundaries tensor "
               "and input value tensor must match, but we got boundaries tensor [2, 3] and input value tensor [3, 1]");
  expect_error([&] { searchsorted(s, ones({2}), false, true, "left"); },
               "[searchsorted] side and right can't be set to opposites");
  expect_error([&] { searchsorted(s, ones({2}), false, false, "middle"); },
               "[searchsorted] side can only be 'left' or 'right' but got middle");
  expect_error([&] { searchsorted(ones({2, 3}), 2.0); },
               "[searchsorted] input value can be a scalar only when boundaries tensor dimension is 1");
  expect_error([&] { searchsorted(full({}, 2.0), full({}, 2.0)); }, "[searchsorted] input value can be a scalar");
  expect_error([&] { searchsorted(s, tensor({2.5f}), false, false, std::nullopt, tensor({1, 2, 3}, kInt64)); },
               "[searchsorted] sorter index out of range: 3");
  expect_error([&] { searchsorted(s, tensor({2.5f}), false, false, std::nullopt, tensor({1, 2}, kInt64)); },
               "[searchsorted] boundary and sorter must have the same size");
  expect_error([&] { searchsorted(s, tensor({2.5f}), false, false, std::nullopt, tensor({1.0f, 2.0f, 0.0f})); },
               "[searchsorted] sorter must be a tensor of long dtype but got dtype float32");
  expect_error([&] { searchsorted(s.to(kBool), tensor({true})); }, "[searchsorted] bool");
  expect_error([&] { bucketize(tensor({1.0f}), ones({2, 2})); },
               "[bucketize] boundaries tensor must be 1 dimension, but got dim(2)");
}

TEST(SearchSorted, HasCudaKernels) {
  if (cuda::is_available()) GTEST_SKIP() << "a real GPU is present: the tests above run there";
  StandInCuda stand_in(StandInCuda::Kernels::CpuWhereCudaHasOne);
  if (stand_in.native_ops() == 0) GTEST_SKIP() << "built without CUDA kernels";
  const auto before = fallback_counts();
  const Device gpu = Device::cuda(0);
  const Tensor s = tensor({1.0f, 3.0f, 5.0f}).to(gpu);
  EXPECT_EQ(ints(searchsorted(s, tensor({0.0f, 3.0f, 9.0f}).to(gpu))), (std::vector<int64_t>{0, 1, 3}));
  EXPECT_EQ(ints(bucketize(tensor({3.0f}).to(gpu), s, true, true).to(kInt64)), (std::vector<int64_t>{2}));
  EXPECT_EQ(fallback_counts(), before) << "an op fell back to the CPU";
}

}  // namespace
}  // namespace kiln::test
