// Tensor basics: factories and their dtypes, metadata, views sharing storage, copies and
// conversions, random numbers, printing, memory statistics, threads and devices.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <sstream>

#include "test_util.h"

using namespace kiln;
using test::expect_close;
using test::expect_error;
using test::values;

namespace {

const ScalarType kAllDtypes[] = {kBool, kUInt8, kInt32, kInt64, kFloat16, kBFloat16, kFloat32, kFloat64};

bool shares_storage(const Tensor& a, const Tensor& b) { return a.storage().get() == b.storage().get(); }

// Restores the thread count a test changed.
struct ThreadGuard {
  int saved = get_num_threads();
  ~ThreadGuard() { set_num_threads(saved); }
};

// Lifts a memory limit a test set, even when an assertion fails.
struct LimitGuard {
  ~LimitGuard() { set_memory_limit(Device::cpu(), 0); }
};

}  // namespace

// ---------------------------------------------------------------- factories

TEST(TensorFactory, InitializerListsGivePyTorchDtypes) {
  Tensor f = tensor({1.0, 2.5, -3.0});
  EXPECT_EQ(f.dtype(), kFloat32);
  expect_close(f, {1.0, 2.5, -3.0}, {3});

  Tensor ff = tensor({1.5f, 2.0f});
  EXPECT_EQ(ff.dtype(), kFloat32);
  expect_close(ff, {1.5, 2.0}, {2});

  Tensor i = tensor({1, 2, 3});
  EXPECT_EQ(i.dtype(), kInt64);
  EXPECT_EQ(i.to_vector<int64_t>(), (std::vector<int64_t>{1, 2, 3}));

  Tensor b = tensor({true, false, true});
  EXPECT_EQ(b.dtype(), kBool);
  expect_close(b, {1, 0, 1}, {3});

  // Options override the natural dtype.
  Tensor d = tensor({1.0, 2.0}, kFloat64);
  EXPECT_EQ(d.dtype(), kFloat64);
  Tensor id = tensor({1, 2}, kFloat32);
  EXPECT_EQ(id.dtype(), kFloat32);
  expect_close(id, {1, 2}, {2});
  Tensor fi = tensor({1.7, -1.7}, kInt32);
  EXPECT_EQ(fi.dtype(), kInt32);
  expect_close(fi, {1, -1}, {2});
}

