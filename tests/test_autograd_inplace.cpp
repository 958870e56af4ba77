// Autograd with in-place ops: the version counter, leaves, recorded in-place ops, fills and views; and gradcheck.
#include <cmath>
#include <string>
#include <vector>

#include "autograd_util.h"

using namespace kiln;
using test::expect_close;
using test::expect_error;
using test::leaf;
using test::node_name;
using test::values;

TEST(AutogradInplace, ModifyingASavedTensorMakesBackwardThrow) {
  Tensor x = leaf({1, 2});
  Tensor a = x * 2.0;
  Tensor b = a * a;  // saves a
  a.mul_(3.0);
  try {
    b.sum().backward();
    ADD_FAILURE() << "backward through a tensor changed in place after it was saved must throw";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_EQ(msg.rfind("[backward]", 0), 0u) << msg;
    EXPECT_NE(msg.find("modified in place"), std::string::npos) << msg;
    EXPECT_NE(msg.find("MulBackward"), std::string::npos) << msg;
  }

  // The same under NoGradGuard: the version counter sees every change.
  Tensor y = x * 1.0;
  Tensor e = y.exp();  // saves its output
  {
    NoGradGuard guard;
    e.add_(1.0);
  }
  expect_error([&] { e.sum().backward(); }, "modified in place");

  // A change through a view of the saved tensor counts too.
  Tensor p = x * 1.0;
  Tensor q = (p * p).sum();
  {
    NoGradGuard guard;
    p.select(0, 0).fill_(100.0);
  }
  expect_error([&] { q.backward(); }, "modified in place");

  // So does a change to a saved leaf made through detach(), which shares its data.
  Tensor l = leaf({1, 2});
  Tensor sq = (l * l).sum();
  l.detach().mul_(2.0);
  expect_error([&] { sq.backward(); }, "modified in place");

  // Changing a tensor that was not saved is fine.
  Tensor x2 = leaf({1, 2});
  Tensor m2 = x2 * 2.0;
  Tensor n2 = (m2 + 1.0).sum();  // add saves nothing
  m2.mul_(10.0);
  n2.backward();
  expect_close(x2.grad(), {2, 2}, {2});
}

// batch_norm's weight (and batch_norm_relu's bias) changed in place before backward, as an
// optimizer step between forward and backward does: an error, as torch's (the input gradient came
// out for the new weight, ten times too large here). batch_norm's bias is not needed: no error.
TEST(AutogradInplace, BatchNormWeightChangedBeforeBackwardIsAnError) {
  for (const bool relu : {false, true}) {
    for (const bool change_weight : {true, false}) {
      Tensor x = tensor({1.0, 2.0, 4.0, 7.0}, kFloat64).reshape({4, 1}).requires_grad_();
      Tensor w = tensor({2.0}, kFloat64).requires_grad_(), b = tensor({0.5}, kFloat64).requires_grad_();
      auto norm = relu ? batch_norm_relu : batch_norm;
      Tensor loss = (norm(x, {}, {}, w, b, true, 0.1, 1e-5) * tensor({1.0, 2.0, 3.0, 4.0}, kFloat64).reshape({4, 1})).sum();
      {
        NoGradGuard guard;
        (change_weight ? w : b).mul_(10.0);
      }
      const std::string what = std::string(relu ? "relu" : "plain") + (change_weight ? " weight" : " bias");
      if (change_weight || relu)
        expect_error([&] { loss.backward(); }, "modified in place");
      else
        EXPECT_NO_THROW(loss.backward()) << what;
    }
  }
}

TEST(AutogradInplace, LeafRequiringGradCannotChangeInPlace) {
  Tensor w = leaf({1, 2});
  expect_error([&] { w.add_(1.0); }, "[add_] a leaf tensor that requires grad");
  expect_error([&] { w.mul_(2.0); }, "[mul_]");
  expect_error([&] { w.zero_(); }, "a leaf tensor that requires grad");
  expect_error([&] { w.exp_(); }, "[exp_]");
  expect_error([&] { w.relu_(); }, "[relu_]");
  expect_error([&] { w.copy_(tensor({3.0, 4.0}, kFloat64)); }, "[copy_]");
  expect_error([&] { w.uniform_(); }, "[uniform_]");
  expect_error([&] { w.clamp_(0.0, 1.0); }, "[clamp_]");
  expect_close(w, {1, 2}, {2});  // nothing changed
}

TEST(AutogradInplace, OptimizerStepUnderNoGradGuard) {
  Tensor w = leaf({1, -2, 4});
  const double lr = 0.1;
  (w * w).sum().backward();
  {
    NoGradGuard guard;
    w.sub_(w.grad() * lr);
  }
  expect_close(w, {0.8, -1.6, 3.2}, {3}, 1e-12);
  EXPECT_TRUE(w.requires_grad());
  EXPECT_TRUE(w.is_leaf());
  EXPECT_EQ(w.grad_fn(), nullptr);

  // A second step, with the gradient zeroed in place in between.
  w.grad().zero_();
  (w * w).sum().backward();
  expect_close(w.grad(), {1.6, -3.2, 6.4}, {3}, 1e-12);
  {
    NoGradGuard guard;
    w -= w.grad() * lr;
    w.mul_(0.5);
    w.clamp_(-1.0, 1.0);
  }
  expect_close(w, {0.32, -0.64, 1.0}, {3}, 1e-12);
}

