// Autograd basics: backward and accumulation, grad modes, autograd::grad, retain_grad, broadcasting, views, dtypes.
#include <cmath>
#include <string>
#include <vector>

#include "autograd_util.h"

using namespace kiln;
using test::expect_close;
using test::expect_error;
using test::leaf;
using test::node_name;

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
  // Accumulated in place, as PyTorch's: a handle on .grad() is .grad() (no second gradient).
  EXPECT_TRUE(first.is_same(x.grad()));
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

// A leaf's first gradient is taken as it is when only it can reach that memory (a bias's
// gradient: sum(keepdim) reshaped, a view of a base nothing else holds), and copied when it is
// shared: one tensor given to two leaves, or slices of one buffer (cat's backward).
TEST(AutogradBasics, FirstGradientIsTakenUnlessShared) {
  Tensor b = leaf({0.5, -1, 2}), x = tensor({1, 2, 3, 4, 5, 6}, kFloat64).reshape({2, 3});
  int64_t copies = 0;
  {
    profiler::Session session({.timing = false});
    (x + b).sum().backward();
    for (const profiler::OpStat& st : session.stats()) copies += st.op == "Copy" ? st.count : 0;
  }
  EXPECT_EQ(copies, 0) << "the bias-like gradient was copied";
  expect_close(b.grad(), {2, 2, 2}, {3});

  Tensor p = leaf({1, 2}), q = leaf({3, 4});
  (p + q).sum().backward();
  EXPECT_NE(p.grad().storage(), q.grad().storage());
  Tensor u = leaf({1, 2}), v = leaf({3, 4, 5});
  (cat({u, v}, 0) * arange(5, kFloat64)).sum().backward();
  EXPECT_NE(u.grad().storage(), v.grad().storage());
  {
    NoGradGuard ng;
    u.grad().zero_();
  }
  expect_close(v.grad(), {2, 3, 4}, {3});
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

  // A graph made only of nodes that save no tensors keeps working, as in PyTorch (AddBackward
  // and SumBackward keep sizes, not tensors).
  Tensor s = leaf({1, 2});
  Tensor t = (s + 1.0).sum();
  t.backward();
  t.backward();
  expect_close(s.grad(), {2, 2}, {2});
}