TEST(TensorFactory, NestedInitializerLists) {
  Tensor f = tensor({{1.0, 2.0, 3.0}, {4.0, 5.0, 6.0}});
  EXPECT_EQ(f.dtype(), kFloat32);
  expect_close(f, {1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_TRUE(f.is_contiguous());

  Tensor ff = tensor({{1.0f, 2.0f}, {3.0f, 4.0f}});
  EXPECT_EQ(ff.dtype(), kFloat32);
  expect_close(ff, {1, 2, 3, 4}, {2, 2});

  Tensor i = tensor({{1, 2}, {3, 4}, {5, 6}});
  EXPECT_EQ(i.dtype(), kInt64);
  expect_close(i, {1, 2, 3, 4, 5, 6}, {3, 2});

  Tensor d = tensor({{1, 2}, {3, 4}}, kFloat64);
  EXPECT_EQ(d.dtype(), kFloat64);
  expect_close(d, {1, 2, 3, 4}, {2, 2});

  expect_error([] { tensor({{1.0, 2.0}, {3.0}}); }, "[tensor]");
  expect_error([] { tensor({{1, 2}, {3}}); }, "rows have different lengths");
}

TEST(TensorFactory, FromVectorsWithAndWithoutShape) {
  Tensor f = tensor(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(f.dtype(), kFloat32);
  expect_close(f, {1, 2, 3, 4, 5, 6}, {2, 3});

  // A typed container keeps its element type.
  Tensor d = tensor(std::vector<double>{0.5, 1.5});
  EXPECT_EQ(d.dtype(), kFloat64);
  expect_close(d, {0.5, 1.5}, {2});
  EXPECT_EQ(tensor(std::vector<int64_t>{1, 2}).dtype(), kInt64);
  EXPECT_EQ(tensor(std::vector<int32_t>{1, 2}).dtype(), kInt32);
  EXPECT_EQ(tensor(std::vector<uint8_t>{1, 2}).dtype(), kUInt8);
  EXPECT_EQ(tensor(std::vector<bool>{true, false}).dtype(), kBool);
  EXPECT_EQ(tensor(std::vector<Half>{Half(1.5f)}).dtype(), kFloat16);
  EXPECT_EQ(tensor(std::vector<BFloat16>{BFloat16(1.5f)}).dtype(), kBFloat16);
  expect_close(tensor(std::vector<Half>{Half(1.5f), Half(-2.0f)}), {1.5, -2.0}, {2});

  Tensor conv = tensor(std::vector<double>{1.25, 2.5, 3.75, 5}, {2, 2}, kFloat32);
  EXPECT_EQ(conv.dtype(), kFloat32);
  expect_close(conv, {1.25, 2.5, 3.75, 5}, {2, 2});

  Tensor b = tensor(std::vector<bool>{true, false, false, true}, {2, 2});
  EXPECT_EQ(b.dtype(), kBool);
  expect_close(b, {1, 0, 0, 1}, {2, 2});

  Tensor empty_vec = tensor(std::vector<float>{}, {0, 3});
  EXPECT_EQ(empty_vec.shape(), (Shape{0, 3}));
  EXPECT_EQ(empty_vec.numel(), 0);

  expect_error([] { tensor(std::vector<float>{1, 2, 3}, {2, 2}); }, "[tensor] shape [2, 2] needs 4 values, got 3");
}

TEST(TensorFactory, ScalarTensor) {
  Tensor f = scalar_tensor(2.5);
  EXPECT_EQ(f.dim(), 0);
  EXPECT_EQ(f.shape(), Shape{});
  EXPECT_EQ(f.numel(), 1);
  EXPECT_EQ(f.dtype(), kFloat32);
  EXPECT_EQ(f.item<double>(), 2.5);

  Tensor i = scalar_tensor(7);
  EXPECT_EQ(i.dtype(), kInt64);
  EXPECT_EQ(i.item<int64_t>(), 7);

  Tensor b = scalar_tensor(true);
  EXPECT_EQ(b.dtype(), kBool);
  EXPECT_TRUE(b.item<bool>());

  Tensor d = scalar_tensor(3, kFloat64);
  EXPECT_EQ(d.dtype(), kFloat64);
  EXPECT_EQ(d.item<double>(), 3.0);
}

TEST(TensorFactory, ZerosOnesFullEmpty) {
  Tensor z = zeros({2, 3});
  EXPECT_EQ(z.dtype(), kFloat32);
  expect_close(z, std::vector<double>(6, 0.0), {2, 3});

  Tensor o = ones({4}, kInt32);
  EXPECT_EQ(o.dtype(), kInt32);
  expect_close(o, {1, 1, 1, 1}, {4});

  // full takes its dtype from the value, as PyTorch does.
  EXPECT_EQ(full({2}, 1.5).dtype(), kFloat32);
  EXPECT_EQ(full({2}, 7).dtype(), kInt64);
  EXPECT_EQ(full({2}, true).dtype(), kBool);
  expect_close(full({2, 2}, -4.5, kFloat64), {-4.5, -4.5, -4.5, -4.5}, {2, 2});
  expect_close(full({3}, 7), {7, 7, 7}, {3});

  Tensor e = empty({3, 5}, kFloat64);
  EXPECT_EQ(e.shape(), (Shape{3, 5}));
  EXPECT_EQ(e.dtype(), kFloat64);
  EXPECT_TRUE(e.is_contiguous());

  Tensor none = empty({0, 4});
  EXPECT_EQ(none.numel(), 0);
  EXPECT_EQ(none.nbytes(), 0u);

  Tensor zs = zeros({});
  EXPECT_EQ(zs.dim(), 0);
  EXPECT_EQ(zs.numel(), 1);
  EXPECT_EQ(zs.item<double>(), 0.0);

  Tensor g = zeros({2}, TensorOptions().requires_grad(true));
  EXPECT_TRUE(g.requires_grad());
  EXPECT_TRUE(g.is_leaf());
}

TEST(TensorFactory, EmptyStrided) {
  Tensor t = empty_strided({2, 3}, {1, 2});
  EXPECT_EQ(t.shape(), (Shape{2, 3}));
  EXPECT_EQ(t.strides(), (Shape{1, 2}));
  EXPECT_FALSE(t.is_contiguous());
  EXPECT_GE(t.storage()->nbytes, 6 * sizeof(float));
  t.fill_(3.0);
  expect_close(t, std::vector<double>(6, 3.0), {2, 3});

  Tensor c = empty_strided({2, 3}, {3, 1}, kInt64);
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_EQ(c.dtype(), kInt64);

  expect_error([] { empty_strided({2, 3}, {1}); }, "[empty_strided]");
}

TEST(TensorFactory, ArangeIntsFloatsAndNegativeSteps) {
  Tensor a = arange(5);
  EXPECT_EQ(a.dtype(), kInt64);
  EXPECT_EQ(a.to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 2, 3, 4}));

  Tensor b = arange(2, 6);
  EXPECT_EQ(b.dtype(), kInt64);
  expect_close(b, {2, 3, 4, 5}, {4});

  Tensor c = arange(0, 10, 3);
  expect_close(c, {0, 3, 6, 9}, {4});

  Tensor f = arange(0.0, 1.0, 0.25);
  EXPECT_EQ(f.dtype(), kFloat32);
  expect_close(f, {0, 0.25, 0.5, 0.75}, {4});

  // A floating step alone makes the result floating.
  Tensor fs = arange(0, 1, 0.3);
  EXPECT_EQ(fs.dtype(), kFloat32);
  expect_close(fs, {0, 0.3, 0.6, 0.9}, {4});

  Tensor down = arange(5, 0, -1);
  EXPECT_EQ(down.dtype(), kInt64);
  expect_close(down, {5, 4, 3, 2, 1}, {5});

  Tensor fdown = arange(1.0, -1.0, -0.5);
  EXPECT_EQ(fdown.dtype(), kFloat32);
  expect_close(fdown, {1.0, 0.5, 0.0, -0.5}, {4});

  Tensor d = arange(4, kFloat64);
  EXPECT_EQ(d.dtype(), kFloat64);
  expect_close(d, {0, 1, 2, 3}, {4});

  Tensor none = arange(3, 3);
  EXPECT_EQ(none.shape(), Shape{0});

  expect_error([] { arange(0, 5, -1); }, "[arange]");
  expect_error([] { arange(0, 5, 0); }, "[arange] step must be nonzero");
}

TEST(TensorFactory, Linspace) {
  Tensor a = linspace(0, 1, 5);
  EXPECT_EQ(a.dtype(), kFloat32);
  expect_close(a, {0, 0.25, 0.5, 0.75, 1}, {5});

  Tensor down = linspace(10, 0, 3, kFloat64);
  EXPECT_EQ(down.dtype(), kFloat64);
  expect_close(down, {10, 5, 0}, {3});

  // The end point is exact even when the step is not representable.
  Tensor third = linspace(0, 1, 4, kFloat64);
  EXPECT_EQ(third.to_vector<double>().back(), 1.0);
  expect_close(third, {0, 1.0 / 3, 2.0 / 3, 1}, {4}, 1e-12, 1e-12);

  expect_close(linspace(2, 5, 1), {2}, {1});
  EXPECT_EQ(linspace(0, 1, 0).shape(), Shape{0});
}

TEST(TensorFactory, EyeSquareAndRectangular) {
  Tensor i3 = eye(3);
  EXPECT_EQ(i3.dtype(), kFloat32);
  expect_close(i3, {1, 0, 0, 0, 1, 0, 0, 0, 1}, {3, 3});

  expect_close(eye(2, 4), {1, 0, 0, 0, 0, 1, 0, 0}, {2, 4});
  expect_close(eye(3, 2), {1, 0, 0, 1, 0, 0}, {3, 2});

  Tensor il = eye(2, std::nullopt, kInt64);
  EXPECT_EQ(il.dtype(), kInt64);
  expect_close(il, {1, 0, 0, 1}, {2, 2});

  EXPECT_EQ(eye(0).shape(), (Shape{0, 0}));
}

TEST(TensorFactory, RandomFactories) {
  manual_seed(1);
  Tensor r = rand({4, 5});
  EXPECT_EQ(r.dtype(), kFloat32);
  EXPECT_EQ(r.shape(), (Shape{4, 5}));
  for (double v : values(r)) {
    EXPECT_GE(v, 0.0);
    EXPECT_LT(v, 1.0);
  }
  EXPECT_EQ(rand({3}, kFloat64).dtype(), kFloat64);

  Tensor n = randn({3, 2});
  EXPECT_EQ(n.dtype(), kFloat32);
  EXPECT_EQ(n.shape(), (Shape{3, 2}));

  Tensor ri = randint(-3, 4, {2000});
  EXPECT_EQ(ri.dtype(), kInt64);
  std::vector<int64_t> iv = ri.to_vector<int64_t>();
  for (int64_t v : iv) {
    EXPECT_GE(v, -3);
    EXPECT_LT(v, 4);
  }
  for (int64_t want = -3; want < 4; ++want)
    EXPECT_NE(std::find(iv.begin(), iv.end(), want), iv.end()) << "value " << want << " never drawn";

  EXPECT_EQ(randint(0, 10, {3}, kInt32).dtype(), kInt32);
}

TEST(TensorFactory, LikeFactoriesCopyShapeAndDtype) {
  Tensor x = zeros({2, 3}, kFloat64);
  for (const Tensor& t : {empty_like(x), zeros_like(x), ones_like(x), full_like(x, 2.5), rand_like(x), randn_like(x)}) {
    EXPECT_EQ(t.shape(), (Shape{2, 3}));
    EXPECT_EQ(t.dtype(), kFloat64);
    EXPECT_EQ(t.device(), Device::cpu());
    EXPECT_FALSE(shares_storage(t, x));
  }
  expect_close(ones_like(x), std::vector<double>(6, 1.0), {2, 3});
  expect_close(full_like(x, 2.5), std::vector<double>(6, 2.5), {2, 3});
  for (double v : values(rand_like(x))) {
    EXPECT_GE(v, 0.0);
    EXPECT_LT(v, 1.0);
  }

  Tensor xi = tensor({1, 2, 3});
  EXPECT_EQ(zeros_like(xi).dtype(), kInt64);
  EXPECT_EQ(full_like(xi, 7).dtype(), kInt64);
  // Options replace the dtype.
  Tensor zi = zeros_like(x, kInt32);
  EXPECT_EQ(zi.dtype(), kInt32);
  EXPECT_EQ(zi.shape(), (Shape{2, 3}));
  // The like-tensor's shape is used even when it is not contiguous.
  EXPECT_EQ(ones_like(zeros({2, 5}).t()).shape(), (Shape{5, 2}));
}

// ---------------------------------------------------------------- metadata

TEST(TensorMeta, ContiguousTensor) {
  Tensor x = zeros({2, 3, 4});
  EXPECT_EQ(x.shape(), (Shape{2, 3, 4}));
  EXPECT_EQ(x.sizes(), (Shape{2, 3, 4}));
  EXPECT_EQ(x.strides(), (Shape{12, 4, 1}));
  EXPECT_EQ(x.dim(), 3);
  EXPECT_EQ(x.numel(), 24);
  EXPECT_EQ(x.dtype(), kFloat32);
  EXPECT_EQ(x.scalar_type(), kFloat32);
  EXPECT_EQ(x.device(), Device::cpu());
  EXPECT_TRUE(x.device().is_cpu());
  EXPECT_TRUE(x.is_contiguous());
  EXPECT_EQ(x.storage_offset(), 0);
  EXPECT_EQ(x.element_size(), 4u);
  EXPECT_EQ(x.nbytes(), 96u);
  EXPECT_EQ(x.size(-1), 4);
  EXPECT_EQ(x.size(0), 2);
  EXPECT_EQ(x.stride(1), 4);
  EXPECT_EQ(x.stride(-3), 12);
  EXPECT_TRUE(x.is_floating_point());
  EXPECT_TRUE(x.defined());
  EXPECT_FALSE(Tensor().defined());
  expect_error([&] { x.size(3); }, "[size]");
  expect_error([&] { x.stride(-4); }, "[stride]");
}

TEST(TensorMeta, ViewMetadata) {
  Tensor x = zeros({2, 3, 4}, kFloat64);
  Tensor t = x.transpose(0, 2);
  EXPECT_EQ(t.shape(), (Shape{4, 3, 2}));
  EXPECT_EQ(t.strides(), (Shape{1, 4, 12}));
  EXPECT_FALSE(t.is_contiguous());
  EXPECT_EQ(t.nbytes(), 24u * 8u);

  Tensor s = x.select(0, 1).slice(0, 1);
  EXPECT_EQ(s.shape(), (Shape{2, 4}));
  EXPECT_EQ(s.storage_offset(), 12 + 4);
  EXPECT_TRUE(s.is_contiguous());
  EXPECT_EQ(s.element_size(), 8u);

  // Size-1 dims do not affect contiguity.
  EXPECT_TRUE(zeros({3, 1, 4}).transpose(0, 1).is_contiguous());
}

TEST(TensorMeta, ElementSizesPerDtype) {
  const size_t sizes[] = {1, 1, 4, 8, 2, 2, 4, 8};
  const char* names[] = {"bool", "uint8", "int32", "int64", "float16", "bfloat16", "float32", "float64"};
  for (int i = 0; i < kNumScalarTypes; ++i) {
    Tensor t = zeros({3}, kAllDtypes[i]);
    EXPECT_EQ(t.element_size(), sizes[i]) << names[i];
    EXPECT_EQ(t.nbytes(), 3 * sizes[i]) << names[i];
    EXPECT_STREQ(dtype_name(t.dtype()), names[i]);
    EXPECT_EQ(t.is_floating_point(), i >= 4) << names[i];
  }
}

// ---------------------------------------------------------------- views

TEST(TensorView, ViewSharesStorageAndInfersMinusOne) {
  Tensor a = arange(12.0);
  EXPECT_EQ(a.dtype(), kFloat32);
  Tensor v = a.view({3, 4});
  EXPECT_TRUE(shares_storage(v, a));
  EXPECT_EQ(v.strides(), (Shape{4, 1}));
  expect_close(v.view({-1, 6}), values(a), {2, 6});
  expect_close(a.view({2, -1, 2}), values(a), {2, 3, 2});
  EXPECT_EQ(a.view({12, 1, -1}).shape(), (Shape{12, 1, 1}));

  v.select(0, 1).select(0, 2).fill_(100.0);  // element 6 of a
  EXPECT_EQ(values(a)[6], 100.0);
  a.select(0, 11).fill_(-1.0);
  EXPECT_EQ(values(v)[11], -1.0);

  // 0-d to 1-element and back.
  Tensor s = scalar_tensor(5.0);
  EXPECT_EQ(s.view({1, 1}).shape(), (Shape{1, 1}));
  EXPECT_EQ(s.view({1}).view({}).dim(), 0);
}

TEST(TensorView, ViewOfANonContiguousTensorThatCanStillBeViewed) {
  // Every other row: strides [8, 1]; the last dim can still be split.
  Tensor base = arange(16).view({4, 4});
  Tensor rows = base.slice(0, 0, 4, 2);
  EXPECT_FALSE(rows.is_contiguous());
  Tensor v = rows.view({2, 2, 2});
  EXPECT_TRUE(shares_storage(v, base));
  EXPECT_EQ(v.strides(), (Shape{8, 2, 1}));
  expect_close(v, {0, 1, 2, 3, 8, 9, 10, 11}, {2, 2, 2});
  v.select(2, 1).fill_(-5);  // odd columns of rows 0 and 2
  expect_close(base.select(0, 2), {8, -5, 10, -5}, {4});

  // A permuted tensor whose last dim is split.
  Tensor p = arange(24).view({2, 3, 4}).permute({1, 0, 2});
  Tensor pv = p.view({3, 2, 2, 2});
  EXPECT_EQ(pv.strides(), (Shape{4, 12, 2, 1}));
  EXPECT_EQ(values(pv), values(p.contiguous()));

  // Merging across the gap is impossible.
  expect_error([&] { rows.view({8}); }, "reshape");
}

TEST(TensorView, ReshapeViewsWhenItCanAndCopiesWhenItMust) {
  Tensor a = arange(6.0);
  Tensor r = a.reshape({2, 3});
  EXPECT_TRUE(shares_storage(r, a));
  expect_close(r.reshape({-1}), {0, 1, 2, 3, 4, 5}, {6});

  Tensor t = r.t();  // [3, 2], not viewable as [6]
  Tensor flat = t.reshape({6});
  EXPECT_FALSE(shares_storage(flat, a));
  expect_close(flat, {0, 3, 1, 4, 2, 5}, {6});
  EXPECT_TRUE(flat.is_contiguous());
  flat.fill_(9.0);
  expect_close(a, {0, 1, 2, 3, 4, 5}, {6});  // the copy is independent

  Tensor rows = arange(16).view({4, 4}).slice(0, 0, 4, 2);
  expect_close(rows.reshape({8}), {0, 1, 2, 3, 8, 9, 10, 11}, {8});
  EXPECT_EQ(reshape(a, {3, -1}).shape(), (Shape{3, 2}));
}

TEST(TensorView, PermuteTransposeT) {
  Tensor a = arange(24).view({2, 3, 4});
  Tensor p = a.permute({2, 0, 1});
  EXPECT_EQ(p.shape(), (Shape{4, 2, 3}));
  EXPECT_EQ(p.strides(), (Shape{1, 12, 4}));
  EXPECT_TRUE(shares_storage(p, a));
  // p[i][j][k] = a[j][k][i]
  EXPECT_EQ(p[3][1][2].item<int64_t>(), a[1][2][3].item<int64_t>());
  Tensor pn = a.permute({-1, 0, 1});
  EXPECT_EQ(pn.strides(), p.strides());

  Tensor t = a.transpose(0, -1);
  EXPECT_EQ(t.shape(), (Shape{4, 3, 2}));
  t[0][0][1].fill_(-7);  // a[1][0][0]
  EXPECT_EQ(a[1][0][0].item<int64_t>(), -7);

  Tensor m = tensor({{1, 2, 3}, {4, 5, 6}});
  Tensor mt = m.t();
  expect_close(mt, {1, 4, 2, 5, 3, 6}, {3, 2});
  EXPECT_TRUE(shares_storage(mt, m));
  EXPECT_EQ(tensor({1, 2}).t().shape(), Shape{2});  // rank 1: unchanged
  EXPECT_EQ(transpose(m, 1, 0).shape(), (Shape{3, 2}));
  EXPECT_EQ(permute(m, {1, 0}).strides(), (Shape{1, 3}));
}

TEST(TensorView, SliceBoundsAndSteps) {
  Tensor x = arange(10);
  expect_close(x.slice(0, 2, 5), {2, 3, 4}, {3});
  expect_close(x.slice(0, -3), {7, 8, 9}, {3});
  expect_close(x.slice(0, 2, 100), {2, 3, 4, 5, 6, 7, 8, 9}, {8});
  expect_close(x.slice(0, -100, 3), {0, 1, 2}, {3});
  expect_close(x.slice(0, 1, 8, 3), {1, 4, 7}, {3});
  expect_close(x.slice(0, std::nullopt, std::nullopt, 4), {0, 4, 8}, {3});
  expect_close(x.slice(0, 1, -1, 2), {1, 3, 5, 7}, {4});
  EXPECT_EQ(x.slice(0, 5, 2).shape(), Shape{0});
  EXPECT_EQ(x.slice(0, 20, 30).shape(), Shape{0});

  Tensor s = x.slice(0, 1, 8, 3);
  EXPECT_EQ(s.storage_offset(), 1);
  EXPECT_EQ(s.strides(), Shape{3});
  s.fill_(-1);
  expect_close(x, {0, -1, 2, 3, -1, 5, 6, -1, 8, 9}, {10});

  Tensor m = arange(12).view({3, 4});
  expect_close(m.slice(1, 1, 3), {1, 2, 5, 6, 9, 10}, {3, 2});
  expect_close(m.slice(-1, -1), {3, 7, 11}, {3, 1});
}

TEST(TensorView, SelectNarrowAndIndexing) {
  Tensor m = arange(6).view({2, 3});
  expect_close(m.select(1, -1), {2, 5}, {2});
  expect_close(m.select(0, -2), {0, 1, 2}, {3});
  expect_close(m[1], {3, 4, 5}, {3});
  EXPECT_EQ(m[1][2].item<int64_t>(), 5);
  EXPECT_EQ(m[-1][-3].item<int64_t>(), 3);
  EXPECT_EQ(m[1].storage_offset(), 3);
  EXPECT_EQ(m[1][2].dim(), 0);

  expect_close(m.narrow(1, 1, 2), {1, 2, 4, 5}, {2, 2});
  expect_close(m.narrow(1, -2, 2), {1, 2, 4, 5}, {2, 2});
  EXPECT_EQ(m.narrow(0, 2, 0).shape(), (Shape{0, 3}));

  m.select(1, 0).fill_(40);
  m.narrow(1, 2, 1).fill_(60);
  expect_close(m, {40, 1, 60, 40, 4, 60}, {2, 3});
  m[0][1].fill_(10);
  EXPECT_EQ(m.to_vector<int64_t>()[1], 10);
}

TEST(TensorView, ExpandIncludingNewLeadingDims) {
  Tensor v = tensor({1.0, 2.0, 3.0});
  Tensor e = v.expand({2, 3});
  EXPECT_EQ(e.strides(), (Shape{0, 1}));
  expect_close(e, {1, 2, 3, 1, 2, 3}, {2, 3});
  EXPECT_TRUE(shares_storage(e, v));

  Tensor e3 = v.expand({4, 2, 3});
  EXPECT_EQ(e3.strides(), (Shape{0, 0, 1}));
  EXPECT_EQ(e3.numel(), 24);

  Tensor col = tensor(std::vector<float>{1.0, 2.0}, {2, 1});
  expect_close(col.expand({2, 3}), {1, 1, 1, 2, 2, 2}, {2, 3});
  expect_close(col.expand({-1, 2}), {1, 1, 2, 2}, {2, 2});
  expect_close(col.expand_as(zeros({3, 2, 2})), {1, 1, 2, 2, 1, 1, 2, 2, 1, 1, 2, 2}, {3, 2, 2});

  Tensor s = scalar_tensor(4.0);
  expect_close(s.expand({2, 2}), {4, 4, 4, 4}, {2, 2});

  v.fill_(9.0);  // a write to the base shows through every expanded element
  expect_close(e, std::vector<double>(6, 9.0), {2, 3});

  expect_error([&] { v.expand({2, 4}); }, "[expand]");
  expect_error([&] { v.expand({3}).expand({1}); }, "[expand]");
}

TEST(TensorView, SqueezeUnsqueezeFlatten) {
  Tensor x = zeros({1, 3, 1});
  EXPECT_EQ(x.squeeze().shape(), Shape{3});
  EXPECT_EQ(x.squeeze(0).shape(), (Shape{3, 1}));
  EXPECT_EQ(x.squeeze(-1).shape(), (Shape{1, 3}));
  EXPECT_EQ(x.squeeze(1).shape(), (Shape{1, 3, 1}));  // not size 1: unchanged
  EXPECT_EQ(x.unsqueeze(0).shape(), (Shape{1, 1, 3, 1}));
  EXPECT_EQ(x.unsqueeze(-1).shape(), (Shape{1, 3, 1, 1}));
  EXPECT_EQ(x.unsqueeze(2).shape(), (Shape{1, 3, 1, 1}));
  EXPECT_EQ(scalar_tensor(1.0).unsqueeze(0).shape(), Shape{1});
  EXPECT_EQ(zeros({1}).squeeze().dim(), 0);
  EXPECT_EQ(squeeze(x).shape(), Shape{3});
  EXPECT_EQ(unsqueeze(x, 0).dim(), 4);

  Tensor sq = x.squeeze();
  EXPECT_TRUE(shares_storage(sq, x));
  sq.select(0, 1).fill_(5.0);
  expect_close(x, {0, 5, 0}, {1, 3, 1});
  Tensor u = sq.unsqueeze(1);
  EXPECT_TRUE(shares_storage(u, x));
  u.select(0, 2).fill_(6.0);
  expect_close(x, {0, 5, 6}, {1, 3, 1});

  Tensor a = arange(24).view({2, 3, 4});
  EXPECT_EQ(a.flatten().shape(), Shape{24});
  EXPECT_EQ(a.flatten(1).shape(), (Shape{2, 12}));
  EXPECT_EQ(a.flatten(0, 1).shape(), (Shape{6, 4}));
  EXPECT_EQ(a.flatten(-2, -1).shape(), (Shape{2, 12}));
  EXPECT_EQ(flatten(a, 1, 1).shape(), (Shape{2, 3, 4}));
  EXPECT_EQ(scalar_tensor(2).flatten().shape(), Shape{1});
  Tensor f = a.flatten();
  EXPECT_TRUE(shares_storage(f, a));
  f.select(0, 23).fill_(-1);
  EXPECT_EQ(a[1][2][3].item<int64_t>(), -1);

  // A non-contiguous input flattens by copying, in row-major order of the view.
  Tensor ft = a.transpose(1, 2).flatten(1);
  EXPECT_FALSE(shares_storage(ft, a));
  expect_close(ft.select(0, 0), {0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11}, {12});
}

// ---------------------------------------------------------------- copies and conversions

TEST(TensorCopy, ContiguousCloneDetach) {
  Tensor a = arange(6.0).view({2, 3});
  Tensor same = a.contiguous();
  EXPECT_TRUE(same.is_same(a));

  Tensor t = a.t();
  Tensor c = t.contiguous();
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_FALSE(shares_storage(c, a));
  expect_close(c, {0, 3, 1, 4, 2, 5}, {3, 2});
  EXPECT_EQ(c.strides(), (Shape{2, 1}));

  Tensor cl = a.clone();
  EXPECT_FALSE(shares_storage(cl, a));
  expect_close(cl, values(a), {2, 3});
  cl.fill_(0.0);
  expect_close(a, {0, 1, 2, 3, 4, 5}, {2, 3});
  // Cloning a view copies only the view's elements.
  Tensor cv = a.select(1, 1).clone();
  expect_close(cv, {1, 4}, {2});
  EXPECT_EQ(cv.storage_offset(), 0);

  Tensor x = tensor({1.0, 2.0}).requires_grad_();
  Tensor d = x.detach();
  EXPECT_FALSE(d.requires_grad());
  EXPECT_TRUE(d.is_leaf());
  EXPECT_TRUE(shares_storage(d, x));
  d.fill_(7.0);  // detach shares data: the change is visible through x
  expect_close(x, {7, 7}, {2});
  EXPECT_TRUE(x.requires_grad());
}

TEST(TensorCopy, ToDtypeConversions) {
  Tensor f = tensor({1.7, -1.7, 2.5, 0.0});
  Tensor i = f.to(kInt64);
  EXPECT_EQ(i.dtype(), kInt64);
  EXPECT_EQ(i.to_vector<int64_t>(), (std::vector<int64_t>{1, -1, 2, 0}));  // truncation, as C++ and PyTorch

  Tensor b = f.to(kBool);
  EXPECT_EQ(b.dtype(), kBool);
  expect_close(b, {1, 1, 1, 0}, {4});
  expect_close(tensor({0.0, 0.5, -2.0}).to(kBool), {0, 1, 1}, {3});
  expect_close(tensor({true, false}).to(kFloat32), {1, 0}, {2});
  expect_close(tensor({0, 3, -2}).to(kBool), {0, 1, 1}, {3});
  expect_close(tensor({200, 3}).to(kUInt8), {200, 3}, {2});

  Tensor same = f.to(kFloat32);
  EXPECT_TRUE(same.is_same(f));
  Tensor d = f.to(kFloat64);
  EXPECT_FALSE(shares_storage(d, f));
  expect_close(d, {1.7, -1.7, 2.5, 0.0}, {4}, 1e-6);

  // Non-contiguous input: converted in the view's order.
  Tensor m = tensor({{1, 2}, {3, 4}}).t().to(kFloat64);
  expect_close(m, {1, 3, 2, 4}, {2, 2});
}

TEST(TensorCopy, SixteenBitFloatsRoundToNearestEven) {
  // bfloat16 keeps 8 significant bits: spacing 2^-7 just above 1.
  const double bf_step = std::ldexp(1.0, -7);
  Tensor bf = tensor(std::vector<double>{1 + bf_step / 2, 1 + 1.5 * bf_step, 1 + 0.75 * bf_step, 3.14159265, -0.1},
                     kFloat64)
                  .to(kBFloat16);
  EXPECT_EQ(bf.dtype(), kBFloat16);
  std::vector<double> bv = values(bf);
  EXPECT_EQ(bv[0], 1.0);                // tie: to even (1.0)
  EXPECT_EQ(bv[1], 1 + 2 * bf_step);    // tie: to even (1 + 2^-6)
  EXPECT_EQ(bv[2], 1 + bf_step);        // nearest
  EXPECT_EQ(bv[3], 3.140625);
  EXPECT_EQ(bv[4], -0.10009765625);

  // float16 keeps 11 significant bits: spacing 2^-10 just above 1.
  const double h_step = std::ldexp(1.0, -10);
  Tensor h = tensor(std::vector<double>{1 + h_step / 2, 1 + 1.5 * h_step, 70000.0, -70000.0, 65504.0, 1e-8, 1e-7,
                                        0.1},
                    kFloat64)
                 .to(kFloat16);
  EXPECT_EQ(h.dtype(), kFloat16);
  std::vector<double> hv = values(h);
  EXPECT_EQ(hv[0], 1.0);
  EXPECT_EQ(hv[1], 1 + 2 * h_step);
  EXPECT_EQ(hv[2], INFINITY);  // overflow
  EXPECT_EQ(hv[3], -INFINITY);
  EXPECT_EQ(hv[4], 65504.0);  // the largest finite value
  EXPECT_EQ(hv[5], 0.0);      // below half the smallest subnormal
  EXPECT_EQ(hv[6], 2 * std::ldexp(1.0, -24));  // subnormal, nearest multiple of 2^-24
  EXPECT_EQ(hv[7], 0.0999755859375);

  // NaN survives both.
  Tensor nan = tensor({NAN}).to(kBFloat16);
  EXPECT_TRUE(std::isnan(values(nan)[0]));
  EXPECT_TRUE(std::isnan(values(tensor({NAN}).to(kFloat16))[0]));

  // Integers through float16 and back.
  expect_close(tensor({2049, -3, 7}).to(kFloat16).to(kInt64), {2048, -3, 7}, {3});
}

TEST(TensorCopy, AllDtypesRoundTrip) {
  const std::vector<double> src = {0, 1, 2, 3, 4, 5};
  for (ScalarType dt : kAllDtypes) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor t = tensor(src, {2, 3}, dt);
    EXPECT_EQ(t.dtype(), dt);
    EXPECT_EQ(t.shape(), (Shape{2, 3}));
    std::vector<double> want = src;
    if (dt == kBool) want = {0, 1, 1, 1, 1, 1};
    expect_close(t, want, {2, 3}, 0, 0);
    // Through every other dtype and back: small integers are exact in all of them.
    for (ScalarType via : kAllDtypes) {
      if (via == kBool) continue;
      expect_close(t.to(via).to(dt), want, {2, 3}, 0, 0, std::string("via ") + dtype_name(via));
    }
    // A clone and a transposed copy keep the dtype.
    EXPECT_EQ(t.clone().dtype(), dt);
    EXPECT_EQ(t.t().contiguous().dtype(), dt);
    EXPECT_EQ(zeros({2}, dt).dtype(), dt);
    EXPECT_EQ(ones({2}, dt).to_vector<double>(), (std::vector<double>{1, 1}));
  }
}

