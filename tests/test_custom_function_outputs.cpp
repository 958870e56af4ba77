// Custom functions with several outputs (libtorch's variable_list forward): one node, one
// gradient slot per output; non-differentiable outputs; materialized gradients; hooks, retain_grad,
// autograd::grad, in-place changes and second derivatives per output.
#include <gtest/gtest.h>

#include "kiln/kiln.h"
#include "test_util.h"

namespace kiln::test {
namespace {

using autograd::AutogradContext;

// {sin(x), cos(x)}, saving its outputs: the second derivative goes through them.
struct SinCos : autograd::Function<SinCos> {
  static inline int backward_calls = 0;
  static inline std::vector<bool> got_defined;
  static std::vector<Tensor> forward(AutogradContext* ctx, const Tensor& x) {
    Tensor s = sin(x), c = cos(x);
    ctx->save_for_backward({s, c});
    return {s, c};
  }
  static std::vector<Tensor> backward(AutogradContext* ctx, std::vector<Tensor> g) {
    ++backward_calls;
    got_defined = {g[0].defined(), g[1].defined()};
    auto saved = ctx->get_saved_variables();
    return {g[0] * saved[1] - g[1] * saved[0]};
  }
};

// As SinCos, telling backward which gradients nothing computed (undefined).
struct SinCosUnmaterialized : autograd::Function<SinCosUnmaterialized> {
  static inline std::vector<bool> got_defined;
  static std::vector<Tensor> forward(AutogradContext* ctx, const Tensor& x) {
    ctx->set_materialize_grads(false);
    ctx->save_for_backward({x});
    return {sin(x), cos(x)};
  }
  static std::vector<Tensor> backward(AutogradContext* ctx, std::vector<Tensor> g) {
    got_defined = {g[0].defined(), g[1].defined()};
    Tensor x = ctx->get_saved_variables()[0];
    Tensor gx = zeros_like(x);
    if (g[0].defined()) gx = gx + g[0] * cos(x);
    if (g[1].defined()) gx = gx - g[1] * sin(x);
    return {gx};
  }
};

// The largest element of each row, its index (int64) and a float mask of where it is, marked
// non-differentiable.
struct RowMax : autograd::Function<RowMax> {
  static inline std::vector<Tensor> grads_seen;
  static std::vector<Tensor> forward(AutogradContext* ctx, const Tensor& x) {
    Tensor idx = argmax(x, 1, /*keepdim=*/true);
    Tensor mask = zeros_like(x).scatter_add(1, idx, ones(idx.shape(), x.dtype()));
    ctx->save_for_backward({mask});
    ctx->mark_non_differentiable({mask});
    return {gather(x, 1, idx), idx, mask};
  }
  static std::vector<Tensor> backward(AutogradContext* ctx, std::vector<Tensor> g) {
    grads_seen = g;
    Tensor mask = ctx->get_saved_variables()[0];
    return {mask * g[0]};
  }
};

// {x * w, x + w}: two inputs, two outputs.
struct ProdSum : autograd::Function<ProdSum> {
  static std::vector<Tensor> forward(AutogradContext* ctx, const Tensor& x, const Tensor& w) {
    ctx->save_for_backward({x, w});
    return {x * w, x + w};
  }
  static std::vector<Tensor> backward(AutogradContext* ctx, std::vector<Tensor> g) {
    auto s = ctx->get_saved_variables();
    return {g[0] * s[1] + g[1], g[0] * s[0] + g[1]};
  }
};

// Returns its input and the input again: both outputs are aliases, the input keeps its history.
struct Twice : autograd::Function<Twice> {
  static std::vector<Tensor> forward(AutogradContext*, const Tensor& x) { return {x, x}; }
  static std::vector<Tensor> backward(AutogradContext*, std::vector<Tensor> g) { return {g[0] + 2 * g[1]}; }
};

// {2x, undefined, x^2}: an undefined output (torch's None) gets an undefined gradient.
struct WithAHole : autograd::Function<WithAHole> {
  static inline bool middle_defined = true;
  static std::vector<Tensor> forward(AutogradContext* ctx, const Tensor& x) {
    ctx->save_for_backward({x});
    return {x * 2.0, Tensor(), x * x};
  }
  static std::vector<Tensor> backward(AutogradContext* ctx, std::vector<Tensor> g) {
    middle_defined = g[1].defined();
    return {g[0] * 2.0 + g[2] * 2.0 * ctx->get_saved_variables()[0]};
  }
};

struct Nothing : autograd::Function<Nothing> {
  static std::vector<Tensor> forward(AutogradContext*, const Tensor&) { return {}; }
  static std::vector<Tensor> backward(AutogradContext*, std::vector<Tensor>) { return {Tensor()}; }
};

// x *= a in place, marked dirty: x takes the function as its history.
struct ScaleInPlace : autograd::Function<ScaleInPlace> {
  static Tensor forward(AutogradContext* ctx, Tensor x, double a) {
    x.mul_(a);
    ctx->mark_dirty({x});
    ctx->saved_data["a"] = a;
    return x;
  }
  static std::vector<Tensor> backward(AutogradContext* ctx, std::vector<Tensor> g) {
    return {g[0] * ctx->saved_data["a"], Tensor()};
  }
};

// Marks its input dirty without returning it.
struct DirtyNotReturned : autograd::Function<DirtyNotReturned> {
  static Tensor forward(AutogradContext* ctx, Tensor x) {
    x.add_(1.0);
    ctx->mark_dirty({x});
    return x * 2.0;
  }
  static std::vector<Tensor> backward(AutogradContext*, std::vector<Tensor> g) { return {g[0] * 2.0}; }
};

// x += w in place, marked dirty.
struct AddInto : autograd::Function<AddInto> {
  static Tensor forward(AutogradContext* ctx, Tensor x, const Tensor& w) {
    x.add_(w);
    ctx->mark_dirty({x});
    return x;
  }
  static std::vector<Tensor> backward(AutogradContext*, std::vector<Tensor> g) { return {g[0], g[0]}; }
};

// Saves x, then changes it in place: what is saved is x at the end of forward, as torch's.
struct SaveThenScale : autograd::Function<SaveThenScale> {
  static Tensor forward(AutogradContext* ctx, Tensor x) {
    ctx->save_for_backward({x});
    x.mul_(2.0);
    ctx->mark_dirty({x});
    return x;
  }
  static std::vector<Tensor> backward(AutogradContext* ctx, std::vector<Tensor> g) {
    return {g[0] * ctx->get_saved_variables()[0]};  // 2x * g: a made-up gradient that reads the saved value
  }
};

// SinCos whose forward calls another custom function after saving its outputs.
struct NestedSinCos : autograd::Function<NestedSinCos> {
  static std::vector<Tensor> forward(AutogradContext* ctx, const Tensor& x) {
    Tensor s = sin(x), c = cos(x);
    ctx->save_for_backward({s, c});
    SinCos::apply(x);
    return {s, c};
  }
  static std::vector<Tensor> backward(AutogradContext* ctx, std::vector<Tensor> g) {
    auto saved = ctx->get_saved_variables();
    return {g[0] * saved[1] - g[1] * saved[0]};
  }
};

// {a view of x, 3x}.
struct ViewOut : autograd::Function<ViewOut> {
  static std::vector<Tensor> forward(AutogradContext*, const Tensor& x) { return {x.narrow(0, 0, 2), x * 3.0}; }
  static std::vector<Tensor> backward(AutogradContext*, std::vector<Tensor> g) {
    Tensor gx = g[1] * 3.0;
    return {gx + pad_rows(g[0], gx.size(0))};
  }
  static Tensor pad_rows(const Tensor& g, int64_t n) { return cat({g, zeros({n - g.size(0)}, g.dtype())}); }
};

// A backward returning an undefined gradient past its inputs, and one that broadcasts.
struct LooseBackward : autograd::Function<LooseBackward> {
  static Tensor forward(AutogradContext*, const Tensor& x) { return x.unsqueeze(0).expand({2, 3}) * 1.0; }
  static std::vector<Tensor> backward(AutogradContext*, std::vector<Tensor> g) { return {g[0], Tensor(), Tensor()}; }
};

Tensor point(int64_t n, uint64_t seed) {
  manual_seed(seed);
  return randn({n}, kFloat64).requires_grad_();
}

TEST(CustomFunctionOutputs, BothOutputsGradientsMeetInOneBackwardCall) {
  Tensor x = point(6, 1);
  const int before = SinCos::backward_calls;
  auto out = SinCos::apply(x);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].grad_fn(), out[1].grad_fn());
  (out[0] * 3.0 + out[1].pow(2)).sum().backward();
  EXPECT_EQ(SinCos::backward_calls, before + 1);
  Tensor xd = x.detach();
  expect_close(x.grad(), values(cos(xd) * 3.0 - 2.0 * cos(xd) * sin(xd)), x.shape(), 1e-12, 1e-12);
}

