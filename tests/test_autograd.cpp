// Autograd: requires_grad, backward, accumulation, retain_graph, grad modes, autograd::grad,
// retain_grad, gradients through broadcasting, views and dtype changes, in-place ops and the
// version counter, and gradcheck.
#include <cmath>

#include "test_util.h"

using namespace kiln;
using test::expect_close;
using test::expect_error;
using test::values;

namespace {

Tensor leaf(std::initializer_list<double> v, ScalarType dt = kFloat64) {
  return tensor(v, dt).requires_grad_();
}

std::string node_name(const Tensor& t) { return t.grad_fn() ? t.grad_fn()->name() : std::string("(none)"); }

}  // namespace

TEST(AutogradBasics, RequiresGradAndLeaves) {
  Tensor x = tensor({1.0, 2.0});
  EXPECT_FALSE(x.requires_grad());
  EXPECT_TRUE(x.is_leaf());
  Tensor& same = x.requires_grad_();
  EXPECT_EQ(&same, &x);
  EXPECT_TRUE(x.requires_grad());
  EXPECT_TRUE(x.is_leaf());
  EXPECT_EQ(x.grad_fn(), nullptr);
  EXPECT_FALSE(x.grad().defined());
  x.requires_grad_(false);
  EXPECT_FALSE(x.requires_grad());

  EXPECT_TRUE(ones({2}, TensorOptions(kFloat64).requires_grad(true)).requires_grad());
  EXPECT_TRUE(tensor({1.0}, TensorOptions().requires_grad(true)).requires_grad());

  // Results of ops on a tensor that requires grad are non-leaves with a grad_fn.
  Tensor w = leaf({1, 2, 3});
  Tensor y = w * 2.0;
  EXPECT_TRUE(y.requires_grad());
  EXPECT_FALSE(y.is_leaf());
  EXPECT_EQ(node_name(y), "MulBackward");
  EXPECT_EQ(node_name(w + w), "AddBackward");
  EXPECT_EQ(node_name(w - 1.0), "SubBackward");
  EXPECT_EQ(node_name(w / 2.0), "DivBackward");
  EXPECT_EQ(node_name(y.sum()), "SumBackward");
  EXPECT_EQ(node_name(y.mean()), "MeanBackward");
  EXPECT_EQ(node_name(w.view({3, 1})), "ViewBackward");
  EXPECT_EQ(node_name(w.expand({2, 3})), "ExpandBackward");
  EXPECT_EQ(node_name(w.slice(0, 1)), "SliceBackward");
  EXPECT_EQ(node_name(w.select(0, 1)), "SelectBackward");
  EXPECT_EQ(node_name(w.view({3, 1}).t()), "PermuteBackward");
  EXPECT_EQ(node_name(w.clone()), "CloneBackward");
  EXPECT_EQ(node_name(w.to(kFloat32)), "ToCopyBackward");
  EXPECT_EQ(node_name(matmul(w, w)), "ViewBackward");  // 1-D @ 1-D: the matmul result reshaped to 0-d
  EXPECT_EQ(node_name(matmul(w.view({1, 3}), w.view({3, 1}))), "MatmulBackward");
  EXPECT_EQ(node_name(where(w > 1.0, w, 0.0)), "WhereBackward");
  EXPECT_EQ(node_name(w.exp()), "ExpBackward");
  EXPECT_EQ(node_name(w.relu()), "ReluBackward");
  EXPECT_EQ(node_name(gelu(w, "tanh")), "GeluBackward");
  EXPECT_EQ(node_name(-w), "NegBackward");
  EXPECT_EQ(node_name(w.softmax(0)), "SoftmaxBackward");
  EXPECT_EQ(node_name(w.amax({0})), "AmaxBackward");
  EXPECT_EQ(node_name(cat({w, w})), "CatBackward");
  Tensor ip = w * 1.0;
  ip.exp_();
  EXPECT_EQ(node_name(ip), "ExpBackward");

  // Ops on tensors that need no grad record nothing; comparisons are not differentiable.
  Tensor c = tensor({1.0}) * 2.0;
  EXPECT_FALSE(c.requires_grad());
  EXPECT_TRUE(c.is_leaf());
  Tensor cmp = w > 1.0;
  EXPECT_FALSE(cmp.requires_grad());
  EXPECT_FALSE(argmax(w).requires_grad());
  EXPECT_FALSE(w.to(kInt64).requires_grad());
}