TEST(AutogradInplace, RecordedInPlaceOpsOnNonLeaves) {
  Tensor x = leaf({1, 2, 3});
  Tensor y = x * 2.0;
  y.add_(1.0);
  y.mul_(3.0);
  expect_close(y, {9, 15, 21}, {3});
  EXPECT_FALSE(y.is_leaf());
  EXPECT_EQ(node_name(y), "MulBackward");
  y.sum().backward();
  expect_close(x.grad(), {6, 6, 6}, {3});

  // With tensor operands that require grad.
  Tensor a = leaf({1, 2});
  Tensor b = a * a;
  b.div_(a);  // a^2 / a = a
  b.sub_(a * 3.0);  // -2a
  b.sum().backward();
  expect_close(a.grad(), {-2, -2}, {2}, 1e-12);

  // Into a tensor that needs no grad, from one that does.
  Tensor c = leaf({2, 3});
  Tensor buf = zeros({2}, kFloat64);
  buf.add_(c);
  buf.mul_(c);  // c^2
  EXPECT_TRUE(buf.requires_grad());
  buf.sum().backward();
  expect_close(c.grad(), {4, 6}, {2});

  Tensor d = leaf({1, 2});
  Tensor out = zeros({2}, kFloat64);
  out.copy_(d * 5.0);
  out.sum().backward();
  expect_close(d.grad(), {5, 5}, {2});

  // Unary in-place ops.
  Tensor u = leaf({0.5, 1.5});
  Tensor v = u * 1.0;
  v.neg_();
  v.add_(2.0);
  v.exp_();  // e^(2 - u)
  v.sum().backward();
  expect_close(u.grad(), {-std::exp(1.5), -std::exp(0.5)}, {2}, 1e-12);

  Tensor r = leaf({-1, 1, 2});
  Tensor rr = r * 3.0;  // -3, 3, 6
  rr.clamp_(-1.0, 5.0);
  rr.relu_();
  expect_close(rr, {0, 3, 5}, {3});
  rr.sum().backward();
  expect_close(r.grad(), {0, 3, 0}, {3});  // cut by the clamp, passed, clamped

  Tensor sq = leaf({4, 9});
  Tensor sv = sq * 1.0;
  sv.sqrt_();
  sv.sum().backward();
  expect_close(sq.grad(), {0.25, 1.0 / 6}, {2}, 1e-12);

  // An in-place op whose output was saved by the previous in-place op: caught, as in PyTorch.
  Tensor t = leaf({0.5});
  Tensor tv = t * 1.0;
  tv.exp_();   // saves its output
  tv.sqrt_();  // changes it
  expect_error([&] { tv.sum().backward(); }, "modified in place");

  // Operators.
  Tensor o = leaf({1, 2});
  Tensor p = o * 1.0;
  p += o;
  p *= o;  // 2o^2
  p -= 1.0;
  p /= 2.0;  // o^2 - 0.5
  p.sum().backward();
  expect_close(o.grad(), {2, 4}, {2}, 1e-12);
}

TEST(AutogradInplace, SelfAliasingInPlaceOps) {
  // The other operand is the tensor being changed: its old values are the ones differentiated.
  Tensor x = leaf({1, 2, 3});
  Tensor y = x * 1.0;
  y.mul_(y);  // y^2
  expect_close(y, {1, 4, 9}, {3});
  y.sum().backward();
  expect_close(x.grad(), {2, 4, 6}, {3});

  Tensor a = leaf({1, 2, 3});
  Tensor b = a * 1.0;
  b.add_(b);  // 2b
  b.sum().backward();
  expect_close(a.grad(), {2, 2, 2}, {3});

  Tensor c = leaf({1, 2, 4});
  Tensor d = c * 1.0;
  d.div_(d);  // 1: no dependence on c
  expect_close(d, {1, 1, 1}, {3});
  d.sum().backward();
  expect_close(c.grad(), {0, 0, 0}, {3}, 0, 1e-12);

  // Another view of the same memory as the operand.
  Tensor e = leaf({1, 2, 3, 4});
  Tensor m = e.view({2, 2}) * 1.0;
  m.add_(m.t());  // m + m^T
  m.sum().backward();
  expect_close(e.grad(), {2, 2, 2, 2}, {4});
}