TEST(TensorCopy, InPlaceOpsWithOverlappingOperands) {
  // The operand is read before any element it shares with the destination is written.
  Tensor x = arange(4.0).view({2, 2});
  x.add_(x.t());
  expect_close(x, {0, 3, 3, 6}, {2, 2});

  Tensor r = arange(6.0).view({2, 3});
  r.mul_(r[0]);  // row 0 broadcast over both rows, row 0 included
  expect_close(r, {0, 1, 4, 0, 4, 10}, {2, 3});

  Tensor y = tensor({1.0, 2.0, 3.0});
  y.mul_(y);
  expect_close(y, {1, 4, 9}, {3});
  y.sub_(y);
  expect_close(y, {0, 0, 0}, {3});

  Tensor c = arange(4.0).view({2, 2});
  c.copy_(c.t());
  expect_close(c, {0, 2, 1, 3}, {2, 2});

  Tensor s = arange(5.0);
  s.slice(0, 1).copy_(s.slice(0, 0, 4));  // shifted by one
  expect_close(s, {0, 0, 1, 2, 3}, {5});

  Tensor m = arange(4.0).view({2, 2});
  m.masked_fill_(tensor({true, false}), -1.0);
  expect_close(m, {-1, 1, -1, 3}, {2, 2});
}

