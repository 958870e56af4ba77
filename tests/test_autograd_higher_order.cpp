// Higher-order gradients (create_graph, as torch's): derivatives of derivatives, a .grad() that
// is differentiable, gradgradcheck of the nn ops outside the op table (tests/test_gradcheck.cpp
// checks every op of the table), a CNN critic's gradient penalty against finite differences,
// saved outputs that make no reference cycle, in-place ops on views, and attention's dropout
// mask drawn again.
#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "test_util.h"

namespace kiln::test {
namespace {

using Inputs = std::vector<Tensor>;
using V = const Inputs&;

// A float64 leaf that requires grad, uniform in [lo, hi].
Tensor leaf(const Shape& shape, uint64_t seed, double lo = -1, double hi = 1) {
  std::mt19937_64 g(seed);
  std::vector<double> v;
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  for (int64_t i = 0; i < n; ++i) v.push_back(std::uniform_real_distribution<double>(lo, hi)(g));
  return tensor(v, shape, kFloat64).requires_grad_();
}

double value(const Tensor& t) { return t.item<double>(); }

TEST(HigherOrder, DerivativesOfDerivativesOfAPolynomial) {
  Tensor x = tensor({2.0}, kFloat64).requires_grad_();
  Tensor y = (x * x * x).sum();  // x^3
  Tensor d1 = autograd::grad({y}, {x}, {}, false, false, /*create_graph=*/true)[0];
  EXPECT_TRUE(d1.requires_grad());
  EXPECT_DOUBLE_EQ(value(d1), 12.0);  // 3 x^2
  Tensor d2 = autograd::grad({d1.sum()}, {x}, {}, false, false, true)[0];
  EXPECT_DOUBLE_EQ(value(d2), 12.0);  // 6 x
  Tensor d3 = autograd::grad({d2.sum()}, {x})[0];
  EXPECT_DOUBLE_EQ(value(d3), 6.0);
  EXPECT_FALSE(d3.requires_grad()) << "without create_graph the result has no history";
}

TEST(HigherOrder, BackwardWithCreateGraphLeavesADifferentiableGrad) {
  Tensor x = tensor({1.0, -2.0, 0.5}, kFloat64).requires_grad_();
  (x * x).sum().backward({}, /*retain_graph=*/false, /*create_graph=*/true);
  Tensor g = x.grad();
  ASSERT_TRUE(g.requires_grad());
  expect_close(g, {2.0, -4.0, 1.0}, {3});
  // As torch: the next backward adds d/dx sum((2x)^2) = 8x to .grad(): 10x in all.
  (g * g).sum().backward();
  expect_close(x.grad(), {10.0, -20.0, 5.0}, {3});
  x.set_grad({});  // .grad()'s history leads back to x: a cycle until reset, as in torch
}

TEST(HigherOrder, AHessianVectorProductOfAnMlp) {
  // f(x) = sum(tanh(W x + b)^2): H v by differentiating (grad f) . v, against finite differences
  // of grad f along v.
  Tensor w = leaf({3, 4}, 1), b = leaf({3}, 2), x = leaf({4}, 3), v = leaf({4}, 4).detach();
  auto f = [&](const Tensor& at) { return tanh(linear(at, w, b)).square().sum(); };
  Tensor g = autograd::grad({f(x)}, {x}, {}, false, false, true)[0];
  Tensor hv = autograd::grad({(g * v).sum()}, {x})[0];
  const double eps = 1e-6;
  auto grad_at = [&](const Tensor& at) {
    Tensor p = at.detach().requires_grad_();
    return autograd::grad({f(p)}, {p})[0];
  };
  Tensor fd = (grad_at(x.detach() + v * eps) - grad_at(x.detach() - v * eps)) / (2 * eps);
  expect_close(hv, values(fd), {4}, 1e-6, 1e-8);
}

struct Row {
  std::string name;
  std::function<Inputs()> inputs;
  std::function<Tensor(V)> fn;
};
void PrintTo(const Row& r, std::ostream* os) { *os << r.name; }

std::vector<Row> nn_rows() {
  const Tensor targets = tensor(std::vector<int64_t>{2, 0, -100, 1}, {4}, kInt64);
  const Tensor mask = tensor(std::vector<bool>{true, false, true, true, true, true}, {2, 3}, kBool);
  return {
      {"linear", [] { return Inputs{leaf({2, 3}, 1), leaf({4, 3}, 2), leaf({4}, 3)}; },
       [](V a) { return linear(a[0], a[1], a[2]); }},
      {"linear_relu", [] { return Inputs{leaf({2, 3}, 1), leaf({4, 3}, 2), leaf({4}, 3)}; },
       [](V a) { return linear(a[0], a[1], a[2], Activation::ReLU); }},
      {"linear_gelu", [] { return Inputs{leaf({2, 3}, 1), leaf({4, 3}, 2), leaf({4}, 3)}; },
       [](V a) { return linear(a[0], a[1], a[2], Activation::GELU); }},
      {"linear_gelu_tanh", [] { return Inputs{leaf({2, 3}, 1), leaf({4, 3}, 2), leaf({4}, 3)}; },
       [](V a) { return linear(a[0], a[1], a[2], Activation::GELUTanh); }},
      {"add_relu", [] { return Inputs{leaf({2, 3}, 1), leaf({2, 3}, 2)}; }, [](V a) { return add_relu(a[0], a[1]); }},
      {"layer_norm", [] { return Inputs{leaf({2, 5}, 1), leaf({5}, 2), leaf({5}, 3)}; },
       [](V a) { return layer_norm(a[0], {5}, a[1], a[2]); }},
      {"layer_norm_no_affine", [] { return Inputs{leaf({3, 2, 2}, 4)}; },
       [](V a) { return layer_norm(a[0], {2, 2}); }},
      {"cross_entropy", [] { return Inputs{leaf({4, 3}, 1)}; },
       [targets](V a) { return cross_entropy(a[0], targets); }},
      {"cross_entropy_weighted_sum",
       [] { return Inputs{leaf({4, 3}, 2)}; },
       [targets](V a) {
         return cross_entropy(a[0], targets, tensor({0.5, 2.0, 1.0}, kFloat64), Reduction::Sum);
       }},
      {"cross_entropy_label_smoothing", [] { return Inputs{leaf({4, 3}, 3)}; },
       [targets](V a) { return cross_entropy(a[0], targets, {}, Reduction::Mean, -100, 0.1); }},
      {"mse_loss", [] { return Inputs{leaf({2, 3}, 1), leaf({2, 3}, 2)}; }, [](V a) { return mse_loss(a[0], a[1]); }},
      {"bce_with_logits", [] { return Inputs{leaf({2, 3}, 1, -3, 3), leaf({2, 3}, 2, 0, 1)}; },
       [](V a) { return binary_cross_entropy_with_logits(a[0], a[1]); }},
      {"embedding", [] { return Inputs{leaf({5, 3}, 1)}; },
       [](V a) { return embedding(a[0], tensor(std::vector<int64_t>{1, 4, 1, 0}, {2, 2}, kInt64), 0).square(); }},
      {"dropout", [] { return Inputs{leaf({3, 4}, 1)}; },
       [](V a) {
         manual_seed(5);  // the same mask in every call
         return dropout(a[0], 0.4).square();
       }},
      {"masked_softmax", [] { return Inputs{leaf({2, 3}, 1)}; }, [mask](V a) { return masked_softmax(a[0], mask, 1); }},
      {"conv2d", [] { return Inputs{leaf({2, 4, 5, 5}, 1), leaf({4, 2, 3, 3}, 2), leaf({4}, 3)}; },
       [](V a) { return conv2d(a[0], a[1], a[2], {2, 2}, {1, 1}, {1, 1}, 2).square(); }},
      {"conv2d_dilated", [] { return Inputs{leaf({1, 2, 6, 6}, 4), leaf({3, 2, 2, 2}, 5)}; },
       [](V a) { return conv2d(a[0], a[1], {}, {1, 1}, {0, 0}, {2, 2}).tanh(); }},
      // Distinct values (no ties for the maxima): a permutation of a grid, scaled.
      {"max_pool2d", [] { return Inputs{leaf({1, 2, 4, 4}, 6)}; },
       [](V a) { return max_pool2d(a[0], {2, 2}, {1, 1}).square(); }},
      {"avg_pool2d", [] { return Inputs{leaf({1, 2, 5, 5}, 7)}; },
       [](V a) { return avg_pool2d(a[0], {3, 3}, {2, 2}, {1, 1}).square(); }},
      {"adaptive_avg_pool2d", [] { return Inputs{leaf({2, 2, 3, 5}, 8)}; },
       [](V a) { return adaptive_avg_pool2d(a[0], {2, 2}).square(); }},
      {"batch_norm_training", [] { return Inputs{leaf({3, 2, 2, 2}, 9), leaf({2}, 10), leaf({2}, 11)}; },
       [](V a) { return batch_norm(a[0], {}, {}, a[1], a[2], true).square(); }},
      {"batch_norm_relu_training", [] { return Inputs{leaf({3, 2, 2, 2}, 12), leaf({2}, 13), leaf({2}, 14)}; },
       [](V a) { return batch_norm_relu(a[0], {}, {}, a[1], a[2], true).square(); }},
      {"batch_norm_eval", [] { return Inputs{leaf({3, 2, 2, 2}, 15), leaf({2}, 16), leaf({2}, 17)}; },
       [](V a) {
         return batch_norm(a[0], tensor({0.1, -0.2}, kFloat64), tensor({0.8, 1.5}, kFloat64), a[1], a[2], false).tanh();
       }},
      {"attention", [] { return Inputs{leaf({2, 3, 4}, 18), leaf({2, 5, 4}, 19), leaf({2, 5, 3}, 20)}; },
       [](V a) { return scaled_dot_product_attention(a[0], a[1], a[2]); }},
      {"attention_causal_masked", [] { return Inputs{leaf({1, 4, 2}, 21), leaf({1, 4, 2}, 22), leaf({1, 4, 2}, 23)}; },
       [](V a) {
         const Tensor keep = tensor(std::vector<bool>{true, true, false, true}, {4}, kBool);
         return scaled_dot_product_attention(a[0], a[1], a[2], keep, 0.0, true);
       }},
  };
}

class HigherOrderNn : public ::testing::TestWithParam<Row> {};

TEST_P(HigherOrderNn, GradgradcheckMatchesFiniteDifferences) {
  const Row& row = GetParam();
  try {
    EXPECT_TRUE(autograd::gradgradcheck(row.fn, row.inputs()));
  } catch (const std::exception& e) {
    ADD_FAILURE() << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(HigherOrder, HigherOrderNn, ::testing::ValuesIn(nn_rows()),
                         [](const auto& info) { return info.param.name; });

TEST(HigherOrder, AGradientPenaltyOfACnnCriticMatchesFiniteDifferences) {
  // WGAN-GP's penalty, (|d critic / d x| - 1)^2, differentiated in the critic's weights (and x)
  // through the second derivatives of convolution, silu and linear.
  auto penalty = [](V a) {
    const bool outer = autograd::is_grad_enabled();  // gradcheck's finite differences turn it off
    AutoGradMode on(true);
    const Tensor& x = a[0];
    Tensor h = silu(conv2d(x, a[1], a[2], {2, 2}, {1, 1}));
    Tensor critic = linear(h.flatten(1), a[3]).sum();
    Tensor gx = autograd::grad({critic}, {x}, {}, false, false, /*create_graph=*/outer)[0];
    Tensor p = (gx.square().sum().sqrt() - 1.0).square();
    return outer ? p : p.detach();
  };
  Inputs in{leaf({1, 2, 4, 4}, 1), leaf({3, 2, 3, 3}, 2), leaf({3}, 3), leaf({1, 12}, 4)};
  EXPECT_TRUE(autograd::gradcheck(penalty, in));
}

// Whole layers as the models build them (views, in-place ReLU, residual joins, the padding mask):
// second derivatives in their input against finite differences.
TEST(HigherOrder, ABertLayerAndAResNetBlockHaveSecondDerivativesInTheirInput) {
  manual_seed(3);
  models::BertConfig c;
  c.hidden_size = 8;
  c.num_attention_heads = 2;
  c.intermediate_size = 16;
  c.hidden_dropout_prob = c.attention_probs_dropout_prob = 0;
  models::BertLayer layer(c);
  layer->to(kFloat64);
  const Tensor mask = tensor(std::vector<bool>{true, true, false, true, true, true}, {2, 1, 1, 3}, kBool);
  EXPECT_TRUE(autograd::gradgradcheck([&](V a) { return layer->forward(a[0], mask); }, {leaf({2, 3, 8}, 1)}));
  models::BasicBlock block(4, 4);
  block->to(kFloat64);
  block->train();  // batch statistics: every element's gradient depends on the whole batch
  EXPECT_TRUE(autograd::gradgradcheck([&](V a) { return block->forward(a[0]); }, {leaf({2, 4, 3, 3}, 2)}));
}

TEST(HigherOrder, ACustomFunctionsBackwardIsDifferentiatedToo) {
  struct Cube : autograd::Function<Cube> {
    static Tensor forward(autograd::AutogradContext* ctx, const Tensor& x) {
      ctx->save_for_backward({x});
      return x * x * x;
    }
    static std::vector<Tensor> backward(autograd::AutogradContext* ctx, std::vector<Tensor> g) {
      const Tensor x = ctx->get_saved_variables()[0];
      return {g[0] * x * x * 3.0};
    }
  };
  Tensor x = tensor({1.5, -1.0}, kFloat64).requires_grad_();
  Tensor d1 = autograd::grad({Cube::apply(x).sum()}, {x}, {}, false, false, true)[0];
  expect_close(d1, {6.75, 3.0}, {2});
  expect_close(autograd::grad({d1.sum()}, {x})[0], {9.0, -6.0}, {2});  // 6x
}

TEST(HigherOrder, AnOutputSavedByItsOwnOpMakesNoCycle) {
  // exp saves its output; under create_graph that output comes back with exp's node as its
  // history, held weakly: once the tensors are dropped, the node and the output are freed.
  Tensor x = tensor({0.5, 1.0}, kFloat64).requires_grad_();
  std::weak_ptr<autograd::Node> node;
  std::weak_ptr<TensorImpl> out;
  {
    Tensor y = x.exp();
    node = y.grad_fn();
    out = y.impl_ptr();
    Tensor d1 = autograd::grad({y.sum()}, {x}, {}, false, false, true)[0];  // exp(x), through y
    expect_close(autograd::grad({d1.sum()}, {x})[0], values(x.detach().exp()), {2});
  }
  EXPECT_TRUE(node.expired());
  EXPECT_TRUE(out.expired());
}

// exp_, sqrt_ and rsqrt_ on views keep their result, a view of the tensor they changed: under
// create_graph it comes back as its region of that tensor's new history (CopySlices), as torch's.
TEST(HigherOrder, InPlaceOpsOnViewsThatSaveTheirResult) {
  manual_seed(8);
  Tensor x = rand({3, 4}, kFloat64).add(0.5).requires_grad_();
  EXPECT_TRUE(autograd::gradgradcheck([](const std::vector<Tensor>& in) {
    // (Each on its own tensor: a later in-place change to one would change what the first saved.)
    Tensor a = in[0] * 1.5, b = in[0] * 0.7, c = in[0] + 1.0;
    a.narrow(0, 1, 1).exp_();        // a row
    b.select(1, 2).sqrt_();          // a strided column
    c.t().narrow(0, 0, 2).rsqrt_();  // through a transpose
    return a * b + c * a.sum({0}, true);
  }, {x}));
  // The same function written out of place gives the same second derivative.
  auto second = [&](bool inplace) {
    Tensor y = x * 1.5;
    if (inplace) {
      y.narrow(1, 1, 2).exp_();
    } else {
      y = cat({y.narrow(1, 0, 1), y.narrow(1, 1, 2).exp(), y.narrow(1, 3, 1)}, 1);
    }
    Tensor g = autograd::grad({(y * y).sum()}, {x}, {}, false, false, /*create_graph=*/true)[0];
    return autograd::grad({(g * g).sum()}, {x})[0];
  };
  expect_close(second(true), values(second(false)), x.shape(), 1e-12, 1e-12);
}

// create_graph through fused attention with dropout draws the forward's mask again from its
// counters: the recorded first derivative equals the fused kernel's, batch broadcast included.
TEST(HigherOrder, AttentionWithDropoutDrawsItsMaskAgain) {
  Tensor q = leaf({2, 1, 3, 4}, 3), k = leaf({1, 2, 5, 4}, 4), v = leaf({1, 2, 5, 4}, 5);
  manual_seed(11);
  Tensor out = scaled_dot_product_attention(q, k, v, {}, 0.4);
  Tensor loss = (out * out).sum();
  const auto fused = autograd::grad({loss}, {q, k, v}, {}, /*retain_graph=*/true);
  const auto recorded = autograd::grad({loss}, {q, k, v}, {}, true, false, /*create_graph=*/true);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_TRUE(recorded[i].requires_grad());
    expect_close(recorded[i], values(fused[i]), fused[i].shape(), 1e-12, 1e-12);
  }
  // Everything dropped: zeros, and second derivatives of zero (not 0 * an infinite scale).
  Tensor out1 = scaled_dot_product_attention(q, k, v, {}, 1.0);
  Tensor g1 = autograd::grad({(out1 * out1).sum() + out1.sum()}, {q}, {}, false, false, /*create_graph=*/true)[0];
  const auto gg = autograd::grad({g1.sum()}, {q, k, v}, {}, false, /*allow_unused=*/true);
  for (const Tensor& t : gg) {
    if (t.defined()) {
      EXPECT_EQ(t.abs().sum().item<double>(), 0.0);
    }
  }
  EXPECT_TRUE(autograd::gradgradcheck([](V in) {
    manual_seed(12);  // the same mask in every call
    return scaled_dot_product_attention(in[0], in[1], in[2], {}, 0.3, /*is_causal=*/true);
  }, {leaf({1, 2, 3, 4}, 6), leaf({1, 2, 3, 4}, 7), leaf({1, 2, 3, 4}, 8)}));
}

// The ops whose recorded backward differentiates the op itself (attention, batch norm) take each
// argument's own partial derivative: one tensor as query, key and value, and batch norms sharing
// weights (the second's input made with them), give the same first derivatives recorded or not.
TEST(HigherOrder, RecordedGradientsOfOneTensorInSeveralArguments) {
  Tensor x = leaf({1, 2, 5, 4}, 9);
  const auto self_attention = [&] { return (scaled_dot_product_attention(x, x, x) * x).sum(); };
  const Tensor fused = autograd::grad({self_attention()}, {x})[0];
  const Tensor recorded = autograd::grad({self_attention()}, {x}, {}, false, false, /*create_graph=*/true)[0];
  expect_close(recorded, values(fused), fused.shape(), 1e-12, 1e-12, "q = k = v");

  Tensor w = leaf({3}, 10), b = leaf({3}, 11), img = leaf({2, 3, 4, 4}, 12);
  const Tensor none;
  const auto twice = [&] {
    Tensor h = batch_norm(img, none, none, w, b, /*training=*/true);
    return (batch_norm(h * h, none, none, w, b, true) * img).sum();
  };
  const auto plain = autograd::grad({twice()}, {w, b, img});
  const auto rec = autograd::grad({twice()}, {w, b, img}, {}, false, false, /*create_graph=*/true);
  for (size_t i = 0; i < plain.size(); ++i)
    expect_close(rec[i], values(plain[i]), plain[i].shape(), 1e-10, 1e-12, "batch norms sharing weights, " +
                 std::to_string(i));
}

}  // namespace
}  // namespace kiln::test