TEST(CustomFunctionOutputs, AnUnusedOutputsGradientIsZerosOrUndefinedAsAsked) {
  Tensor x = point(4, 2);
  SinCos::apply(x)[1].sum().backward();
  EXPECT_EQ(SinCos::got_defined, (std::vector<bool>{true, true}));  // materialized: zeros
  expect_close(x.grad(), values(-sin(x.detach())), x.shape(), 1e-12, 1e-12);

  Tensor y = point(4, 2);
  SinCosUnmaterialized::apply(y)[1].sum().backward();
  EXPECT_EQ(SinCosUnmaterialized::got_defined, (std::vector<bool>{false, true}));
  expect_close(y.grad(), values(x.grad()), y.shape(), 1e-15, 0);
}

TEST(CustomFunctionOutputs, Gradcheck) {
  Tensor x = point(5, 3);
  manual_seed(4);
  Tensor w = randn({5}, kFloat64).requires_grad_();
  EXPECT_TRUE(autograd::gradcheck([](const std::vector<Tensor>& in) {
    auto o = SinCos::apply(in[0]);
    return o[0] * o[1] + o[1] * 2.0;
  }, {x}));
  EXPECT_TRUE(autograd::gradcheck([](const std::vector<Tensor>& in) {
    auto o = ProdSum::apply(in[0], in[1]);
    return o[0].exp() + o[1] * o[0];
  }, {x, w}));
  // Only the second output used: the first's gradient is zeros.
  EXPECT_TRUE(autograd::gradcheck([](const std::vector<Tensor>& in) { return ProdSum::apply(in[0], in[1])[1].pow(3); },
                                  {x, w}));
}