TEST(TensorCopy, ItemAndToVector) {
  EXPECT_EQ(tensor({2.5}).item<double>(), 2.5);
  EXPECT_EQ(tensor({2.5}).item<float>(), 2.5f);
  EXPECT_EQ(tensor({2.7}).item<int>(), 2);
  EXPECT_EQ(tensor({-2.7}).item<int64_t>(), -2);
  EXPECT_EQ(tensor({41}).item<int64_t>(), 41);
  EXPECT_EQ(tensor({41}).item<double>(), 41.0);
  EXPECT_TRUE(tensor({true}).item<bool>());
  EXPECT_FALSE(tensor({0.0}).item<bool>());
  EXPECT_EQ(tensor(std::vector<double>{5.0}, {1, 1}).item<double>(), 5.0);
  EXPECT_EQ(tensor({1.5}, kFloat16).item<double>(), 1.5);
  EXPECT_EQ(tensor({1.5}, kBFloat16).item<float>(), 1.5f);
  EXPECT_EQ(tensor({200}, kUInt8).item<int64_t>(), 200);

  Scalar s = tensor({1.25}).item();
  EXPECT_TRUE(s.is_floating_point());
  EXPECT_EQ(s.to_double(), 1.25);
  EXPECT_TRUE(tensor({3}).item().is_integral());
  EXPECT_TRUE(tensor({true}).item().is_bool());

  // item of a view reads the view's element.
  Tensor m = arange(6).view({2, 3});
  EXPECT_EQ(m.t()[2][1].item<int64_t>(), 5);

  Tensor f = tensor({1.5, -2.5, 3.0});
  EXPECT_EQ(f.to_vector<float>(), (std::vector<float>{1.5f, -2.5f, 3.0f}));
  EXPECT_EQ(f.to_vector<double>(), (std::vector<double>{1.5, -2.5, 3.0}));
  EXPECT_EQ(f.to_vector<int64_t>(), (std::vector<int64_t>{1, -2, 3}));
  EXPECT_EQ(f.to_vector<bool>(), (std::vector<bool>{true, true, true}));
  EXPECT_EQ(m.t().to_vector<int64_t>(), (std::vector<int64_t>{0, 3, 1, 4, 2, 5}));
  EXPECT_TRUE(zeros({0}).to_vector<float>().empty());
}