TEST(AutogradBasics, BackwardWithAndWithoutExplicitGradient) {
  Tensor x = leaf({1, 2, 3});
  Tensor y = (x * x + x * 2.0).sum();
  EXPECT_EQ(y.dim(), 0);
  y.backward();
  expect_close(x.grad(), {4, 6, 8}, {3});
  EXPECT_EQ(x.grad().dtype(), kFloat64);
  EXPECT_FALSE(x.grad().requires_grad());

  // A non-scalar output takes an explicit gradient (a vector-Jacobian product).
  Tensor a = leaf({1, 2, 3});
  Tensor b = a * a * 3.0;
  b.backward(tensor({1.0, 0.5, 2.0}, kFloat64));
  expect_close(a.grad(), {6, 6, 36}, {3});

  // A one-element non-0-d output gets the implicit gradient too.
  Tensor c = leaf({2});
  (c * c).backward();
  expect_close(c.grad(), {4}, {1});

  // The explicit gradient may have another dtype; it is converted.
  Tensor d = leaf({1, 2}, kFloat32);
  (d * 4.0).backward(tensor({1.0, 1.0}, kFloat64));
  EXPECT_EQ(d.grad().dtype(), kFloat32);
  expect_close(d.grad(), {4, 4}, {2});

  // backward() on a leaf itself.
  Tensor e = leaf({1, 2});
  Tensor g = tensor({3.0, 4.0}, kFloat64);
  e.backward(g);
  expect_close(e.grad(), {3, 4}, {2});
  g.fill_(0.0);  // .grad() does not alias the gradient that was passed in
  expect_close(e.grad(), {3, 4}, {2});
}

TEST(AutogradBasics, GradAccumulatesOverBackwardCalls) {
  Tensor x = leaf({1, -2});
  (x * x).sum().backward();
  expect_close(x.grad(), {2, -4}, {2});
  Tensor first = x.grad();
  (x * x).sum().backward();
  expect_close(x.grad(), {4, -8}, {2});
  expect_close(first, {2, -4}, {2});  // a held .grad() is not changed behind its back
  (x * 3.0).sum().backward();
  expect_close(x.grad(), {7, -5}, {2});

  // Zeroed in place, optimizer style, then accumulated again.
  x.grad().zero_();
  (x * 3.0).sum().backward();
  expect_close(x.grad(), {3, 3}, {2});

  // set_grad replaces it; an undefined grad starts fresh.
  x.set_grad(Tensor());
  EXPECT_FALSE(x.grad().defined());
  (x * 5.0).sum().backward();
  expect_close(x.grad(), {5, 5}, {2});
}

TEST(AutogradBasics, TensorUsedTwice) {
  Tensor x = leaf({1, 2, 3});
  Tensor y = (x * x + x).sum();  // dy/dx = 2x + 1
  y.backward();
  expect_close(x.grad(), {3, 5, 7}, {3});

  Tensor a = leaf({2, 5});
  Tensor h = a * 3.0;
  Tensor z = (h * h + h.exp() + h).sum();  // h used three times: 2h + e^h + 1, times 3
  z.backward();
  std::vector<double> want;
  for (double v : {2.0, 5.0}) want.push_back(3 * (2 * 3 * v + std::exp(3 * v) + 1));
  expect_close(a.grad(), want, {2}, 1e-10);

  Tensor b = leaf({1.5});
  (b + b + b).backward();
  expect_close(b.grad(), {3}, {1});
}

TEST(AutogradBasics, RetainGraph) {
  Tensor x = leaf({1, 2});
  Tensor y = (x * x).sum();
  y.backward();
  try {
    y.backward();
    ADD_FAILURE() << "a second backward through a freed graph must throw";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("retain_graph"), std::string::npos) << msg;
    EXPECT_EQ(msg.rfind("[backward]", 0), 0u) << msg;
  }

  Tensor w = leaf({1, 2});
  Tensor v = (w * w).sum();
  v.backward(Tensor(), /*retain_graph=*/true);
  v.backward();
  expect_close(w.grad(), {4, 8}, {2});

  // A graph made only of nodes that save nothing still refuses a second pass without it.
  Tensor s = leaf({1, 2});
  Tensor t = (s + 1.0).sum();
  t.backward();
  expect_error([&] { t.backward(); }, "retain_graph");
}

TEST(AutogradBasics, DetachStopsGradients) {
  Tensor x = leaf({1, 2, 3});
  Tensor d = x.detach();
  EXPECT_FALSE(d.requires_grad());
  EXPECT_TRUE(d.is_leaf());
  Tensor y = (x * d).sum();  // the gradient flows only through the first factor
  y.backward();
  expect_close(x.grad(), {1, 2, 3}, {3});

  Tensor h = x * 2.0;
  Tensor hd = h.detach();
  EXPECT_FALSE(hd.requires_grad());
  EXPECT_EQ(hd.grad_fn(), nullptr);
  Tensor z = (hd * 5.0).sum();
  EXPECT_FALSE(z.requires_grad());
  expect_error([&] { z.backward(); }, "[backward]");
}

