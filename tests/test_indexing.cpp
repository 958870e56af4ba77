// Tensor::index and index_put_ (kiln/indexing.h): libtorch's index lists of integers, slices, None,
// Ellipsis, bools, integer tensors and masks, against the values torch gives for the same Python
// expressions (written beside each); views where torch gives views, gradients, bad input, and on
// the stand-in GPU, no fallback.
#include <string>
#include <vector>

#include "kiln/indexing.h"
#include "stand_in_device.h"
#include "test_util.h"

namespace kiln::test {
namespace {

using namespace kiln::indexing;

// x [2, 3, 4] of 0..23.
Tensor grid(Device d, ScalarType t = kFloat32) { return arange(24, TensorOptions(t).device(d)).view({2, 3, 4}); }
Tensor longs(std::vector<int64_t> v, Device d) { return tensor(v, TensorOptions(kInt64).device(d)); }

TEST(Indexing, BasicIndicesAreViews) {
  const Tensor x = grid(Device::cpu());
  const Tensor a = x.index({Slice(), Slice(1, None), 0});  // x[:, 1:, 0]
  EXPECT_EQ(a.shape(), (Shape{2, 2}));
  EXPECT_EQ(values(a), (std::vector<double>{4, 8, 16, 20}));
  EXPECT_EQ(a.storage(), x.storage());
  EXPECT_EQ(values(x.index({"...", -1})), (std::vector<double>{3, 7, 11, 15, 19, 23}));  // x[..., -1]
  const Tensor s = x.index({Slice(), Slice(), Slice(None, None, 3)});  // x[:, :, ::3]
  EXPECT_EQ(s.shape(), (Shape{2, 3, 2}));
  EXPECT_EQ(values(s), (std::vector<double>{0, 3, 4, 7, 8, 11, 12, 15, 16, 19, 20, 23}));
  EXPECT_EQ(x.index({None, 0, Ellipsis, None}).shape(), (Shape{1, 3, 4, 1}));  // x[None, 0, ..., None]
  EXPECT_EQ(x.index({Slice(-100, 100)}).shape(), (Shape{2, 3, 4}));           // bounds clamp, as Python's
  EXPECT_EQ(x.index({}).shape(), x.shape());
  EXPECT_EQ(x.index({true}).shape(), (Shape{1, 2, 3, 4}));
  EXPECT_EQ(x.index({false}).shape(), (Shape{0, 2, 3, 4}));
}

TEST(Indexing, AdvancedIndicesAsTorch) {
  for (Device d : devices()) {
    const std::string where = d.str();
    const Tensor x = grid(d);
    // x[:, [2, 0, -1]]
    EXPECT_EQ(values(x.index({Slice(), longs({2, 0, -1}, d)})),
              (std::vector<double>{8, 9, 10, 11, 0, 1, 2, 3, 8, 9, 10, 11, 20, 21, 22, 23, 12, 13, 14, 15, 20, 21, 22, 23}))
        << where;
    // x[[0, 1], :, [1, 3]]: not adjacent, so the index's dims go first
    Tensor r = x.index({longs({0, 1}, d), Slice(), longs({1, 3}, d)});
    EXPECT_EQ(r.shape(), (Shape{2, 3})) << where;
    EXPECT_EQ(values(r), (std::vector<double>{1, 5, 9, 15, 19, 23})) << where;
    // x[:, [1, 2], [[0], [3]]]: adjacent, broadcast to [2, 2] in place
    r = x.index({Slice(), longs({1, 2}, d), longs({0, 3}, d).view({2, 1})});
    EXPECT_EQ(r.shape(), (Shape{2, 2, 2})) << where;
    EXPECT_EQ(values(r), (std::vector<double>{4, 8, 7, 11, 16, 20, 19, 23})) << where;
    // x[[[0], [1]], :, [0, 2, 3]]
    r = x.index({longs({0, 1}, d).view({2, 1}), Slice(), tensor({0, 2, 3}, TensorOptions(kInt32).device(d))});
    EXPECT_EQ(r.shape(), (Shape{2, 3, 3})) << where;
    EXPECT_EQ(values(r), (std::vector<double>{0, 4, 8, 2, 6, 10, 3, 7, 11, 12, 16, 20, 14, 18, 22, 15, 19, 23}))
        << where;
    // x[0, torch.tensor(2)]: a 0-d index removes its dim
    r = x.index({0, full({}, 2, TensorOptions(kInt64).device(d))});
    EXPECT_EQ(r.shape(), (Shape{4})) << where;
    EXPECT_EQ(values(r), (std::vector<double>{8, 9, 10, 11})) << where;
    // Indices on the CPU index a tensor anywhere.
    EXPECT_EQ(values(x.index({longs({1}, Device::cpu()), 2, 3})), (std::vector<double>{23})) << where;
  }
}

TEST(Indexing, MasksAsTorch) {
  for (Device d : devices()) {
    const std::string where = d.str();
    const Tensor x = grid(d);
    const Tensor m = tensor(std::vector<bool>{true, false, true, false, false, true}, {2, 3}, TensorOptions(kBool).device(d));
    Tensor r = x.index({m});  // x[m]: the mask over the first two dims
    EXPECT_EQ(r.shape(), (Shape{3, 4})) << where;
    EXPECT_EQ(values(r), (std::vector<double>{0, 1, 2, 3, 8, 9, 10, 11, 20, 21, 22, 23})) << where;
    r = x.index({1, m.select(0, 0), Slice(1, 3)});  // x[1, m[0], 1:3]
    EXPECT_EQ(values(r), (std::vector<double>{13, 14, 21, 22})) << where;
    r = x.index({"...", tensor(std::vector<bool>{true, false, false, true}, {4}, TensorOptions(kBool).device(d))});
    EXPECT_EQ(r.shape(), (Shape{2, 3, 2})) << where;
    EXPECT_EQ(values(r), (std::vector<double>{0, 3, 4, 7, 8, 11, 12, 15, 16, 19, 20, 23})) << where;
    EXPECT_EQ(values(x.index({x > 20.0})), (std::vector<double>{21, 22, 23})) << where;
    EXPECT_EQ(x.index({full({}, true, TensorOptions(kBool).device(d))}).shape(), (Shape{1, 2, 3, 4})) << where;
    EXPECT_EQ(x.index({full({}, false, TensorOptions(kBool).device(d))}).shape(), (Shape{0, 2, 3, 4})) << where;
  }
}

TEST(Indexing, IndexPutAsTorch) {
  for (Device d : devices()) {
    const std::string where = d.str();
    const TensorOptions f = TensorOptions(kFloat32).device(d);
    // y.index_put_((i,), ones(3), accumulate=True): a position named twice gets both
    Tensor y = zeros({5}, f);
    y.index_put_({longs({0, 0, 2}, d)}, ones({3}, f), true);
    EXPECT_EQ(values(y), (std::vector<double>{2, 0, 1, 0, 0})) << where;
    // y[[1, 0], :, [3, 0]] = [[-1, -2, -3]]
    y = grid(d).clone();
    y.index_put_({longs({1, 0}, d), Slice(), longs({3, 0}, d)}, tensor({-1.0, -2.0, -3.0}, f).view({1, 3}));
    EXPECT_EQ(values(y), (std::vector<double>{-1, 1,  2,  3,  -2, 5,  6,  7,  -3, 9,  10, 11,
                                              12, 13, 14, -1, 16, 17, 18, -2, 20, 21, 22, -3}))
        << where;
    // y[:, 1] = 7 (a view, written in place)
    y = grid(d).clone();
    y.index_put_({Slice(), 1}, 7);
    EXPECT_EQ(values(y.index({Slice(), 1})), std::vector<double>(8, 7.0)) << where;
    EXPECT_EQ(values(y.index({Slice(), 0})), (std::vector<double>{0, 1, 2, 3, 12, 13, 14, 15})) << where;
    // y[m] = [100, 200, 300, 400] (a row per true element) and y[m] += 1 (one value: a where)
    const Tensor m = tensor(std::vector<bool>{true, false, true, false, false, true}, {2, 3}, TensorOptions(kBool).device(d));
    y = grid(d).clone();
    y.index_put_({m}, tensor({100.0, 200.0, 300.0, 400.0}, TensorOptions(kFloat64).device(d)));  // converted
    EXPECT_EQ(values(y.index({m})), (std::vector<double>{100, 200, 300, 400, 100, 200, 300, 400, 100, 200, 300, 400}))
        << where;
    EXPECT_EQ(values(y.index({1, 0})), (std::vector<double>{12, 13, 14, 15})) << where;
    y = grid(d).clone();
    y.index_put_({m}, ones({}, f), true);
    EXPECT_EQ(values(y.index({0, 0})), (std::vector<double>{1, 2, 3, 4})) << where;
    EXPECT_EQ(values(y.index({0, 1})), (std::vector<double>{4, 5, 6, 7})) << where;
    // y[y > 20] = 0, on integers
    Tensor yi = grid(d, kInt64).clone();
    yi.index_put_({yi > 20}, 0);
    EXPECT_EQ(yi.cpu().to_vector<int64_t>().back(), 0) << where;
    EXPECT_EQ(yi.sum().item<int64_t>(), 210) << where;
    // The out-of-place form leaves x as it was.
    const Tensor x = grid(d);
    const Tensor z = x.index_put({longs({0}, d), 0, 0}, full({}, -5.0, f));
    EXPECT_EQ(values(z.index({0, 0})), (std::vector<double>{-5, 1, 2, 3})) << where;
    EXPECT_EQ(values(x.index({0, 0})), (std::vector<double>{0, 1, 2, 3})) << where;
  }
}

// x[torch.tensor(1)] is x[1] (a view), and index_put_ drops values' leading dims of size 1, as torch.
TEST(Indexing, ZeroDimIntegerTensorsAndLeadingOnes) {
  Tensor x = arange(120, kFloat32).view({2, 3, 4, 5});
  const Tensor one = full({}, 1, kInt64);
  EXPECT_EQ(x.index({one, Slice(), tensor({1, 2}, kInt64)}).shape(), (Shape{3, 2, 5}));
  x.index({one}).fill_(5.0);
  EXPECT_EQ(x.index({1}).sum().item<double>(), 5.0 * 60);
  x.index_put_({tensor({0, 1}, kInt64)}, ones({1, 2, 3, 4, 5}));
  x.index_put_({0}, full({1, 3, 4, 5}, 2.0));
  EXPECT_EQ(x.sum().item<double>(), 2.0 * 60 + 60);
  expect_error([&] { x.index_put_({0}, ones({2, 3, 4, 5})); }, "[index_put_] shape mismatch");
}

// Without autograd, index_put_ writes the named elements in place (x keeps its memory), reading
// values that overlap x before it writes; a view that does not merge takes the copying path.
TEST(Indexing, IndexPutInPlace) {
  for (Device d : devices()) {
    const std::string where = d.str();
    Tensor x = arange(12, TensorOptions(kFloat32).device(d)).view({4, 3});
    const void* data = x.data_ptr();
    const uint64_t version = x.version();
    x.index_put_({longs({1, 0}, d)}, x.index({Slice(0, 2)}));  // swaps rows 0 and 1
    EXPECT_EQ(values(x), (std::vector<double>{3, 4, 5, 0, 1, 2, 6, 7, 8, 9, 10, 11})) << where;
    EXPECT_EQ(x.data_ptr(), data) << where;
    EXPECT_GT(x.version(), version) << where;
    x.index_put_({Slice(), longs({2, 2}, d)}, tensor({1.0f, 10.0f}, TensorOptions(kFloat32).device(d)), true);
    EXPECT_EQ(values(x.index({Slice(), 2})), (std::vector<double>{16, 13, 19, 22})) << where;
    // The transpose's indexed dims do not merge into a view: copied back, the same values.
    Tensor t = arange(12, TensorOptions(kFloat32).device(d)).view({4, 3}).t();
    t.index_put_({longs({0, 2}, d), longs({3, 1}, d)}, tensor({-1.0f, -2.0f}, TensorOptions(kFloat32).device(d)));
    EXPECT_EQ(values(t.t()), (std::vector<double>{0, 1, 2, 3, 4, -2, 6, 7, 8, -1, 10, 11})) << where;
    // and read one dim at a time (adjacent dims that do not merge)
    EXPECT_EQ(values(t.index({longs({0, 2, 1}, d), longs({3, 1, 0}, d)})), (std::vector<double>{-1, -2, 1})) << where;
  }
}

TEST(Indexing, Gradients) {
  for (Device d : devices()) {
    const std::string where = d.str();
    const TensorOptions f = TensorOptions(kFloat64).device(d);
    // index: each picked element's gradient, summed where picked twice (x[[0, 0, 1], :, [3, 3, 0]])
    Tensor x = arange(24, f).view({2, 3, 4}).requires_grad_();
    Tensor r = x.index({longs({0, 0, 1}, d), Slice(), longs({3, 3, 0}, d)});
    (r * arange(9, f).view({3, 3})).sum().backward();
    std::vector<double> want(24, 0.0);
    for (int j = 0; j < 3; ++j) want[0 * 12 + j * 4 + 3] = j + (3 + j), want[1 * 12 + j * 4 + 0] = 6 + j;
    EXPECT_EQ(values(x.grad()), want) << where;
    // index_put (out of place): x's gradient without the written elements, values' the gradient there
    x = arange(6, f).view({2, 3}).requires_grad_();
    Tensor v = tensor({10.0, 20.0}, f).requires_grad_();
    Tensor out = x.index_put({Slice(), 1}, v.view({2}));
    (out * (arange(6, f).view({2, 3}) + 1)).sum().backward();
    EXPECT_EQ(values(x.grad()), (std::vector<double>{1, 0, 3, 4, 0, 6})) << where;
    EXPECT_EQ(values(v.grad()), (std::vector<double>{2, 5})) << where;
    x.set_grad({});
    v.set_grad({});
    out = x.index_put({longs({1, 0}, d), longs({2, 2}, d)}, v);
    (out * (arange(6, f).view({2, 3}) + 1)).sum().backward();
    EXPECT_EQ(values(x.grad()), (std::vector<double>{1, 2, 0, 4, 5, 0})) << where;
    EXPECT_EQ(values(v.grad()), (std::vector<double>{6, 3})) << where;
    // A mask with one value: the value's gradient is the sum over the mask.
    Tensor one = full({}, 2.0, f).requires_grad_();
    x.set_grad({});
    out = x.index_put({x > 2.5}, one);
    out.sum().backward();
    EXPECT_EQ(values(one.grad()), (std::vector<double>{3})) << where;
    EXPECT_EQ(values(x.grad()), (std::vector<double>{1, 1, 1, 0, 0, 0})) << where;
  }
  const auto fn = [](const std::vector<Tensor>& in) {
    return in[0].index({tensor({2, 0, 2}, kInt64), Slice(None, None, 2)}).index_put({Slice(), 0}, in[1], true);
  };
  std::vector<Tensor> in = {randn({3, 4}, kFloat64).requires_grad_(), randn({3}, kFloat64).requires_grad_()};
  EXPECT_TRUE(autograd::gradcheck(fn, in));
  EXPECT_TRUE(autograd::gradgradcheck(fn, in));
  // Indexed dims apart, fewer picks than the first one's size: one dim at a time (index_each).
  const auto apart = [](const std::vector<Tensor>& v) {
    return v[0].index({tensor({2, 0}, kInt64), Slice(), tensor({4, -4}, kInt64)});
  };
  std::vector<Tensor> in3 = {randn({3, 4, 5}, kFloat64).requires_grad_()};
  EXPECT_EQ(apart(in3).shape(), (Shape{2, 4}));
  EXPECT_EQ(values(apart(in3)), values(stack({in3[0].select(0, 2).select(1, 4), in3[0].select(0, 0).select(1, 1)})));
  EXPECT_TRUE(autograd::gradcheck(apart, in3));
  EXPECT_TRUE(autograd::gradgradcheck(apart, in3));
}

TEST(Indexing, BadInputIsAnErrorNamingTheOp) {
  Tensor x = grid(Device::cpu());
  expect_error([&] { x.index({0, 0, 0, 0}); }, "[index] too many indices for a tensor of dimension 3");
  expect_error([&] { x.index({Ellipsis, 0, "..."}); }, "[index] an index can only have a single ellipsis");
  expect_error([&] { x.index({2}); }, "[index] index 2 is out of bounds for dimension 0 with size 2");
  expect_error([&] { x.index({Slice(), tensor({0, 3}, kInt64)}); },
               "[index] index 3 is out of bounds for dimension 1 with size 3");
  expect_error([&] { x.index({Slice(), tensor({-4}, kInt64)}); },
               "[index] index -4 is out of bounds for dimension 1 with size 3");
  expect_error([&] { x.index({tensor({0.0})}); }, "[index] tensors used as indices must be int64, int32 or bool");
  expect_error([&] { x.index({zeros({2}, kUInt8)}); }, "use a bool mask");
  expect_error([&] { x.index({zeros({3}, kBool)}); },
               "[index] the shape of the mask [3] at index 0 does not match the shape of the indexed tensor [2, 3, 4] "
               "at index 0");
  expect_error([&] { x.index({tensor({0, 1}, kInt64), tensor({0, 1, 2}, kInt64)}); }, "[index]");
  expect_error([&] { x.index({Slice(0, 2, 0)}); }, "[index] a slice's step must be greater than zero");
  expect_error([&] { x.index({Tensor()}); }, "[index] an index tensor is undefined");
  expect_error([&] { indexing::TensorIndex bad("x"); }, "[index] the only string index is \"...\"");
  expect_error([&] { x.index_put_({tensor({0, 1}, kInt64)}, zeros({3})); },
               "[index_put_] shape mismatch: value tensor of shape [3] cannot be broadcast to indexing result of "
               "shape [2, 3, 4]");
  expect_error([&] { x.index_put_({0}, zeros({2, 3, 4})); }, "[index_put_] shape mismatch");
  expect_error([&] { x.index_put_({0}, 1e40); }, "[index_put_]");
  Tensor leaf = zeros({3}).requires_grad_();
  expect_error([&] { leaf.index_put_({0}, 1); }, "[index_put_] a leaf tensor that requires grad");
}

// On the stand-in GPU indexing runs on CUDA kernels (no fallback), forward and backward.
TEST(Indexing, HaveCudaKernels) {
  if (cuda::is_available()) GTEST_SKIP() << "a real GPU is present: the tests above run there";
  StandInCuda stand_in(StandInCuda::Kernels::CpuWhereCudaHasOne);
  if (stand_in.native_ops() == 0) GTEST_SKIP() << "built without CUDA kernels";
  const auto before = fallback_counts();
  const Device gpu = Device::cuda(0);
  Tensor x = randn({3, 4}).to(gpu).requires_grad_();
  const Tensor i = tensor({2, 0}, kInt64).to(gpu);
  Tensor y = x.index({i, Slice(1, None)}).sum() + x.index({x > 0.0}).sum() +
             x.index_put({Slice(), i}, full({}, 1.0, kFloat32).to(gpu), true).sum();
  y.backward();
  EXPECT_EQ(x.grad().device(), gpu);
  Tensor z = zeros({4}).to(gpu);
  z.index_put_({z == 0.0}, 3.0);
  z.index_put_({tensor({1, 3}, kInt64).to(gpu)}, tensor({1.0f, 2.0f}).to(gpu));
  z.index_put_({tensor({3}, kInt64).to(gpu)}, full({}, 1.0f).to(gpu), true);
  EXPECT_EQ(values(z), (std::vector<double>{3, 1, 3, 3}));
  EXPECT_EQ(fallback_counts(), before) << "an op fell back to the CPU";
  // An out-of-range index on a device is reported by the kernel that reads it (here the CPU's, at
  // once; a GPU's at the next synchronising call).
  expect_error([&] { x.detach().index({tensor({3}, kInt64).to(gpu)}).cpu(); }, "is out of range");
}

}  // namespace
}  // namespace kiln::test