TEST(TensorCopy, DataPtrChecksTheDtype) {
  Tensor f = tensor({1.0, 2.0, 3.0});
  float* p = f.data_ptr<float>();
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p[1], 2.0f);
  p[2] = 9.0f;  // raw writes are the tensor's data
  EXPECT_EQ(values(f)[2], 9.0);
  expect_error([&] { f.data_ptr<double>(); }, "[data_ptr] asked for float64 data of a float32 tensor");
  expect_error([&] { f.data_ptr<int64_t>(); }, "[data_ptr]");

  // The storage offset is applied.
  Tensor m = arange(6).view({2, 3});
  EXPECT_EQ(m[1].data_ptr<int64_t>()[0], 3);
  EXPECT_EQ(m.select(1, 2).data_ptr<int64_t>()[0], 2);
  EXPECT_EQ(tensor({true}).data_ptr<bool>()[0], true);
  EXPECT_EQ(static_cast<float>(tensor({1.5}, kFloat16).data_ptr<Half>()[0]), 1.5f);
}

// ---------------------------------------------------------------- random numbers

TEST(TensorRandom, SameSeedSameValues) {
  manual_seed(123);
  Tensor r1 = rand({50});
  Tensor n1 = randn({51});
  Tensor i1 = randint(0, 1000, {52});
  manual_seed(123);
  Tensor r2 = rand({50});
  Tensor n2 = randn({51});
  Tensor i2 = randint(0, 1000, {52});
  EXPECT_EQ(values(r1), values(r2));
  EXPECT_EQ(values(n1), values(n2));
  EXPECT_EQ(values(i1), values(i2));

  // Successive draws and different seeds differ.
  manual_seed(123);
  Tensor a = rand({50});
  Tensor b = rand({50});
  EXPECT_NE(values(a), values(b));
  manual_seed(124);
  EXPECT_NE(values(rand({50})), values(a));
  manual_seed(124);
  EXPECT_NE(values(randn({51})), values(n1));
  manual_seed(124);
  EXPECT_NE(values(randint(0, 1000, {52})), values(i1));

  // The seed also fixes in-place fills, float64 draws included.
  manual_seed(5);
  Tensor u1 = empty({20}, kFloat64).uniform_(-2, 3);
  manual_seed(5);
  Tensor u2 = empty({20}, kFloat64).uniform_(-2, 3);
  EXPECT_EQ(values(u1), values(u2));
}

