// In-place ops on views while autograd records: the base's history is rewritten (CopySlices),
// views taken before a recorded change follow the base (regenerated), unrecorded changes leave
// views usable.
#include "test_util.h"

using namespace kiln;
using test::expect_close;
using test::expect_error;

namespace {
Tensor leaf(std::vector<double> v) { return tensor(v, kFloat64).requires_grad_(); }
}  // namespace

TEST(AutogradViews, InPlaceOnAViewReachesTheBasesGradient) {
  Tensor x = leaf({1, 2, 3, 4});
  Tensor w = tensor({1.0, 10.0, 100.0, 1000.0}, kFloat64);
  Tensor y = x * 1.0;
  y.slice(0, 1, 3).mul_(2.0);
  (y * w).sum().backward();
  expect_close(x.grad(), {1, 20, 200, 1000}, {4});
}

TEST(AutogradViews, CopyIntoAViewOfABufferMakesTheBufferDifferentiable) {
  Tensor x = leaf({3, 4});
  Tensor buffer = zeros({4}, kFloat64);
  buffer.narrow(0, 1, 2).copy_(x);
  EXPECT_TRUE(buffer.requires_grad());
  EXPECT_FALSE(buffer.is_leaf());
  EXPECT_EQ(buffer.grad_fn()->name(), "CopySlices");
  (buffer * buffer).sum().backward();
  expect_close(x.grad(), {6, 8}, {2});
}

TEST(AutogradViews, OperandThatRequiresGradInAViewUpdate) {
  Tensor x = leaf({1, 2, 3});
  Tensor s = leaf({5});
  Tensor y = x * 2.0;
  y.select(0, 2).mul_(s.select(0, 0));  // y[2] = 2 * x[2] * s
  y.sum().backward();
  expect_close(x.grad(), {2, 2, 10}, {3});
  expect_close(s.grad(), {6}, {1});
}

TEST(AutogradViews, TheViewItselfKeepsAGradient) {
  Tensor x = leaf({1, 2, 3, 4});
  Tensor y = x * 3.0;
  Tensor v = y.view({2, 2}).select(1, 0);  // elements 0 and 2
  v.add_(1.0);
  EXPECT_EQ(v.grad_fn()->name(), "AsStridedBackward");
  (v * v).sum().backward();  // d/dx of (3x + 1)^2 at x = 1 and 3
  expect_close(x.grad(), {24, 0, 60, 0}, {4});
}

TEST(AutogradViews, GradcheckThroughInPlaceOnViews) {
  manual_seed(11);
  Tensor x = randn({4, 3}, kFloat64).requires_grad_();
  Tensor z = randn({3}, kFloat64).requires_grad_();
  auto fn = [](const std::vector<Tensor>& in) {
    Tensor y = in[0] * 2.0 + 0.5;  // (exp would save y and refuse the in-place changes)
    y.select(0, 1).mul_(in[1]);
    y.t().slice(0, 0, 2).add_(in[1].narrow(0, 0, 2).unsqueeze(1));
    y.narrow(0, 2, 2).tanh_();
    return (y * y).sum({0});
  };
  EXPECT_TRUE(autograd::gradcheck(fn, {x, z}));
}

TEST(AutogradViews, AViewOfALeafThatRequiresGradCannotChangeInPlace) {
  Tensor x = leaf({1, 2});
  expect_error([&] { x.select(0, 0).mul_(2.0); }, "[mul_] a view of a leaf tensor that requires grad");
  expect_close(x, {1, 2}, {2});
  // The leaf itself a view of another tensor (a parameter made by a reshape): its views' base is
  // the storage's root, which needs no grad; the gradient came out [20, 20, 0], torch refuses.
  Tensor y = arange(3, kFloat64).add(1.0).reshape({3}).requires_grad_();
  ASSERT_TRUE(y.is_leaf());
  expect_error([&] { y.slice(0, 0, 2).mul_(10.0); }, "[mul_] a view of a leaf tensor that requires grad");
  expect_error([&] { y.view({1, 3}).select(0, 0).slice(0, 1, 2).zero_(); }, "a view of a leaf tensor");
  expect_close(y, {1, 2, 3}, {3});
  NoGradGuard ng;  // an optimizer's in-place step is fine
  y.slice(0, 0, 2).mul_(10.0);
  expect_close(y, {10, 20, 3}, {3});
}

// A view taken before a recorded change of its base has the base's old history; PyTorch
// regenerates it as "its region of the base as it is now", and so does Kiln (refresh_view).
TEST(AutogradViews, AViewTakenBeforeARecordedChangeFollowsTheBase) {
  Tensor x = leaf({1, 2});
  Tensor y = x * 2.0;
  Tensor v = y.select(0, 0);
  y.mul_(3.0);
  (v * 1.0).sum().backward();  // v = 6 x[0]
  expect_close(x.grad(), {6, 0}, {2});
}

TEST(AutogradViews, UnrecordedChangesKeepViewsUsable) {
  // An optimizer step under NoGradGuard is not part of the graph: views stay valid.
  Tensor w = leaf({1, 2, 3});
  Tensor v = w.narrow(0, 0, 2);
  {
    NoGradGuard ng;
    w.sub_(tensor({0.5, 0.5, 0.5}, kFloat64));
  }
  (v * v).sum().backward();
  expect_close(w.grad(), {1, 3, 0}, {3});
}