TEST(AutogradInplace, FillsAndInPlaceChangesThroughViews) {
  // A random fill or fill_ of a tensor with history replaces its values: the gradient through
  // them is zero, never the old history's.
  Tensor x = leaf({1, 2});
  Tensor y = x * 2.0;
  y.fill_(5.0);
  (y * x).sum().backward();
  expect_close(x.grad(), {5, 5}, {2});

  // No gradient reaches a: Kiln leaves its .grad() undefined where PyTorch gives zeros.
  Tensor a = leaf({1, 2});
  Tensor b = a * 2.0;
  b.uniform_();
  EXPECT_EQ(node_name(b), "UniformBackward");
  b.sum().backward();
  if (a.grad().defined()) expect_close(a.grad(), {0, 0}, {2});

  Tensor a1 = leaf({1, 2});
  Tensor b1 = a1 * 2.0;
  b1.normal_();
  (b1 * a1).sum().backward();
  expect_close(a1.grad(), values(b1), {2});  // only through the second factor

  Tensor a0 = leaf({1, 2});
  Tensor b0 = a0 * 2.0;
  b0.zero_();
  b0.sum().backward();
  if (a0.grad().defined()) expect_close(a0.grad(), {0, 0}, {2});

  // Through a view of a tensor with history: the base's gradient sees the change.
  Tensor c = leaf({1, 2, 3});
  Tensor d = c * 2.0;
  d.slice(0, 0, 1).fill_(0.0);
  d.sum().backward();
  expect_close(c.grad(), {0, 2, 2}, {3});

  Tensor e = leaf({1, 2, 3});
  Tensor f = e * 2.0;
  f.narrow(0, 1, 2).mul_(10.0);
  f.sum().backward();
  expect_close(e.grad(), {2, 20, 20}, {3});

  Tensor e2 = leaf({1, 2, 3});
  Tensor f2 = e2 * 2.0;
  f2.select(0, 0).uniform_();
  f2.sum().backward();
  expect_close(e2.grad(), {0, 2, 2}, {3});

  // A view taken before its base changed in place follows the base (its history is regenerated).
  Tensor g = leaf({1, 2});
  Tensor h = g * 2.0;
  Tensor v = h.select(0, 0);
  h.mul_(3.0);
  (v * 1.0).sum().backward();
  expect_close(g.grad(), {6, 0}, {2});
}

TEST(AutogradGradcheck, CompositeFunctionPasses) {
  manual_seed(3);
  Tensor x = randn({3, 4}, kFloat64).requires_grad_();
  Tensor w = randn({4, 2}, kFloat64).requires_grad_();
  Tensor b = randn({2}, kFloat64).requires_grad_();
  auto fn = [](const std::vector<Tensor>& in) {
    const Tensor &x = in[0], &w = in[1], &b = in[2];
    Tensor h = (matmul(x, w) + b).tanh();                 // [3, 2]
    Tensor s = h.sigmoid() * x.slice(1, 0, 2) - h.t().matmul(x).mean();
    Tensor p = (x.square() + 1.0).log().sum({1}, true);   // [3, 1]
    Tensor q = softmax(s * p, 1) / (w.abs().sum() + 1.0);
    return (q.exp() + x.select(1, 3).unsqueeze(1).expand({3, 2}) * q).sum({0});
  };
  EXPECT_TRUE(autograd::gradcheck(fn, {x, w, b}));

  // Several other ops.
  Tensor y = (rand({2, 3}, kFloat64) + 0.5).requires_grad_();
  auto fn2 = [](const std::vector<Tensor>& in) {
    const Tensor& y = in[0];
    Tensor a = pow(y, 2.5) + y.sqrt() * y.reciprocal() + y.permute({1, 0}).reshape({2, 3}) / 3.0;
    Tensor c = cat({a, y.exp()}, 0);  // [4, 3]
    return (c.logsumexp({1}) + c.amax({1}) + c.var({1})).sum() * maximum(y, y * 0.8).prod();
  };
  EXPECT_TRUE(autograd::gradcheck(fn2, {y}));
}

TEST(AutogradGradcheck, DetectsAWrongGradient) {
  manual_seed(4);
  Tensor x = randn({4}, kFloat64).requires_grad_();
  // x * detach(x) has derivative 2x, but backward only sees the first factor: x.
  auto wrong = [](const std::vector<Tensor>& in) { return in[0] * in[0].detach(); };
  autograd::GradcheckOptions quiet;
  quiet.raise_exception = false;
  EXPECT_FALSE(autograd::gradcheck(wrong, {x}, quiet));
  expect_error([&] { autograd::gradcheck(wrong, {x}); }, "[gradcheck]");
  EXPECT_FALSE(x.grad().defined());  // gradcheck leaves .grad() alone
  expect_close(x, values(x), {4});

  // The right function passes with the same input.
  auto right = [](const std::vector<Tensor>& in) { return in[0] * in[0]; };
  EXPECT_TRUE(autograd::gradcheck(right, {x}, quiet));

  // gradcheck needs float64 CPU inputs.
  Tensor f = randn({2}).requires_grad_();
  expect_error([&] { autograd::gradcheck(right, {f}); }, "[gradcheck]");
}