TEST(TensorRandom, Distributions) {
  manual_seed(2024);
  const int64_t n = 100000;
  std::vector<double> u = values(rand({n}));
  double umin = *std::min_element(u.begin(), u.end()), umax = *std::max_element(u.begin(), u.end());
  EXPECT_GE(umin, 0.0);
  EXPECT_LT(umax, 1.0);
  double umean = std::accumulate(u.begin(), u.end(), 0.0) / n;
  EXPECT_NEAR(umean, 0.5, 0.01);

  std::vector<double> z = values(randn({n}));
  double mean = std::accumulate(z.begin(), z.end(), 0.0) / n;
  double var = 0;
  for (double v : z) var += (v - mean) * (v - mean);
  double sd = std::sqrt(var / (n - 1));
  EXPECT_NEAR(mean, 0.0, 0.02);
  EXPECT_NEAR(sd, 1.0, 0.02);
  for (double v : z) EXPECT_TRUE(std::isfinite(v));

  std::vector<double> g = values(empty({n}).normal_(3.0, 2.0));
  double gmean = std::accumulate(g.begin(), g.end(), 0.0) / n;
  double gvar = 0;
  for (double v : g) gvar += (v - gmean) * (v - gmean);
  EXPECT_NEAR(gmean, 3.0, 0.04);
  EXPECT_NEAR(std::sqrt(gvar / (n - 1)), 2.0, 0.04);

  // The 16-bit floats too: rounding must not reach the open upper end.
  for (ScalarType t : {kBFloat16, kFloat16}) {
    std::vector<double> h = values(rand({n}, t));
    EXPECT_GE(*std::min_element(h.begin(), h.end()), 0.0) << dtype_name(t);
    EXPECT_LT(*std::max_element(h.begin(), h.end()), 1.0) << dtype_name(t);
    EXPECT_NEAR(std::accumulate(h.begin(), h.end(), 0.0) / n, 0.5, 0.01) << dtype_name(t);
    std::vector<double> w = values(empty({n}, t).uniform_(-2.0, 2.0));
    EXPECT_GE(*std::min_element(w.begin(), w.end()), -2.0) << dtype_name(t);
    EXPECT_LT(*std::max_element(w.begin(), w.end()), 2.0) << dtype_name(t);
  }

  std::vector<double> r = values(empty({n}, kFloat64).uniform_(-1.0, 3.0));
  EXPECT_GE(*std::min_element(r.begin(), r.end()), -1.0);
  EXPECT_LT(*std::max_element(r.begin(), r.end()), 3.0);
  EXPECT_NEAR(std::accumulate(r.begin(), r.end(), 0.0) / n, 1.0, 0.03);

  // A non-contiguous target is filled through its view.
  Tensor base = zeros({4, 6});
  Tensor t = base.t();
  t.uniform_(5.0, 6.0);
  for (double v : values(base)) {
    EXPECT_GE(v, 5.0);
    EXPECT_LT(v, 6.0);
  }
}