// A view taken while its base had no history, used after the base got some in place: PyTorch
// regenerates its history (x gets its gradient through the view); Kiln treated it as a constant
// (x.grad() was [0, 0, 1, 1]).
TEST(AutogradViews, AViewTakenBeforeItsBaseHadHistoryFollowsTheBase) {
  Tensor buf = zeros({4}, kFloat64);
  Tensor v = buf.slice(0, 0, 2);
  Tensor x = leaf({1, 1, 1, 1});
  buf.copy_(x);
  Tensor w = leaf({3, 3});
  v.mul_(w);
  buf.sum().backward();
  expect_close(x.grad(), {3, 3, 1, 1}, {4});
  expect_close(w.grad(), {1, 1}, {2});
  // A plain read of such a view, with a number (nothing else requires grad)
  Tensor buf2 = zeros({3}, kFloat64);
  Tensor u = buf2.narrow(0, 1, 2);
  Tensor x2 = leaf({1, 2, 3});
  buf2.copy_(x2);
  (u * 5.0).sum().backward();
  expect_close(x2.grad(), {0, 5, 5}, {3});
}

// Asking a stale view whether it requires grad brings its history up to date first, as torch's
// requires_grad (it stayed false until an op used the view).
TEST(AutogradViews, AStaleViewSaysItRequiresGrad) {
  Tensor x = zeros({4}, kFloat64);
  Tensor old = x.slice(0, 0, 2), v = x.slice(0, 1, 3);
  Tensor w = leaf({1, 2});
  v.mul_(0.0);
  EXPECT_FALSE(old.requires_grad());
  v.add_(w);
  EXPECT_TRUE(x.requires_grad());
  EXPECT_TRUE(old.requires_grad());
  (old * 3.0).sum().backward();
  expect_close(w.grad(), {3, 0}, {2});
}

// Rows taken from a buffer once, each filled in turn (the second row is a view taken before the
// first copy gave the buffer history): PyTorch accepts it, and every row's gradient arrives.
TEST(AutogradViews, RowsOfABufferFilledOneByOne) {
  Tensor x = leaf({1, 2, 3, 4, 5, 6});
  Tensor out = zeros({3, 2}, kFloat64);
  std::vector<Tensor> rows = {out.select(0, 0), out.select(0, 1), out.select(0, 2)};
  for (int64_t i = 0; i < 3; ++i) rows[static_cast<size_t>(i)].copy_(x.narrow(0, 2 * i, 2) * double(i + 1));
  (out * out).sum().backward();  // d/dx of ((i+1) x)^2 = 2 (i+1)^2 x
  expect_close(x.grad(), {2, 4, 24, 32, 90, 108}, {6});
}

// A view used as the root of backward after its base changed in place: its history is
// regenerated (the old one gave [1, 0, 0]; PyTorch gives [2, 0, 0]).
TEST(AutogradViews, AStaleViewAsTheRootOfBackwardFollowsTheBase) {
  Tensor x = leaf({1, 1, 1});
  Tensor y = x.clone();
  Tensor v = y.select(0, 0);
  y.mul_(2.0);
  std::vector<Tensor> g = autograd::grad({v}, {x}, {}, /*retain_graph=*/true);
  expect_close(g[0], {2, 0, 0}, {3});
  v.backward();
  expect_close(x.grad(), {2, 0, 0}, {3});
}

// A view taken under NoGradGuard changed in place with grad mode on: of a leaf that requires
// grad, the change was not seen at all (the weight was zeroed unrecorded); of a non-leaf, the
// gradient of the region's old values was lost. PyTorch refuses both. A no-grad view carries
// no gradient when read.
TEST(AutogradViews, AViewTakenWithoutGradModeCannotChangeABaseThatRequiresGrad) {
  Tensor w = leaf({1, 2, 3});
  Tensor v;
  {
    NoGradGuard ng;
    v = w.slice(0, 0, 2);
  }
  expect_error([&] { v.zero_(); }, "[fill_] a view of a leaf tensor that requires grad");
  expect_close(w, {1, 2, 3}, {3});
  Tensor y = w * 1.0;
  {
    NoGradGuard ng;
    v = y.slice(0, 0, 2);
  }
  expect_error([&] { v.mul_(leaf({2, 2})); }, "a view taken under NoGradGuard");
  EXPECT_FALSE((v * 2.0).requires_grad());
  {
    NoGradGuard ng;
    v.mul_(2.0);  // with grad mode off, as any unrecorded change
  }
}

// Writing in place through an expanded tensor writes each shared element several times, in an
// order that depends on the loop: refused as PyTorch does.
TEST(AutogradInplaceOverlap, AnExpandedTensorCannotBeWrittenInPlace) {
  Tensor a = zeros({1}, kFloat64);
  expect_error([&] { a.expand({3}).add_(ones({3}, kFloat64)); },
               "[add_] more than one element of the tensor changed in place refers to a single memory location");
  expect_error([&] { a.expand({3}).copy_(arange(3, kFloat64)); }, "[copy_] more than one element");
  expect_error([&] { a.expand({2, 3}).exp_(); }, "clone() it first");
  a.expand({1}).add_(1.0);  // size 1 with stride 0 shares nothing
  Tensor c = a.expand({3}).clone();
  c.add_(ones({3}, kFloat64));
  expect_close(c, {2, 2, 2}, {3});
}

// requires_grad_(true) on a tensor with a grad_fn changes nothing (PyTorch); false is an error.
TEST(AutogradBasicsNonLeaf, RequiresGradOnANonLeaf) {
  Tensor y = leaf({1}) * 2.0;
  EXPECT_NO_THROW(y.requires_grad_(true));
  EXPECT_FALSE(y.is_leaf());
  expect_error([&] { y.requires_grad_(false); }, "a non-leaf tensor cannot stop requiring grad; use detach()");
}