// PyTorch frees only saved tensors: a part of the graph that saved none (a transposed weight
// taken once, a slice) may be passed again by later backward passes; a node that saved some
// still refuses, with or without nodes that saved none above it.
TEST(AutogradBasics, NodesThatSavedNoTensorsSurviveABackwardPass) {
  Tensor w = ones({2, 3}).requires_grad_();
  Tensor wt = w.t();  // TransposeBackward: saves nothing
  for (int step = 0; step < 2; ++step) matmul(ones({4, 3}), wt).sum().backward();
  expect_close(w.grad(), std::vector<double>(6, 8.0), {2, 3});

  Tensor x = leaf({1, 2, 3});
  Tensor first = x.slice(0, 0, 2);  // SliceBackward: saves nothing
  (first * 2.0).sum().backward();
  (first * 3.0).sum().backward();
  expect_close(x.grad(), {5, 5, 0}, {3});

  Tensor p = leaf({1, 5, 3, 2}).reshape({1, 1, 2, 2});
  Tensor pooled = max_pool2d(p, {2, 2}).sum();  // keeps the maxima's indices
  pooled.backward();
  expect_error([&] { pooled.backward(); }, "retain_graph");

  Tensor q = leaf({1, 2});
  Tensor shared = (q * q).reshape({2, 1});  // MulBackward saved q under ViewBackward
  shared.sum().backward();
  expect_error([&] { shared.sum().backward(); }, "retain_graph");
  expect_close(q.grad(), {2, 4}, {2});
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

TEST(AutogradModes, InferenceMode) {
  Tensor x = tensor({1.0, 2.0}).requires_grad_();
  {
    InferenceMode guard;
    EXPECT_FALSE(autograd::is_grad_enabled());
    EXPECT_FALSE((x * 2).requires_grad());
    {
      InferenceMode off(false);  // leaves the mode as it is
      EXPECT_FALSE(autograd::is_grad_enabled());
    }
  }
  EXPECT_TRUE(autograd::is_grad_enabled());
  EXPECT_TRUE((x * 2).requires_grad());
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

// autograd::grad runs only the nodes between the outputs and the inputs (PyTorch's exec_info):
// the inputs' own histories keep their saved tensors and hooks, and cost nothing.
TEST(AutogradGrad, RunsOnlyThePartOfTheGraphAboveTheInputs) {
  Tensor x = leaf({1, 2, 3});
  Tensor h = x * x;
  Tensor y = h.exp().sum();
  expect_close(autograd::grad({y}, {h})[0], {std::exp(1.0), std::exp(4.0), std::exp(9.0)}, {3}, 1e-12);
  h.sum().backward();  // h's MulBackward was not run, so not freed
  expect_close(x.grad(), {2, 4, 6}, {3});

  Tensor a = x * 2.0;
  a.retain_grad();
  Tensor k = a * 3.0;
  autograd::grad({(k * k).sum()}, {k});
  EXPECT_FALSE(a.grad().defined()) << "a hook below the input fired";
}

// Undefined tensors (a Linear without bias's bias) are errors, not crashes.
TEST(AutogradGrad, UndefinedTensorsAreErrors) {
  Tensor x = leaf({1, 2});
  Tensor y = (x * x).sum();
  expect_error([&] { autograd::grad({y}, {x, Tensor()}, {}, true); }, "[autograd::grad] input 1 is an undefined tensor");
  expect_error([&] { autograd::grad({Tensor()}, {x}); }, "[autograd::grad] output 0 is an undefined tensor");
  Tensor u;
  EXPECT_FALSE(u.grad().defined());
  EXPECT_FALSE(u.requires_grad());
  EXPECT_TRUE(u.is_leaf());
  expect_error([&] { u.set_grad(x); }, "[set_grad] the tensor is undefined");
  expect_error([&] { u.retain_grad(); }, "[retain_grad] the tensor is undefined");
  // set_grad names what differs.
  expect_error([&] { x.set_grad(ones({2}, kFloat32)); }, "[set_grad] a gradient of dtype float32 for a tensor of dtype float64");
  expect_error([&] { x.set_grad(ones({3}, kFloat64)); }, "[set_grad] a gradient of shape [3] for a tensor of shape [2]");
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
  // A grad_output of another shape is an error, as torch's: [3, 3] broadcast into a wrong
  // gradient, [1] failed in a reshape far from here.
  for (const auto& [s, text] : {std::pair{Shape{3, 3}, "[3, 3]"}, std::pair{Shape{1}, "[1]"}})
    expect_error([&] { autograd::grad({x * 2.0}, {x}, {ones(s, kFloat64)}); },
                 std::string("[autograd::grad] grad_output 0 of shape ") + text + " does not match the output's shape [3]");
  // One of another dtype is cast to the output's, as backward() casts it.
  EXPECT_EQ(autograd::grad({x}, {x}, {ones({3}, kFloat32)})[0].dtype(), kFloat64);
}

// A graph of many chained ops is freed without a recursion per node (300 000 overflowed the
// stack as the last tensor holding it died, after backward or without one).
TEST(AutogradBasics, ADeepGraphIsFreedWithoutRecursion) {
  Tensor x = ones({1}).requires_grad_();
  {
    Tensor y = x;
    for (int i = 0; i < 300000; ++i) y = y * 1.0;
    y.sum().backward();
  }
  EXPECT_EQ(x.grad().item<float>(), 1.0f);
  {
    Tensor y = x;
    for (int i = 0; i < 300000; ++i) y = y + 0.0;
  }
  EXPECT_EQ(Tensor().grad_fn(), nullptr);  // an undefined tensor has none (it crashed)
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
  expect_error([&] { y.backward(ones({2}, kFloat64)); },
               "[backward] the gradient of shape [2] does not match the output's shape [3]");
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