TEST(AutogradModes, NoGradGuard) {
  Tensor x = leaf({1, 2});
  EXPECT_TRUE(autograd::is_grad_enabled());
  {
    NoGradGuard guard;
    EXPECT_FALSE(autograd::is_grad_enabled());
    Tensor y = x * 2.0 + x.exp();
    EXPECT_FALSE(y.requires_grad());
    EXPECT_EQ(y.grad_fn(), nullptr);
    EXPECT_FALSE(x.view({2, 1}).requires_grad());
    {
      NoGradGuard nested;
      EXPECT_FALSE(autograd::is_grad_enabled());
    }
    EXPECT_FALSE(autograd::is_grad_enabled());
    expect_close(y, {2 + std::exp(1.0), 4 + std::exp(2.0)}, {2});
  }
  EXPECT_TRUE(autograd::is_grad_enabled());
  EXPECT_TRUE((x * 2.0).requires_grad());
}

TEST(AutogradModes, AutoGradMode) {
  Tensor x = leaf({1, 2});
  {
    AutoGradMode off(false);
    EXPECT_FALSE((x * 2.0).requires_grad());
    {
      AutoGradMode on(true);
      Tensor y = x * 2.0;
      EXPECT_TRUE(y.requires_grad());
      y.sum().backward();  // the backward pass works in any mode
    }
    EXPECT_FALSE(autograd::is_grad_enabled());
  }
  EXPECT_TRUE(autograd::is_grad_enabled());
  expect_close(x.grad(), {2, 2}, {2});

  {
    NoGradGuard guard;
    AutoGradMode on(true);
    EXPECT_TRUE((x * 1.0).requires_grad());
  }
  autograd::set_grad_enabled(false);
  EXPECT_FALSE((x * 1.0).requires_grad());
  autograd::set_grad_enabled(true);
  EXPECT_TRUE((x * 1.0).requires_grad());
}

TEST(AutogradGrad, LeavesAndIntermediatesWithoutTouchingGrad) {
  Tensor x = leaf({1, 2, 3});
  Tensor y = (x * x).sum();
  std::vector<Tensor> g = autograd::grad({y}, {x});
  ASSERT_EQ(g.size(), 1u);
  expect_close(g[0], {2, 4, 6}, {3});
  EXPECT_FALSE(x.grad().defined());

  Tensor a = leaf({1, -1});
  Tensor h = a * 3.0;  // intermediate
  Tensor z = (h * h).sum();
  std::vector<Tensor> gh = autograd::grad({z}, {h, a}, {}, /*retain_graph=*/true);
  expect_close(gh[0], {6, -6}, {2});    // dz/dh = 2h
  expect_close(gh[1], {18, -18}, {2});  // dz/da = 18a
  EXPECT_FALSE(a.grad().defined());
  EXPECT_FALSE(h.grad().defined());
  // The graph was retained: a normal backward still works, and fills .grad() only now.
  z.backward();
  expect_close(a.grad(), {18, -18}, {2});

  // Without retain_graph the graph is freed.
  Tensor b = leaf({2});
  Tensor w = (b * b).sum();
  autograd::grad({w}, {b});
  expect_error([&] { autograd::grad({w}, {b}); }, "retain_graph");
}

TEST(AutogradGrad, GradOutputsAndSeveralOutputs) {
  Tensor x = leaf({1, 2, 3});
  Tensor y = x * 2.0;
  std::vector<Tensor> g = autograd::grad({y}, {x}, {tensor({1.0, 10.0, 100.0}, kFloat64)});
  expect_close(g[0], {2, 20, 200}, {3});

  // Two outputs: their gradients add.
  Tensor p = (x * x).sum();
  Tensor q = (x * 3.0).sum();
  std::vector<Tensor> gpq = autograd::grad({p, q}, {x});
  expect_close(gpq[0], {5, 7, 9}, {3});

  // A non-scalar output without grad_outputs is an error.
  expect_error([&] { autograd::grad({x * 2.0}, {x}); }, "[autograd::grad]");
  // An output that does not require grad, or an input that does not.
  expect_error([&] { autograd::grad({tensor({1.0})}, {x}); }, "[autograd::grad]");
  expect_error([&] { autograd::grad({(x * 2.0).sum()}, {tensor({1.0})}); }, "[autograd::grad]");
  // The gradient of an output with respect to itself is the seed.
  expect_close(autograd::grad({x.sum()}, {x})[0], {1, 1, 1}, {3});
}

