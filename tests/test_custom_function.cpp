// kiln::autograd::Function: user-written differentiable ops, as torch::autograd::Function.
#include <gtest/gtest.h>

#include "kiln/kiln.h"
#include "test_util.h"

namespace kiln::test {
namespace {

using autograd::AutogradContext;

// x * sigmoid(beta * x), with a hand-written gradient.
struct Swish : autograd::Function<Swish> {
  static Tensor forward(AutogradContext* ctx, const Tensor& x, double beta) {
    ctx->save_for_backward({x});
    ctx->saved_data["beta"] = beta;
    return x * sigmoid(x * beta);
  }
  static std::vector<Tensor> backward(AutogradContext* ctx, std::vector<Tensor> grad_outputs) {
    Tensor x = ctx->get_saved_variables()[0];
    const double beta = ctx->saved_data["beta"];
    Tensor s = sigmoid(x * beta);
    return {grad_outputs[0] * (s + x * beta * s * (1 - s)), Tensor()};  // one per argument, as libtorch
  }
};

// a * b + a, returning one gradient per tensor argument and none where not needed.
struct MulAdd : autograd::Function<MulAdd> {
  static inline int backward_calls = 0;
  static Tensor forward(AutogradContext* ctx, const Tensor& a, const Tensor& b) {
    ctx->save_for_backward({a, b});
    return a * b + a;
  }
  static std::vector<Tensor> backward(AutogradContext* ctx, std::vector<Tensor> g) {
    ++backward_calls;
    auto saved = ctx->get_saved_variables();
    return {ctx->needs_input_grad(0) ? g[0] * (saved[1] + 1) : Tensor(),
            ctx->needs_input_grad(1) ? g[0] * saved[0] : Tensor()};
  }
};

// A backward that returns its gradient in float64 for a float32 input.
struct DoubleGrad : autograd::Function<DoubleGrad> {
  static Tensor forward(AutogradContext*, const Tensor& x) { return x * 2.0; }
  static std::vector<Tensor> backward(AutogradContext*, std::vector<Tensor> g) { return {(g[0] * 2.0).to(kFloat64)}; }
};

TEST(CustomFunction, GradientsTakeTheInputsDtype) {
  Tensor x = ones({3}).requires_grad_();
  DoubleGrad::apply(x).sum().backward();
  EXPECT_EQ(x.grad().dtype(), kFloat32);  // cast, as PyTorch's validate_outputs
  expect_close(x.grad(), {2, 2, 2}, {3});
}

// A gradient returned for an input that needs none (an index) is ignored, whatever it is.
struct IndexGrad : autograd::Function<IndexGrad> {
  static Tensor forward(AutogradContext*, const Tensor& x, const Tensor&) { return x * 2.0; }
  static std::vector<Tensor> backward(AutogradContext*, std::vector<Tensor> g) {
    return {g[0] * 2.0, zeros({5}, kInt64)};
  }
};

TEST(CustomFunction, AGradientForAnInputThatNeedsNoneIsIgnored) {
  Tensor x = ones({3}).requires_grad_();
  IndexGrad::apply(x, zeros({3}, kInt64)).sum().backward();
  expect_close(x.grad(), {2, 2, 2}, {3});
}

TEST(CustomFunction, GradientMatchesTheComposedOps) {
  manual_seed(0);
  Tensor x = randn({5, 7}, kFloat64).requires_grad_();
  Tensor y = Swish::apply(x, 1.5);
  EXPECT_EQ(y.grad_fn()->name(), "kiln::test::(anonymous namespace)::Swish");
  y.pow(2).sum().backward();
  Tensor x2 = x.detach().requires_grad_();
  (x2 * sigmoid(x2 * 1.5)).pow(2).sum().backward();
  expect_close(x.grad(), values(x2.grad()), x.shape(), 1e-12, 1e-12);
}

TEST(CustomFunction, Gradcheck) {
  manual_seed(1);
  Tensor a = randn({3, 4}, kFloat64).requires_grad_(), b = randn({3, 4}, kFloat64).requires_grad_();
  EXPECT_TRUE(autograd::gradcheck([](const std::vector<Tensor>& in) { return MulAdd::apply(in[0], in[1]); }, {a, b}));
  EXPECT_TRUE(autograd::gradcheck([](const std::vector<Tensor>& in) { return Swish::apply(in[0], -0.7); }, {a}));
}

TEST(CustomFunction, OnlyInputsThatNeedGradGetOne) {
  Tensor a = ones({2, 2}).requires_grad_(), b = full({2, 2}, 3.0);
  MulAdd::apply(a, b).sum().backward();
  expect_close(a.grad(), {4, 4, 4, 4}, {2, 2});
  EXPECT_FALSE(b.grad().defined());
}

TEST(CustomFunction, NoRecordingWithoutGrad) {
  const int before = MulAdd::backward_calls;
  Tensor a = ones({2}), b = ones({2});
  Tensor y = MulAdd::apply(a, b);
  EXPECT_FALSE(y.requires_grad());
  {
    NoGradGuard ng;
    Tensor c = ones({2}).requires_grad_();
    EXPECT_FALSE(MulAdd::apply(c, b).requires_grad());
  }
  EXPECT_EQ(MulAdd::backward_calls, before);
}

struct Identity : autograd::Function<Identity> {
  static Tensor forward(AutogradContext*, const Tensor& x) { return x; }
  static std::vector<Tensor> backward(AutogradContext*, std::vector<Tensor> g) { return {g[0] * 2}; }
};

// A custom function that saved no tensors can be passed by a second backward; one that saved
// some cannot (its saved tensors are freed), as in PyTorch.
TEST(CustomFunction, OnlyFunctionsThatSavedTensorsRefuseASecondBackward) {
  Tensor x = ones({3}).requires_grad_();
  Tensor y = Identity::apply(x).sum();
  y.backward();
  y.backward();
  expect_close(x.grad(), {4, 4, 4}, {3});

  Tensor a = ones({2}).requires_grad_(), b = ones({2}).requires_grad_();
  Tensor z = MulAdd::apply(a, b).sum();
  z.backward();
  expect_error([&] { z.backward(); }, "retain_graph");
}

TEST(CustomFunction, ReturningAnInputLeavesTheInputAlone) {
  Tensor x = ones({3}).requires_grad_();
  Tensor y = Identity::apply(x);
  EXPECT_TRUE(x.is_leaf());
  EXPECT_FALSE(y.is_leaf());
  y.sum().backward();
  expect_close(x.grad(), {2, 2, 2}, {3});
}

struct WrongCount : autograd::Function<WrongCount> {
  static Tensor forward(AutogradContext*, const Tensor& x, const Tensor& w) { return x * w; }
  static std::vector<Tensor> backward(AutogradContext*, std::vector<Tensor> g) { return {g[0]}; }
};
struct WrongShape : autograd::Function<WrongShape> {
  static Tensor forward(AutogradContext*, const Tensor& x) { return x.sum(); }
  static std::vector<Tensor> backward(AutogradContext*, std::vector<Tensor> g) { return {g[0]}; }
};

TEST(CustomFunction, BadBackwardIsAnErrorNamingTheFunction) {
  Tensor x = ones({2, 3}).requires_grad_(), w = ones({2, 3}).requires_grad_();
  expect_error([&] { WrongCount::apply(x, w).sum().backward(); }, "WrongCount] backward returned 1 gradient(s) for 2");
  expect_error([&] { WrongShape::apply(x).backward(); }, "WrongShape] backward returned a gradient of shape [] for tensor input 0 of shape [2, 3]");
}

// An integer output (an argmax) has no gradient and does not require grad, as torch's.
struct ArgMax : autograd::Function<ArgMax> {
  static Tensor forward(AutogradContext*, const Tensor& x) { return argmax(x, 0); }
  static std::vector<Tensor> backward(AutogradContext*, std::vector<Tensor>) { return {Tensor()}; }
};

TEST(CustomFunction, AnIntegerOutputDoesNotRequireGrad) {
  Tensor x = tensor({1.0f, 3.0f, 2.0f}).requires_grad_();
  Tensor i = ArgMax::apply(x);
  EXPECT_EQ(i.dtype(), kInt64);
  EXPECT_FALSE(i.requires_grad());
  EXPECT_EQ(i.grad_fn(), nullptr);
  i.requires_grad_(false);  // refused as a non-leaf's before
  index_select(x, 0, i.reshape({1})).sum().backward();
  EXPECT_EQ(values(x.grad()), (std::vector<double>{0, 1, 0}));
}

TEST(CustomFunction, SavedTensorChangedInPlaceIsAnError) {
  Tensor a = ones({2}).requires_grad_(), b = ones({2});
  Tensor y = MulAdd::apply(a, b);
  b.add_(1);
  expect_error([&] { y.sum().backward(); }, "modified in place");
}

// saved_data holds what libtorch's IValue holds there: numbers, bools, strings, shapes, tensors.
struct SumToShape : autograd::Function<SumToShape> {
  static Tensor forward(AutogradContext* ctx, const Tensor& x, int64_t dim, bool keepdim) {
    ctx->saved_data["shape"] = x.shape();
    ctx->saved_data["dim"] = dim;
    ctx->saved_data["keepdim"] = keepdim;
    ctx->saved_data["scale"] = 0.5f;
    ctx->saved_data["name"] = "sum";
    ctx->saved_data["offset"] = ones({1}, x.dtype());
    return x.sum({dim}, keepdim) * 0.5;
  }
  static std::vector<Tensor> backward(AutogradContext* ctx, std::vector<Tensor> g) {
    auto& d = ctx->saved_data;
    EXPECT_EQ(d["name"].toStringRef(), "sum");
    EXPECT_TRUE(d["offset"].isTensor());
    Tensor gx = d["keepdim"].toBool() ? g[0] : g[0].unsqueeze(d["dim"].toInt());
    Shape shape;
    for (int64_t n : d["shape"].toIntVector()) shape.push_back(n);
    return {gx.expand(shape) * d["scale"] * d["offset"].toTensor(), Tensor(), Tensor()};
  }
};

TEST(CustomFunction, SavedDataHoldsNumbersBoolsStringsShapesAndTensors) {
  Tensor x = ones({2, 3}).requires_grad_();
  SumToShape::apply(x, int64_t{1}, false).sum().backward();
  expect_close(x.grad(), std::vector<double>(6, 0.5), {2, 3});
  autograd::SavedValue v = 3;
  EXPECT_EQ(v.toDouble(), 3.0);  // an int is a number too
  const double d = v;
  EXPECT_EQ(d, 3.0);
  expect_error([&] { (void)v.toBool(); }, "[saved_data] expected a bool but the value holds int");
  expect_error([] { (void)autograd::SavedValue().toTensor(); }, "expected a tensor but the value holds nothing");
}

}  // namespace
}  // namespace kiln::test
