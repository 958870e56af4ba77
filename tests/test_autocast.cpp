// kiln::AutocastGuard: the thread-local mode, the per-op casting policy, backward outside
// autocast, and small CNN / BERT training steps in bfloat16 against float32.
#include <cmath>
#include <thread>

#include "autograd/function.h"
#include "kiln/models.h"
#include "kiln/nn.h"
#include "kiln/optim.h"
#include "test_util.h"

namespace kiln {
namespace {

using test::expect_error;

// ||a - b|| / ||b|| over all elements, in double.
double rel_error(const Tensor& a, const Tensor& b) {
  std::vector<double> x = test::values(a), y = test::values(b);
  EXPECT_EQ(x.size(), y.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
    num += (x[i] - y[i]) * (x[i] - y[i]);
    den += y[i] * y[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

double cosine(const Tensor& a, const Tensor& b) {
  std::vector<double> x = test::values(a), y = test::values(b);
  double xy = 0, xx = 0, yy = 0;
  for (size_t i = 0; i < x.size(); ++i) xy += x[i] * y[i], xx += x[i] * x[i], yy += y[i] * y[i];
  return xy / std::sqrt(std::max(xx * yy, 1e-300));
}

TEST(Autocast, GuardNestsAndRestores) {
  EXPECT_FALSE(autocast_enabled());
  EXPECT_EQ(autocast_dtype(kCPU), kBFloat16);
  {
    AutocastGuard outer(kFloat16);
    EXPECT_TRUE(autocast_enabled());
    EXPECT_EQ(autocast_dtype(kCPU), kFloat16);
    {
      AutocastGuard inner(kBFloat16, /*enabled=*/false);
      EXPECT_FALSE(autocast_enabled());
      {
        AutocastGuard innermost(kBFloat16);
        EXPECT_TRUE(autocast_enabled());
        EXPECT_EQ(autocast_dtype(kCPU), kBFloat16);
      }
      EXPECT_FALSE(autocast_enabled());
    }
    EXPECT_TRUE(autocast_enabled());
    EXPECT_EQ(autocast_dtype(kCPU), kFloat16);
  }
  EXPECT_FALSE(autocast_enabled());
  EXPECT_EQ(autocast_dtype(kCPU), kBFloat16);
}

// An enabled guard takes the 16-bit types; a disabled one any (torch.autocast(dtype=float32,
// enabled=False)), so AutocastGuard g(amp ? kBFloat16 : kFloat32, amp) works with amp off.
TEST(Autocast, AnEnabledGuardTakesOnlyHalfTypes) {
  expect_error([] { AutocastGuard g(kFloat32); }, "[AutocastGuard] autocast runs in bfloat16 or float16, got float32");
  expect_error([] { AutocastGuard g(kCUDA, kFloat64); }, "got float64");
  EXPECT_FALSE(autocast_enabled());  // a failed guard leaves the mode alone
  AutocastGuard outer(kFloat16);
  {
    AutocastGuard off(kFloat32, false);
    EXPECT_FALSE(autocast_enabled());
    EXPECT_EQ(autocast_dtype(kCPU), kFloat16);  // the dtype there was
  }
  EXPECT_TRUE(autocast_enabled());
}

// A guard for one device type restores that type only, as torch.autocast's exit: released out of
// order (guards held in members), the CUDA guard's mode outlived both.
TEST(Autocast, GuardsReleasedOutOfOrderRestoreTheirOwnType) {
  auto cuda = std::make_unique<AutocastGuard>(kCUDA, kFloat16);
  auto cpu = std::make_unique<AutocastGuard>(kCPU, kBFloat16);
  cuda.reset();
  EXPECT_FALSE(autocast_enabled(kCUDA));
  EXPECT_TRUE(autocast_enabled(kCPU));
  cpu.reset();
  EXPECT_FALSE(autocast_enabled());
  EXPECT_EQ(autocast_dtype(kCUDA), kBFloat16);
}

// number / tensor is on the float32 list (torch's reciprocal(t) * number): 1 / h of a float16 h
// near 1e-5 is finite, as reciprocal(h) is; tensor / number keeps its dtype.
TEST(Autocast, ANumberDividedByAHalfTensorRunsInFloat32) {
  for (Device dev : test::devices()) {
    const Tensor h = full({4}, 1e-5, TensorOptions(kFloat16).device(dev));
    AutocastGuard g(kFloat16);
    const Tensor r = 1.0 / h;
    EXPECT_EQ(r.dtype(), kFloat32) << dev.str();
    EXPECT_EQ(test::values(r), test::values(reciprocal(h))) << dev.str();
    EXPECT_TRUE(std::isfinite(test::values(r)[0])) << dev.str();
    EXPECT_EQ((h / 2.0).dtype(), kFloat16);
  }
}

// scatter_add is on autocast's promote list: a 16-bit src into a float32 accumulator runs in
// float32 (it was an error), each gradient in its input's dtype.
TEST(Autocast, ScatterAddPromotes) {
  Tensor acc = zeros({2, 3}).requires_grad_();
  Tensor src = tensor({1.0f, 2.0f, 3.0f}).reshape({1, 3}).to(kBFloat16).detach().requires_grad_();
  Tensor out;
  {
    AutocastGuard g;
    out = scatter_add(acc, 0, tensor({1, 0, 1}).reshape({1, 3}), src);
  }
  EXPECT_EQ(out.dtype(), kFloat32);
  EXPECT_EQ(test::values(out), (std::vector<double>{0, 2, 0, 1, 0, 3}));
  out.sum().backward();
  EXPECT_EQ(acc.grad().dtype(), kFloat32);
  EXPECT_EQ(src.grad().dtype(), kBFloat16);
  expect_error([&] { scatter_add(zeros({2, 3}), 0, tensor({1, 0, 1}).reshape({1, 3}), src.detach()); },
               "[scatter_add] src has dtype bfloat16 but the tensor has float32");  // without autocast
}

// The attention path for a mask that needs a gradient (a learned bias) computes in float32 once
// its inputs are lowered, as the fused path does: under autocast its products ran in bfloat16
// again (an error 5x the fused path's).
TEST(Autocast, AttentionWithALearnedBiasComputesInFloat32) {
  manual_seed(3);
  const Tensor q = randn({1, 2, 16, 32}) * 3, k = randn({1, 2, 16, 32}) * 3, v = randn({1, 2, 16, 32});
  const Tensor bias = randn({16, 16});
  Tensor fused, learned;
  {
    AutocastGuard g;
    fused = scaled_dot_product_attention(q, k, v, bias);
    learned = scaled_dot_product_attention(q, k, v, bias.clone().requires_grad_());
  }
  // The float32 reference on the inputs autocast rounded.
  const auto r = [](const Tensor& t) { return t.to(kBFloat16).to(kFloat64); };
  const Tensor want = scaled_dot_product_attention(r(q), r(k), r(v), r(bias));
  const auto rel = [&](const Tensor& t) {
    return (t.to(kFloat64) - want).abs().max().item<double>() / want.abs().max().item<double>();
  };
  EXPECT_LT(rel(learned), 4e-3);
  EXPECT_LT(rel(fused), 4e-3);
}

// torch.autocast(device_type): a guard for one device type changes only the ops on its tensors,
// and the guards of different device types nest independently; AutocastGuard(dtype) sets all.
TEST(Autocast, AGuardForOneDeviceTypeLeavesTheOthersAlone) {
  Tensor a = randn({3, 4}), b = randn({4, 2});
  {
    AutocastGuard cuda(kCUDA, kFloat16);
    EXPECT_TRUE(autocast_enabled(kCUDA));
    EXPECT_FALSE(autocast_enabled(kCPU));
    EXPECT_TRUE(autocast_enabled());
    EXPECT_EQ(autocast_dtype(kCUDA), kFloat16);
    EXPECT_EQ(matmul(a, b).dtype(), kFloat32);  // CPU work in a CUDA autocast region keeps float32
    EXPECT_EQ(softmax(a.to(kBFloat16), 1).dtype(), kBFloat16);
    {
      AutocastGuard cpu(kCPU, kBFloat16);
      EXPECT_EQ(matmul(a, b).dtype(), kBFloat16);
      EXPECT_EQ(autocast_dtype(kCUDA), kFloat16);
      {
        AutocastGuard cuda_off(kCUDA, kFloat16, /*enabled=*/false);
        EXPECT_FALSE(autocast_enabled(kCUDA));
        EXPECT_EQ(matmul(a, b).dtype(), kBFloat16);
      }
      EXPECT_TRUE(autocast_enabled(kCUDA));
    }
    EXPECT_FALSE(autocast_enabled(kCPU));
    {
      AutocastGuard all(kBFloat16);
      EXPECT_TRUE(autocast_enabled(kCPU));
      EXPECT_EQ(autocast_dtype(kCUDA), kBFloat16);
      {
        AutocastGuard none(kBFloat16, /*enabled=*/false);
        EXPECT_FALSE(autocast_enabled());
      }
    }
    EXPECT_EQ(autocast_dtype(kCUDA), kFloat16);
    EXPECT_FALSE(autocast_enabled(kCPU));
  }
  EXPECT_FALSE(autocast_enabled());
}

TEST(Autocast, StateIsPerThread) {
  AutocastGuard g(kFloat16);
  bool other_enabled = true;
  ScalarType other_dtype = kFloat16;
  ScalarType other_out = kFloat32;
  std::thread t([&] {
    other_enabled = autocast_enabled();
    other_dtype = autocast_dtype(kCPU);
    other_out = matmul(ones({2, 2}), ones({2, 2})).dtype();
  });
  t.join();
  EXPECT_FALSE(other_enabled);
  EXPECT_EQ(other_dtype, kBFloat16);
  EXPECT_EQ(other_out, kFloat32);
  EXPECT_TRUE(autocast_enabled());
  EXPECT_EQ(matmul(ones({2, 2}), ones({2, 2})).dtype(), kFloat16);
}

class AutocastLower : public ::testing::TestWithParam<ScalarType> {};

TEST_P(AutocastLower, MatmulLinearConvAttentionRunInTheAutocastType) {
  const ScalarType dt = GetParam();
  manual_seed(3);
  Tensor a = randn({4, 5, 32}), b = randn({32, 24}), b3 = randn({4, 32, 24});
  Tensor w = randn({24, 32}), bias = randn({24});
  Tensor x = randn({2, 3, 9, 9}), cw = randn({8, 3, 3, 3}), cb = randn({8});
  Tensor q = randn({2, 2, 6, 16}), k = randn({2, 2, 7, 16}), v = randn({2, 2, 7, 16});
  Tensor fmask = rand({6, 7}) * -2.0;  // a float mask follows q, k and v into the autocast type
  struct Case {
    const char* name;
    std::function<Tensor()> fn;
  };
  std::vector<Case> cases{
      {"matmul", [&] { return matmul(a, b); }},
      {"matmul batched", [&] { return matmul(a, b3); }},
      {"mm", [&] { return mm(a[0], b); }},
      {"bmm", [&] { return bmm(a, b3); }},
      {"linear", [&] { return linear(a, w, bias); }},
      {"linear gelu", [&] { return linear(a, w, bias, Activation::GELU); }},
      {"conv2d", [&] { return conv2d(x, cw, cb, {1, 1}, {1, 1}); }},
      {"sdpa", [&] { return scaled_dot_product_attention(q, k, v, fmask); }},
  };
  for (const Case& c : cases) {
    Tensor ref = c.fn();
    ASSERT_EQ(ref.dtype(), kFloat32) << c.name;
    Tensor got;
    {
      AutocastGuard g(dt);
      got = c.fn();
    }
    EXPECT_EQ(got.dtype(), dt) << c.name;
    EXPECT_EQ(got.shape(), ref.shape()) << c.name;
    EXPECT_LT(rel_error(got, ref), 1e-2) << c.name;
    EXPECT_GT(rel_error(got, ref), 0.0) << c.name << ": no rounding at all, was it cast?";
  }
}

INSTANTIATE_TEST_SUITE_P(Types, AutocastLower, ::testing::Values(kBFloat16, kFloat16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(Autocast, Float64IsNeverCast) {
  AutocastGuard g(kBFloat16);
  Tensor a = randn({3, 4}, kFloat64), b = randn({4, 2}, kFloat64);
  EXPECT_EQ(matmul(a, b).dtype(), kFloat64);
  EXPECT_EQ(softmax(a, 1).dtype(), kFloat64);
  // integer operands stay integers
  EXPECT_EQ(matmul(ones({2, 2}, kInt64), ones({2, 2}, kInt64)).dtype(), kInt64);
}

TEST(Autocast, NormsSoftmaxAndLossesRunInFloat32) {
  manual_seed(5);
  Tensor x = randn({6, 10}).to(kBFloat16), gamma = randn({10}).to(kBFloat16), beta = randn({10}).to(kBFloat16);
  Tensor target = randint(0, 10, {6});
  Tensor mask = rand({6, 10}) > 0.3;
  // The float32 results of the same (bf16-representable) values.
  Tensor xf = x.to(kFloat32), gf = gamma.to(kFloat32), bf = beta.to(kFloat32);
  struct Case {
    const char* name;
    std::function<Tensor(const Tensor&, const Tensor&, const Tensor&)> fn;
  };
  std::vector<Case> cases{
      {"layer_norm", [](const Tensor& t, const Tensor& g, const Tensor& b) { return layer_norm(t, {10}, g, b); }},
      {"softmax", [](const Tensor& t, const Tensor&, const Tensor&) { return softmax(t, 1); }},
      {"log_softmax", [](const Tensor& t, const Tensor&, const Tensor&) { return log_softmax(t, 1); }},
      {"masked_softmax", [&](const Tensor& t, const Tensor&, const Tensor&) { return masked_softmax(t, mask, 1); }},
      {"cross_entropy", [&](const Tensor& t, const Tensor&, const Tensor&) { return cross_entropy(t, target); }},
      {"cross_entropy smoothed weighted",
       [&](const Tensor& t, const Tensor& g, const Tensor&) {
         return cross_entropy(t, target, g.abs(), Reduction::Mean, -100, 0.1);
       }},
      {"nll_loss", [&](const Tensor& t, const Tensor&, const Tensor&) { return nll_loss(t, target); }},
      {"mse_loss", [](const Tensor& t, const Tensor&, const Tensor& b) { return mse_loss(t, b); }},
      // torch.autocast's float32 list beyond norms and losses (exp overflows float16 past 11)
      {"exp", [](const Tensor& t, const Tensor&, const Tensor&) { return exp(t); }},
      {"expm1", [](const Tensor& t, const Tensor&, const Tensor&) { return expm1(t); }},
      {"log", [](const Tensor& t, const Tensor&, const Tensor&) { return log(t.abs()); }},
      {"log1p", [](const Tensor& t, const Tensor&, const Tensor&) { return log1p(t.abs()); }},
      {"rsqrt", [](const Tensor& t, const Tensor&, const Tensor&) { return rsqrt(t.abs()); }},
      {"reciprocal", [](const Tensor& t, const Tensor&, const Tensor&) { return reciprocal(t); }},
      {"pow", [](const Tensor& t, const Tensor& g, const Tensor&) { return pow(t.abs(), g) + pow(t, 3.0); }},
      {"sum", [](const Tensor& t, const Tensor&, const Tensor&) { return sum(t, {1}); }},
      {"prod", [](const Tensor& t, const Tensor&, const Tensor&) { return prod(t, {1}); }},
      {"norm", [](const Tensor& t, const Tensor&, const Tensor&) { return norm(t, 2.0, {1}); }},
      {"logsumexp", [](const Tensor& t, const Tensor&, const Tensor&) { return logsumexp(t, {1}); }},
  };
  for (const Case& c : cases) {
    Tensor ref = c.fn(xf, gf, bf);
    Tensor plain = c.fn(x, gamma, beta);
    Tensor got;
    {
      AutocastGuard g(kBFloat16);
      got = c.fn(x, gamma, beta);
    }
    EXPECT_EQ(plain.dtype(), kBFloat16) << c.name << " without autocast keeps bfloat16";
    EXPECT_EQ(got.dtype(), kFloat32) << c.name;
    // the same float32 computation on the same values
    EXPECT_LT(rel_error(got, ref), 1e-6) << c.name;
  }
}

// mean is not on torch.autocast's float32 list: it keeps the 16-bit dtype.
TEST(Autocast, MeanKeepsItsDtype) {
  Tensor x = full({4, 3}, 1.5).to(kFloat16);
  AutocastGuard g(kFloat16);
  EXPECT_EQ(mean(x).dtype(), kFloat16);
  EXPECT_EQ(sum(x).dtype(), kFloat32);
}

// Losses of a model held in float16 (no autocast) are summed in float32 and rounded once, as
// PyTorch's kernels accumulate: 8192 targets at a loss near 10 would sum past float16's 65504.
TEST(Autocast, HalfLossesAccumulateInFloat32) {
  Tensor logits = zeros({8192, 3}, kFloat16), target = zeros({8192}, kInt64);
  logits.narrow(1, 1, 2).fill_(10.0);  // -log p[0] = log(1 + 2 e^10) = 10.69
  const double want = std::log(1 + 2 * std::exp(10.0));
  for (Reduction r : {Reduction::Mean, Reduction::Sum}) {
    for (double smoothing : {0.0, 0.1}) {
      Tensor loss = cross_entropy(logits, target, {}, r, -100, smoothing);
      EXPECT_EQ(loss.dtype(), kFloat16);
      const double v = loss.item<double>();
      if (smoothing == 0.0 && r == Reduction::Mean) {
        EXPECT_NEAR(v, want, 0.01);
      }
      if (r == Reduction::Mean) {
        EXPECT_TRUE(std::isfinite(v)) << "smoothing " << smoothing;
      }
      if (r == Reduction::Sum) {
        EXPECT_TRUE(std::isinf(v)) << "the sum itself is past float16";
      }
    }
  }
  EXPECT_NEAR(nll_loss(log_softmax(logits.to(kFloat32), 1).to(kFloat16), target).item<double>(), want, 0.01);
}

TEST(Autocast, GradientsReachFloat32ParametersInTheirDtype) {
  manual_seed(7);
  Tensor x = randn({5, 16}).requires_grad_(), w = randn({8, 16}).requires_grad_(), b = randn({8}).requires_grad_();
  Tensor y;
  {
    AutocastGuard g(kBFloat16);
    y = linear(x, w, b);
    EXPECT_EQ(y.dtype(), kBFloat16);
    Tensor loss = cross_entropy(y, zeros({5}, kInt64));
    EXPECT_EQ(loss.dtype(), kFloat32);
    loss.backward();  // inside the guard: backward still runs without autocast
  }
  ASSERT_TRUE(x.grad().defined() && w.grad().defined() && b.grad().defined());
  EXPECT_EQ(x.grad().dtype(), kFloat32);
  EXPECT_EQ(w.grad().dtype(), kFloat32);
  EXPECT_EQ(b.grad().dtype(), kFloat32);
  Tensor gx = x.grad(), gw = w.grad(), gb = b.grad();
  for (Tensor* t : {&x, &w, &b}) t->set_grad(Tensor());
  cross_entropy(linear(x, w, b), zeros({5}, kInt64)).backward();
  EXPECT_GT(cosine(gx, x.grad()), 0.99);
  EXPECT_GT(cosine(gw, w.grad()), 0.99);
  EXPECT_GT(cosine(gb, b.grad()), 0.99);
}

TEST(Autocast, BackwardRunsWithAutocastOff) {
  Tensor a = randn({3, 4}).to(kBFloat16).requires_grad_(), b = randn({4, 2}).requires_grad_();
  std::vector<bool> seen;
  AutocastGuard g(kBFloat16);
  Tensor y = matmul(a, b);  // b is cast to bfloat16 on the way in
  ASSERT_EQ(y.dtype(), kBFloat16);
  // A node of our own that notes the mode it runs in.
  Tensor probe = y.detach().clone();
  autograd::record("Probe", {&y}, probe, [&](const Tensor& gr) -> TensorList {
    seen.push_back(autocast_enabled());
    return {gr};
  });
  probe.to(kFloat32).sum().backward();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_FALSE(seen[0]);
  EXPECT_TRUE(autocast_enabled());  // and the mode is back afterwards
  EXPECT_EQ(a.grad().dtype(), kBFloat16);
  EXPECT_EQ(b.grad().dtype(), kFloat32);
}

// Loss and gradients of one step, with the parameters' .grad cleared first.
std::pair<Tensor, std::vector<Tensor>> step_grads(nn::Module& m, const std::function<Tensor()>& loss_fn) {
  for (Tensor& p : m.parameters()) p.set_grad(Tensor());
  Tensor loss = loss_fn();
  loss.backward();
  std::vector<Tensor> grads;
  for (const Tensor& p : m.parameters()) grads.push_back(p.grad());
  return {loss.detach(), grads};
}

void expect_bf16_matches_fp32(nn::Module& m, const std::function<Tensor()>& loss_fn, const char* what) {
  auto [loss32, grads32] = step_grads(m, loss_fn);
  std::pair<Tensor, std::vector<Tensor>> r16;
  {
    AutocastGuard g(kBFloat16);
    r16 = step_grads(m, loss_fn);
  }
  auto& [loss16, grads16] = r16;
  EXPECT_EQ(loss16.dtype(), kFloat32) << what;
  const double l32 = loss32.item<double>(), l16 = loss16.item<double>();
  EXPECT_NEAR(l16, l32, 2e-2 * std::abs(l32)) << what;
  auto named = m.named_parameters();
  ASSERT_EQ(grads16.size(), grads32.size());
  double max_norm = 0;
  for (const Tensor& g : grads32) max_norm = std::max(max_norm, norm(g).item<double>());
  std::vector<Tensor> flat16, flat32;
  for (size_t i = 0; i < grads16.size(); ++i) {
    const std::string& name = named[i].first;
    ASSERT_TRUE(grads16[i].defined()) << what << " " << name;
    EXPECT_EQ(grads16[i].dtype(), kFloat32) << what << " " << name;
    flat16.push_back(grads16[i].reshape({-1}));
    flat32.push_back(grads32[i].reshape({-1}));
    // A gradient that is zero up to rounding (the key bias: softmax ignores a per-row constant)
    // has no direction to compare: it must stay near zero in bf16 too.
    if (norm(grads32[i]).item<double>() < 1e-4 * max_norm) {
      EXPECT_LT(norm(grads16[i]).item<double>(), 1e-2 * max_norm) << what << " " << name;
      continue;
    }
    // PyTorch's bf16 autocast gives 0.985 for the first conv of this CNN, so per tensor 0.98.
    EXPECT_GT(cosine(grads16[i], grads32[i]), 0.98) << what << " " << name;
  }
  EXPECT_GT(cosine(cat(flat16), cat(flat32)), 0.99) << what << " all gradients";
  for (const Tensor& p : m.parameters()) EXPECT_EQ(p.dtype(), kFloat32) << what;
}

TEST(Autocast, SmallCNNTrainsInBFloat16) {
  manual_seed(11);
  auto model = models::small_cnn({.dropout = 0.0});
  Tensor x = randn({8, 1, 28, 28}), y = randint(0, 10, {8});
  auto loss_fn = [&] { return cross_entropy(model(x), y); };
  expect_bf16_matches_fp32(*model, loss_fn, "small_cnn");
  optim::SGD sgd(model->parameters(), {.lr = 0.1, .momentum = 0.9});
  std::vector<Tensor> before;
  for (const Tensor& p : model->parameters()) before.push_back(p.detach().clone());
  {
    AutocastGuard g(kBFloat16);
    sgd.zero_grad();
    loss_fn().backward();
    sgd.step();
  }
  auto params = model->parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_EQ(params[i].dtype(), kFloat32);
    EXPECT_GT(rel_error(params[i], before[i]), 0.0);
  }
}

TEST(Autocast, BertMaskedLMTrainsInBFloat16) {
  manual_seed(13);
  models::BertConfig cfg{.vocab_size = 120, .hidden_size = 64, .num_hidden_layers = 2, .num_attention_heads = 2,
                         .intermediate_size = 128, .max_position_embeddings = 32, .hidden_dropout_prob = 0.0,
                         .attention_probs_dropout_prob = 0.0};
  auto model = models::bert_for_masked_lm(cfg);
  Tensor ids = randint(1, 120, {4, 16});
  Tensor labels = where(rand({4, 16}) < 0.3, ids, -100);
  Tensor attn = arange(16).lt(12).to(kInt64).expand({4, 16}).contiguous();  // the last 4 positions padded
  auto loss_fn = [&] { return model->masked_lm_loss(ids, labels, attn); };
  expect_bf16_matches_fp32(*model, loss_fn, "bert");
  {
    AutocastGuard g(kBFloat16);
    EXPECT_EQ(model(ids, attn).dtype(), kBFloat16);  // the decoder is a linear layer
  }
  optim::AdamW adamw(model->parameters(), {.lr = 1e-3});
  double first = 0, last = 0;
  for (int s = 0; s < 3; ++s) {
    AutocastGuard g(kBFloat16);
    adamw.zero_grad();
    Tensor loss = loss_fn();
    loss.backward();
    adamw.step();
    (s == 0 ? first : last) = loss.item<double>();
  }
  EXPECT_TRUE(std::isfinite(last));
  EXPECT_LT(last, first);  // three steps on one batch lower its loss
  for (const Tensor& p : model->parameters()) EXPECT_EQ(p.dtype(), kFloat32);
}

}  // namespace
}  // namespace kiln