TEST(AutogradGrad, AllowUnused) {
  Tensor x = leaf({1, 2});
  Tensor unused = leaf({5});
  Tensor y = (x * x).sum();
  expect_error([&] { autograd::grad({y}, {x, unused}, {}, true); }, "allow_unused");
  std::vector<Tensor> g = autograd::grad({y}, {x, unused}, {}, false, /*allow_unused=*/true);
  ASSERT_EQ(g.size(), 2u);
  expect_close(g[0], {2, 4}, {2});
  EXPECT_FALSE(g[1].defined());
  EXPECT_FALSE(unused.grad().defined());
}

TEST(AutogradBasics, RetainGradOnANonLeaf) {
  Tensor x = leaf({1, 2});
  Tensor h = x * 3.0;
  Tensor k = x * 4.0;
  h.retain_grad();
  Tensor y = (h * h + k).sum();
  y.backward();
  expect_close(h.grad(), {6, 12}, {2});  // dy/dh = 2h
  EXPECT_FALSE(k.grad().defined());     // not retained: a non-leaf keeps no grad
  expect_close(x.grad(), {18 + 4, 36 + 4}, {2});

  // retain_grad on a leaf is harmless; its grad is kept anyway.
  Tensor l = leaf({1});
  l.retain_grad();
  (l * 2.0).sum().backward();
  expect_close(l.grad(), {2}, {1});

  // A retained grad accumulates like a leaf's.
  Tensor a = leaf({1});
  Tensor m = a * 2.0;
  m.retain_grad();
  Tensor s = (m * 5.0).sum();
  s.backward(Tensor(), true);
  s.backward();
  expect_close(m.grad(), {10}, {1});

  // After an in-place op the retained grad is that of the new value, as in PyTorch.
  Tensor b = leaf({1, 2});
  Tensor h2 = b * 3.0;
  h2.retain_grad();
  h2.mul_(2.0);
  (h2 * h2).sum().backward();
  expect_close(h2.grad(), {12, 24}, {2});  // 2 * (6b)
  expect_close(b.grad(), {72, 144}, {2});  // d(36 b^2)/db

  // autograd::grad fills retained grads too (PyTorch does the same).
  Tensor c = leaf({1, 2});
  Tensor h3 = c * 3.0;
  h3.retain_grad();
  autograd::grad({(h3 * h3).sum()}, {c});
  expect_close(h3.grad(), {6, 12}, {2});
  EXPECT_FALSE(c.grad().defined());

  expect_error([] { tensor({1.0}).retain_grad(); }, "[retain_grad]");
}

TEST(AutogradBasics, BackwardErrors) {
  Tensor x = tensor({1.0, 2.0});
  expect_error([&] { x.backward(); }, "[backward] the tensor does not require grad");
  expect_error([&] { x.sum().backward(); }, "[backward]");

  Tensor w = leaf({1, 2, 3});
  Tensor y = w * 2.0;
  expect_error([&] { y.backward(); }, "[backward] a gradient must be given for an output of shape [3]");
  expect_error([&] { y.backward(ones({2}, kFloat64)); }, "[backward] gradient of shape [2]");
  EXPECT_FALSE(w.grad().defined());
  {
    NoGradGuard guard;
    Tensor z = (w * 2.0).sum();
    expect_error([&] { z.backward(); }, "[backward]");
  }
}

TEST(AutogradBroadcast, GradientsReduceToTheInputShapes) {
  Tensor a = tensor({{1.0, 2.0, 3.0}, {4.0, 5.0, 6.0}}, kFloat64).requires_grad_();
  Tensor b = leaf({10, 20, 30});
  Tensor col = tensor(std::vector<double>{7, 8}, {2, 1}).requires_grad_();
  Tensor s = scalar_tensor(2.0, kFloat64).requires_grad_();
  Tensor y = (a * b + col * s - b / s).sum();
  y.backward();
  expect_close(a.grad(), {10, 20, 30, 10, 20, 30}, {2, 3});
  expect_close(b.grad(), {5 - 1, 7 - 1, 9 - 1}, {3});            // column sums of a, minus 2 * (1/s)
  expect_close(col.grad(), {6, 6}, {2, 1});                       // 3 columns times s
  expect_close(s.grad(), {3 * (7 + 8) + (10 + 20 + 30) * 2 / 4.0}, {});  // sum col*3 + sum b / s^2 (twice)

  // Leading size-1 dims and a [1, 3] operand.
  Tensor r = tensor(std::vector<double>{1, 2, 3}, {1, 3}).requires_grad_();
  Tensor big = ones({4, 2, 3}, kFloat64);
  (big * r).sum().backward();
  expect_close(r.grad(), {8, 8, 8}, {1, 3});

  // A Scalar operand needs no gradient; where broadcasts too.
  Tensor u = leaf({1, -2});
  (where(u > 0.0, u * 2.0, scalar_tensor(0.0, kFloat64)) + 1.0).sum().backward();
  expect_close(u.grad(), {2, 0}, {2});
}