TEST(TensorRandom, RngStateReplay) {
  manual_seed(77);
  rand({10});
  GeneratorState s = get_rng_state();
  EXPECT_EQ(s.seed, 77u);
  EXPECT_GT(s.offset, 0u);
  Tensor a = randn({33});
  Tensor ai = randint(0, 100, {7});
  EXPECT_GT(get_rng_state().offset, s.offset);
  set_rng_state(s);
  Tensor b = randn({33});
  Tensor bi = randint(0, 100, {7});
  EXPECT_EQ(values(a), values(b));
  EXPECT_EQ(values(ai), values(bi));

  manual_seed(77);
  EXPECT_EQ(get_rng_state().offset, 0u);
}

TEST(TensorRandom, ValuesDoNotDependOnTheThreadCount) {
  ThreadGuard guard;
  const int64_t n = 300000;  // large enough to be split across threads
  set_num_threads(1);
  manual_seed(99);
  std::vector<double> r1 = values(rand({n})), n1 = values(randn({n})), i1 = values(randint(0, 50, {n}));
  set_num_threads(2);
  manual_seed(99);
  std::vector<double> r2 = values(rand({n})), n2 = values(randn({n})), i2 = values(randint(0, 50, {n}));
  EXPECT_EQ(r1, r2);
  EXPECT_EQ(n1, n2);
  EXPECT_EQ(i1, i2);
}

// ---------------------------------------------------------------- printing

TEST(TensorPrint, ShowsValuesShapeDtypeDevice) {
  Tensor t = tensor({{1.0, 2.0, 3.0}, {4.0, 5.0, 6.0}});
  std::ostringstream os;
  os << t;
  std::string s = os.str();
  EXPECT_EQ(s, t.to_string());
  EXPECT_NE(s.find("shape=[2, 3]"), std::string::npos) << s;
  EXPECT_NE(s.find("dtype=float32"), std::string::npos) << s;
  EXPECT_NE(s.find("device=cpu"), std::string::npos) << s;
  for (const char* v : {"1.", "2.", "3.", "4.", "5.", "6."}) EXPECT_NE(s.find(v), std::string::npos) << v << " in " << s;
  EXPECT_EQ(s.rfind("tensor(", 0), 0u) << s;
  EXPECT_EQ(s.find("requires_grad"), std::string::npos) << s;

  std::string f = tensor({1.5, -2.25}).to_string();
  EXPECT_NE(f.find("1.5000"), std::string::npos) << f;
  EXPECT_NE(f.find("-2.2500"), std::string::npos) << f;

  std::string i = tensor({1, 2, 3}).to_string();
  EXPECT_NE(i.find("[1, 2, 3]"), std::string::npos) << i;
  EXPECT_NE(i.find("dtype=int64"), std::string::npos) << i;

  std::string b = tensor({true, false}).to_string();
  EXPECT_NE(b.find("True"), std::string::npos) << b;
  EXPECT_NE(b.find("False"), std::string::npos) << b;
  EXPECT_NE(b.find("dtype=bool"), std::string::npos) << b;

  EXPECT_EQ(scalar_tensor(5).to_string(), "tensor(5, shape=[], dtype=int64, device=cpu)");
  std::string g = tensor({1.0}).requires_grad_().to_string();
  EXPECT_NE(g.find("requires_grad=True"), std::string::npos) << g;
  EXPECT_NE(zeros({0}).to_string().find("shape=[0]"), std::string::npos);
  EXPECT_EQ(Tensor().to_string(), "tensor(undefined)");

  // Views print their own elements.
  std::string tv = arange(6).view({2, 3}).t().to_string();
  EXPECT_NE(tv.find("[0, 3]"), std::string::npos) << tv;
  EXPECT_NE(tv.find("shape=[3, 2]"), std::string::npos) << tv;
}