// Saved outputs come back as the outputs they are (their slot), so backward's own ops are
// differentiated through the right one.
TEST(CustomFunctionOutputs, SecondDerivativeThroughSavedOutputs) {
  Tensor x = point(5, 5);
  EXPECT_TRUE(autograd::gradgradcheck([](const std::vector<Tensor>& in) {
    auto o = SinCos::apply(in[0]);
    return o[0] * 2.0 + o[1] * o[1] * 0.5;
  }, {x}));
  // d/dx of (sin x + cos x) twice is -(sin x + cos x).
  auto o = SinCos::apply(x);
  Tensor g = autograd::grad({(o[0] + o[1]).sum()}, {x}, {}, false, false, /*create_graph=*/true)[0];
  Tensor gg = autograd::grad({g.sum()}, {x})[0];
  Tensor xd = x.detach();
  expect_close(gg, values(-(sin(xd) + cos(xd))), x.shape(), 1e-12, 1e-12);
}

TEST(CustomFunctionOutputs, NonDifferentiableOutputsRequireNoGradAndGetZeros) {
  Tensor x = tensor({1.0, 5.0, 2.0, 7.0, 3.0, 0.0}, kFloat64).reshape({2, 3}).detach().requires_grad_();
  auto out = RowMax::apply(x);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_TRUE(out[0].requires_grad());
  EXPECT_EQ(out[1].dtype(), kInt64);
  EXPECT_FALSE(out[1].requires_grad());
  EXPECT_FALSE(out[2].requires_grad());  // floating point, marked
  EXPECT_EQ(out[2].grad_fn(), nullptr);
  (out[0] * 10.0).sum().backward();
  ASSERT_EQ(RowMax::grads_seen.size(), 3u);
  EXPECT_EQ(values(RowMax::grads_seen[2]), std::vector<double>(6, 0.0));
  EXPECT_EQ(RowMax::grads_seen[1].dtype(), kInt64);
  EXPECT_EQ(values(x.grad()), (std::vector<double>{0, 10, 0, 10, 0, 0}));
}

TEST(CustomFunctionOutputs, HooksAndRetainGradSeeTheirOwnOutputsGradient) {
  Tensor x = point(3, 6);
  auto o = SinCos::apply(x);
  o[1].register_hook([](const Tensor& g) { return g * 10.0; });
  o[0].retain_grad();
  o[1].retain_grad();
  (o[0] * 2.0 + o[1] * 3.0).sum().backward();
  EXPECT_EQ(values(o[0].grad()), std::vector<double>(3, 2.0));
  EXPECT_EQ(values(o[1].grad()), std::vector<double>(3, 30.0));  // after its hook
  Tensor xd = x.detach();
  expect_close(x.grad(), values(cos(xd) * 2.0 - sin(xd) * 30.0), x.shape(), 1e-12, 1e-12);
}

