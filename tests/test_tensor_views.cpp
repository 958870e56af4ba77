// Tensor views sharing storage (view, reshape, permute, slice, expand, ...), copies and dtype conversions.
#include <cmath>
#include <string>
#include <vector>

#include "tensor_util.h"

using namespace kiln;
using test::expect_close;
using test::expect_error;
using test::kAllDtypes;
using test::shares_storage;
using test::values;

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

TEST(TensorConversions, FloatToIntegerOutOfRangeIsDefined) {
  // Through int64 and wrapping, as PyTorch on x86; NaN becomes 0. (No undefined behaviour.)
  Tensor t = tensor({300.0, -1.0, 2.7, -2.7, NAN}, kFloat64);
  EXPECT_EQ(t.to(kUInt8).to_vector<int64_t>(), (std::vector<int64_t>{44, 255, 2, 254, 0}));
  EXPECT_EQ(t.to(kInt32).to_vector<int64_t>(), (std::vector<int64_t>{300, -1, 2, -2, 0}));
}