TEST(TensorPrint, SummarisesLargeTensors) {
  std::string s = arange(2000).to_string();
  EXPECT_NE(s.find("..."), std::string::npos) << s;
  EXPECT_NE(s.find("1999"), std::string::npos) << s;
  EXPECT_NE(s.find("..., 1997, 1998, 1999]"), std::string::npos) << s;
  EXPECT_EQ(s.find("1000"), std::string::npos) << s;
  EXPECT_LT(s.size(), 200u) << s;
  EXPECT_NE(s.find("shape=[2000]"), std::string::npos) << s;

  std::string m = zeros({100, 100}).to_string();
  EXPECT_NE(m.find("..."), std::string::npos);
  EXPECT_LT(m.size(), 1000u);

  // At the threshold nothing is left out.
  std::string full = arange(1000).to_string();
  EXPECT_EQ(full.find("..."), std::string::npos);
  EXPECT_NE(full.find("500"), std::string::npos);
}

// ---------------------------------------------------------------- memory, threads, devices

TEST(TensorMemory, AllocatedGoesUpAndBackDown) {
  const Device cpu = Device::cpu();
  const size_t before = memory_stats(cpu).allocated;
  {
    Tensor t = empty({1024, 256});  // 1 MiB
    MemoryStats during = memory_stats(cpu);
    EXPECT_GE(during.allocated, before + (1u << 20));
    EXPECT_GE(during.reserved, during.allocated);
    EXPECT_GE(during.peak, during.allocated);
    Tensor v = t.view({-1});  // a view allocates nothing
    EXPECT_EQ(memory_stats(cpu).allocated, during.allocated);
  }
  EXPECT_EQ(memory_stats(cpu).allocated, before);

  reset_peak_memory_stats(cpu);
  EXPECT_EQ(memory_stats(cpu).peak, memory_stats(cpu).allocated);
  {
    Tensor big = empty({4 << 20}, kUInt8);
    (void)big;
  }
  MemoryStats after = memory_stats(cpu);
  EXPECT_GE(after.peak, before + (4u << 20));
  EXPECT_EQ(after.allocated, before);
}

TEST(TensorMemory, SteadyStateLoopDoesNotGoToTheOs) {
  const Device cpu = Device::cpu();
  manual_seed(0);
  Tensor x = randn({128, 96});
  Tensor w = randn({96, 64});
  uint64_t after_first = 0;
  for (int it = 0; it < 6; ++it) {
    Tensor y = (matmul(x, w).relu() * 2.0 + 1.0).sum(std::vector<int64_t>{1});
    Tensor z = y.exp().mean();
    (void)z;
    if (it == 0) after_first = memory_stats(cpu).os_allocations;
  }
  EXPECT_EQ(memory_stats(cpu).os_allocations, after_first);
}

TEST(TensorMemory, MemoryLimit) {
  const Device cpu = Device::cpu();
  {
    LimitGuard guard;
    empty_cache(cpu);  // so that freeing the cache cannot make room for the large block
    set_memory_limit(cpu, memory_stats(cpu).reserved + (1u << 20));
    EXPECT_GT(memory_stats(cpu).limit, 0u);
    try {
      Tensor t = empty({64 << 20}, kUInt8);
      ADD_FAILURE() << "a 64 MiB allocation passed a limit of about 1 MiB above use";
    } catch (const Error& e) {
      std::string msg = e.what();
      EXPECT_EQ(msg.rfind("[", 0), 0u) << msg;
      EXPECT_NE(msg.find("limit"), std::string::npos) << msg;
    }
    Tensor small = empty({1024});  // within the limit: fine
    EXPECT_EQ(small.numel(), 1024);
    set_memory_limit(cpu, 0);
    EXPECT_EQ(memory_stats(cpu).limit, 0u);
  }
  Tensor t = empty({64 << 20}, kUInt8);  // unlimited again
  EXPECT_EQ(t.numel(), 64 << 20);
}

TEST(TensorRuntime, NumThreads) {
  ThreadGuard guard;
  EXPECT_GE(get_num_threads(), 1);
  set_num_threads(1);
  EXPECT_EQ(get_num_threads(), 1);
  set_num_threads(2);
  EXPECT_EQ(get_num_threads(), 2);
  // Results agree across thread counts.
  Tensor a = arange(100000, kFloat64);
  double s2 = a.sum().item<double>();
  set_num_threads(1);
  EXPECT_EQ(a.sum().item<double>(), s2);
  expect_error([] { set_num_threads(0); }, "[set_num_threads]");
}

TEST(TensorDevice, Parsing) {
  Device c("cpu");
  EXPECT_TRUE(c.is_cpu());
  EXPECT_EQ(c, Device::cpu());
  EXPECT_EQ(c.str(), "cpu");

  Device g("cuda:1");
  EXPECT_TRUE(g.is_cuda());
  EXPECT_EQ(g.index, 1);
  EXPECT_EQ(g, Device::cuda(1));
  EXPECT_EQ(g.str(), "cuda:1");
  EXPECT_EQ(Device("cuda"), Device::cuda(0));
  EXPECT_EQ(Device("cpu:0"), Device::cpu());
  EXPECT_FALSE(Device::cuda(0) == Device::cuda(1));

  std::ostringstream os;
  os << Device::cuda(2);
  EXPECT_EQ(os.str(), "cuda:2");

  for (const char* bad : {"gpu", "", "cuda:", "cuda:x", "cuda:-1", "cpu:1", "cuda:1:2", " cpu"}) {
    SCOPED_TRACE(bad);
    expect_error([&] { Device d{std::string(bad)}; }, "[Device]");
  }
}

TEST(TensorDevice, NoCudaHere) {
  if (cuda::is_available()) GTEST_SKIP() << "a GPU is present; this checks the behaviour without one";
  EXPECT_EQ(cuda::device_count(), 0);
  Tensor x = tensor({1.0, 2.0});
  expect_error([&] { x.to(Device::cuda(0)); }, "cuda:0");
  expect_error([&] { x.cuda(); }, "[to]");
  expect_error([&] { empty({2}, Device::cuda(0)); }, "cuda");
  expect_error([] { memory_stats(Device::cuda(0)); }, "[memory_stats]");
  // to(cpu) on a CPU tensor is the tensor itself.
  EXPECT_TRUE(x.to(Device::cpu()).is_same(x));
  EXPECT_TRUE(x.cpu().is_same(x));
}