TEST(CustomFunctionOutputs, AutogradGradOfEachOutput) {
  Tensor x = point(4, 7);
  auto o = SinCos::apply(x);
  Tensor loss = (o[0] * 2.0 + o[1] * o[1]).sum();
  auto g = autograd::grad({loss}, {o[1], o[0], x}, {}, /*retain_graph=*/true);
  expect_close(g[0], values(2.0 * o[1].detach()), x.shape(), 1e-15, 0);
  EXPECT_EQ(values(g[1]), std::vector<double>(4, 2.0));
  Tensor xd = x.detach();
  expect_close(g[2], values(cos(xd) * 2.0 - 2.0 * cos(xd) * sin(xd)), x.shape(), 1e-12, 1e-12);
  // Only the first output reaches the loss: the second's gradient is unused.
  auto h = autograd::grad({o[0].sum()}, {o[1]}, {}, false, /*allow_unused=*/true);
  EXPECT_FALSE(h[0].defined());
}

TEST(CustomFunctionOutputs, InPlaceChangesAndViewsOfAnOutput) {
  Tensor x = point(6, 8);
  manual_seed(9);
  Tensor w = randn({6}, kFloat64).requires_grad_();
  auto o = ProdSum::apply(x, w);
  o[1].retain_grad();
  o[1].mul_(3.0);  // the second output's history moves on; the first's stays
  (o[0].sum() + o[1].narrow(0, 2, 3).sum()).backward();
  EXPECT_EQ(values(o[1].grad()), (std::vector<double>{0, 0, 1, 1, 1, 0}));  // of its new value
  std::vector<double> expected = values(w.detach());
  for (int i = 2; i < 5; ++i) expected[i] += 3.0;
  expect_close(x.grad(), expected, x.shape(), 1e-15, 0);
  // An output saved by its function and then changed in place is caught, as any saved tensor.
  auto s = SinCos::apply(x);
  s[1].mul_(3.0);
  expect_error([&] { s[1].sum().backward(); }, "modified in place");
}

TEST(CustomFunctionOutputs, OutputsThatAreTheInputAreAliases) {
  Tensor x = point(3, 9);
  auto o = Twice::apply(x);
  EXPECT_TRUE(x.is_leaf());
  EXPECT_NE(o[0].impl(), o[1].impl());
  (o[0] + o[1] * 5.0).sum().backward();
  EXPECT_EQ(values(x.grad()), std::vector<double>(3, 11.0));
}

TEST(CustomFunctionOutputs, NoRecordingWithoutGradAndNoOutputIsAnError) {
  Tensor x = randn({3}, kFloat64);
  auto o = SinCos::apply(x);
  EXPECT_FALSE(o[0].requires_grad() || o[1].requires_grad());
  expect_error([] { Nothing::apply(ones({2}).requires_grad_()); }, "returned no tensor");
}

TEST(CustomFunctionOutputs, ASecondBackwardThroughAFreedNodeIsRefused) {
  Tensor x = point(3, 10);
  auto o = SinCos::apply(x);
  Tensor loss = (o[0] + o[1]).sum();
  loss.backward();
  expect_error([&] { o[1].sum().backward(); }, "retain_graph");
}

TEST(CustomFunctionOutputs, AnInputMarkedDirtyTakesTheFunctionAsItsHistory) {
  Tensor x = point(6, 11);
  Tensor y = x * 2.0;
  Tensor v = y.narrow(0, 1, 3);  // a view taken before the change follows it
  Tensor out = ScaleInPlace::apply(y, 3.0);
  EXPECT_EQ(out.impl(), y.impl());
  ASSERT_NE(y.grad_fn(), nullptr);
  EXPECT_NE(y.grad_fn()->name().find("ScaleInPlace"), std::string::npos);
  expect_close(y, values(x.detach() * 6.0), x.shape(), 1e-15, 0);
  (y.sum() + v.sum() * 10.0).backward();
  EXPECT_EQ(values(x.grad()), (std::vector<double>{6, 66, 66, 66, 6, 6}));
}

TEST(CustomFunctionOutputs, MarkDirtyMisuseIsAnError) {
  Tensor leaf = point(3, 12);
  expect_error([&] { ScaleInPlace::apply(leaf, 2.0); }, "a leaf tensor that requires grad was changed in place");
  Tensor base = point(4, 13) * 1.0;
  expect_error([&] { ScaleInPlace::apply(base.narrow(0, 0, 2), 2.0); }, "a view was marked dirty");
  Tensor y = point(3, 14) * 1.0;
  expect_error([&] { DirtyNotReturned::apply(y); }, "must be returned by forward as an output");
}