TEST(AutogradViews, GradientsThroughViews) {
  auto fresh = [] { return arange(6, kFloat64).view({2, 3}).detach().requires_grad_(); };

  Tensor x = fresh();
  x.slice(1, 0, 3, 2).sum().backward();  // columns 0 and 2
  expect_close(x.grad(), {1, 0, 1, 1, 0, 1}, {2, 3});

  x = fresh();
  (x.select(0, -1) * tensor({1.0, 2.0, 3.0}, kFloat64)).sum().backward();
  expect_close(x.grad(), {0, 0, 0, 1, 2, 3}, {2, 3});

  x = fresh();
  x.select(1, 1).expand({4, 2}).sum().backward();
  expect_close(x.grad(), {0, 4, 0, 0, 4, 0}, {2, 3});

  x = fresh();
  (x.t() * tensor({{1.0, 10.0}, {2.0, 20.0}, {3.0, 30.0}}, kFloat64)).sum().backward();
  expect_close(x.grad(), {1, 2, 3, 10, 20, 30}, {2, 3});

  x = fresh();
  (x.view({3, 2}).narrow(0, 1, 2) * 2.0).sum().backward();
  expect_close(x.grad(), {0, 0, 2, 2, 2, 2}, {2, 3});

  x = fresh();
  (x.unsqueeze(0).permute({2, 0, 1}).flatten().reshape({6, 1}).squeeze() * arange(6, kFloat64)).sum().backward();
  expect_close(x.grad(), {0, 2, 4, 1, 3, 5}, {2, 3});  // element [i][j] sat at position j*2+i

  x = fresh();
  (x[1][2] * x[0][0] + x[0][1]).backward();
  expect_close(x.grad(), {5, 1, 0, 0, 0, 0}, {2, 3});

  // A view used together with its base.
  x = fresh();
  (x * 1.0 + x.slice(1, 1, 2).expand({2, 3})).sum().backward();
  expect_close(x.grad(), {1, 4, 1, 1, 4, 1}, {2, 3});
}

TEST(AutogradDtype, FloatLeafInADoubleOpGetsAFloatGrad) {
  Tensor x = tensor({1.0, 2.0}).requires_grad_();  // float32
  Tensor w = tensor({0.5, 3.0}, kFloat64);
  Tensor y = (x * w).sum();
  EXPECT_EQ(y.dtype(), kFloat64);
  y.backward();
  ASSERT_TRUE(x.grad().defined());
  EXPECT_EQ(x.grad().dtype(), kFloat32);
  expect_close(x.grad(), {0.5, 3.0}, {2});

  Tensor a = tensor({1.5}).requires_grad_();
  (a.to(kFloat64) * 2.0).sum().backward();
  EXPECT_EQ(a.grad().dtype(), kFloat32);
  expect_close(a.grad(), {2}, {1});

  // bfloat16 and float16 leaves also get their own dtype back.
  Tensor h = tensor({1.0, 2.0}, kBFloat16).requires_grad_();
  (h.to(kFloat32) * tensor({3.0, 4.0})).sum().backward();
  EXPECT_EQ(h.grad().dtype(), kBFloat16);
  expect_close(h.grad(), {3, 4}, {2});

  // A float32 leaf times a float64 0-d tensor computes in float32 (PyTorch's rule), grads keep dtypes.
  Tensor f = tensor({1.0, 2.0}).requires_grad_();
  Tensor s = scalar_tensor(2.0, kFloat64).requires_grad_();
  Tensor z = (f * s).sum();
  EXPECT_EQ(z.dtype(), kFloat32);
  z.backward();
  EXPECT_EQ(f.grad().dtype(), kFloat32);
  EXPECT_EQ(s.grad().dtype(), kFloat64);
  expect_close(s.grad(), {3}, {});
}

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

  // A view taken before its base changed in place is stale: using it is an error.
  Tensor g = leaf({1, 2});
  Tensor h = g * 2.0;
  Tensor v = h.select(0, 0);
  h.mul_(3.0);
  expect_error([&] { (v * 1.0).sum().backward(); }, "view");
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
