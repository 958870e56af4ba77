// Tensor basics: factories and the dtypes they give, and metadata (shapes, strides, sizes, dtypes).
#include <cmath>
#include <algorithm>

#include "tensor_util.h"

using namespace kiln;
using test::expect_close;
using test::expect_error;
using test::values;

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

// A float Scalar's integer value is defined for every float (the cast was undefined behaviour for
// NaN, infinities and values past int64's range, which masked_fill(m, -INFINITY) passes).
TEST(TensorFactory, FloatScalarsHaveADefinedIntegerValue) {
  EXPECT_EQ(Scalar(std::nan("")).to_int(), 0);
  EXPECT_EQ(Scalar(-INFINITY).to_int(), INT64_MIN);
  EXPECT_EQ(Scalar(INFINITY).to<int64_t>(), INT64_MAX);
  EXPECT_EQ(Scalar(9.3e18).to_int(), INT64_MAX);
  EXPECT_EQ(Scalar(-2.7).to<int32_t>(), -2);
  EXPECT_EQ(Scalar(-INFINITY).to_double(), -INFINITY);
  Tensor m = tensor({1.0f, 2.0f}).masked_fill(tensor({true, false}), -INFINITY);
  EXPECT_EQ(m.to_vector<float>()[0], -INFINITY);
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
    EXPECT_FALSE(test::shares_storage(t, x));
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
    Tensor t = zeros({3}, test::kAllDtypes[i]);
    EXPECT_EQ(t.element_size(), sizes[i]) << names[i];
    EXPECT_EQ(t.nbytes(), 3 * sizes[i]) << names[i];
    EXPECT_STREQ(dtype_name(t.dtype()), names[i]);
    EXPECT_EQ(t.is_floating_point(), i >= 4) << names[i];
  }
}