TEST(CustomFunctionOutputs, MarkDirtyKeepsNothingAlive) {
  std::weak_ptr<autograd::Node> node;
  std::weak_ptr<TensorImpl> out;
  {
    Tensor x = point(4, 15);
    Tensor y = x * 2.0;
    Tensor r = ScaleInPlace::apply(y, 3.0);  // saves no tensors: nothing frees its closure
    node = r.grad_fn();
    out = r.impl_ptr();
    r.sum().backward();
  }
  EXPECT_TRUE(node.expired());
  EXPECT_TRUE(out.expired());
}

TEST(CustomFunctionOutputs, MarkDirtyOnAViewIsRefusedWhateverItsBase) {
  Tensor a = zeros({4}, kFloat64);  // requires no grad, but w does: the change must reach a's history
  Tensor w = tensor({1.0, 2.0}, kFloat64).requires_grad_();
  expect_error([&] { AddInto::apply(a.narrow(0, 1, 2), w); }, "a view was marked dirty");
  Tensor b = zeros({2}, kFloat64);
  Tensor r = AddInto::apply(b, w);
  EXPECT_EQ(r.impl(), b.impl());
  ((b * b).sum() + w.sum()).backward();
  EXPECT_EQ(values(w.grad()), (std::vector<double>{3, 5}));
}

TEST(CustomFunctionOutputs, SavedTensorsAreTakenAtTheEndOfForward) {
  Tensor x = point(3, 16);
  Tensor y = x * 1.0;
  SaveThenScale::apply(y).sum().backward();
  expect_close(x.grad(), values(x.detach() * 2.0), x.shape(), 1e-15, 0);
}

TEST(CustomFunctionOutputs, ACustomFunctionCalledInForwardLeavesTheSavedOutputsHistory) {
  Tensor x = point(3, 17);
  auto gg = [&](bool nested) {
    auto o = nested ? NestedSinCos::apply(x) : SinCos::apply(x);
    Tensor loss = (o[0] * o[0] * o[1] + o[1] * 3.0).sum();
    Tensor g = autograd::grad({loss}, {x}, {}, false, false, /*create_graph=*/true)[0];
    return autograd::grad({(g * g).sum()}, {x})[0];
  };
  expect_close(gg(true), values(gg(false)), x.shape(), 1e-14, 1e-14);
}

TEST(CustomFunctionOutputs, AnOutputThatIsAnInputIsAViewOfIt) {
  // Changed in place, the change is recorded on the input: 36x^2's derivative, 72x.
  Tensor x = tensor({1.0}, kFloat64).requires_grad_();
  Tensor y = x * 2.0;
  auto o = Twice::apply(y);
  o[0].mul_(3.0);
  (y * y).sum().backward();
  EXPECT_EQ(values(x.grad()), (std::vector<double>{72}));
  // A leaf's is refused, as any view of a leaf that requires grad.
  Tensor leaf = tensor({1.0}, kFloat64).requires_grad_();
  auto p = Twice::apply(leaf);
  expect_error([&] { p[0].mul_(2.0); }, "a view of a leaf tensor");
  EXPECT_EQ(values(leaf.detach()), (std::vector<double>{1}));
}

TEST(CustomFunctionOutputs, AViewOutputFollowsItsBaseChangedInPlace) {
  Tensor x = point(4, 18);
  Tensor y = x * 1.0;
  auto o = ViewOut::apply(y);
  o[1].sum().backward(/*gradient=*/{}, /*retain_graph=*/true);
  EXPECT_EQ(values(x.grad()), std::vector<double>(4, 3.0));
  x.set_grad({});
  y.mul_(4.0);  // o[0] holds 4x now: its history is its region of y's
  o[0].sum().backward();
  EXPECT_EQ(values(x.grad()), (std::vector<double>{4, 4, 0, 0}));
}

TEST(CustomFunctionOutputs, BackwardMayReturnExtraUndefinedAndBroadcastGradients) {
  Tensor x = point(3, 19);
  LooseBackward::apply(x).sum().backward();
  EXPECT_EQ(values(x.grad()), std::vector<double>(3, 2.0));  // [2, 3] summed to [3]
}

TEST(CustomFunctionOutputs, AnUndefinedOutputGetsAnUndefinedGradient) {
  Tensor x = point(3, 20);
  auto o = WithAHole::apply(x);
  ASSERT_EQ(o.size(), 3u);
  EXPECT_FALSE(o[1].defined());
  o[2].sum().backward();
  EXPECT_FALSE(WithAHole::middle_defined);
  expect_close(x.grad(), values(x.detach() * 2.0), x.shape(), 1e-15, 0);  // g[0] materialized as zeros
}

}  // namespace
}  // namespace kiln::test
