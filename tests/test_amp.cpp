// kiln::amp::GradScaler against torch.amp.GradScaler's semantics: scaling and unscaling, a step
// skipped on inf/NaN with backoff, growth after growth_interval good steps, the per-optimizer
// call order, its state in a state dict, and float16 training that overflows at first and
// recovers to bfloat16's loss curve.
#include <cmath>
#include <limits>

#include "kiln/kiln.h"
#include "test_util.h"

namespace kiln::test {
namespace {

using amp::GradScaler;

// One parameter w (float32) and loss = sum(w * x): grad w = x.
struct Toy {
  Tensor w = tensor({1.0f, 2.0f, 3.0f}).requires_grad_();
  optim::SGD opt{{w}, {.lr = 0.1}};
  void backward(GradScaler& s, const Tensor& x) {
    opt.zero_grad();
    s.scale((w * x).sum()).backward();
  }
};

TEST(GradScaler, ScalesUnscalesAndSteps) {
  Toy t;
  GradScaler s({.init_scale = 1024.0});
  EXPECT_EQ(s.get_scale(), 1024.0);
  t.backward(s, tensor({0.5f, -1.0f, 2.0f}));
  expect_close(t.w.grad(), {512, -1024, 2048}, {3});  // scaled gradients
  s.unscale_(t.opt);
  expect_close(t.w.grad(), {0.5, -1, 2}, {3});  // the true ones, e.g. for clipping
  EXPECT_TRUE(s.step(t.opt));
  expect_close(t.w, {0.95, 2.1, 2.8}, {3}, 1e-6);
  s.update();
  EXPECT_EQ(s.get_scale(), 1024.0);
  EXPECT_EQ(s.growth_tracker(), 1);
}

TEST(GradScaler, SkipsTheStepOnInfOrNanAndBacksOff) {
  for (float bad : {std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    Toy t;
    GradScaler s({.init_scale = 8.0});
    t.backward(s, tensor({1.0f, bad, 1.0f}));
    EXPECT_FALSE(s.step(t.opt));  // unscale_ happens inside
    expect_close(t.w, {1, 2, 3}, {3});  // untouched
    s.update();
    EXPECT_EQ(s.get_scale(), 4.0);
    EXPECT_EQ(s.growth_tracker(), 0);
    EXPECT_EQ(s.skipped_steps(), 1);
  }
}

TEST(GradScaler, GrowsAfterGrowthIntervalGoodStepsInARow) {
  Toy t;
  GradScaler s({.init_scale = 2.0, .growth_interval = 3});
  auto good = [&] {
    t.backward(s, tensor({1.0f, 1.0f, 1.0f}));
    EXPECT_TRUE(s.step(t.opt));
    s.update();
  };
  good(), good();
  EXPECT_EQ(s.get_scale(), 2.0);
  t.backward(s, tensor({1.0f, std::numeric_limits<float>::infinity(), 1.0f}));  // resets the run
  s.step(t.opt);
  s.update();
  EXPECT_EQ(s.get_scale(), 1.0);
  good(), good();
  EXPECT_EQ(s.get_scale(), 1.0);
  good();
  EXPECT_EQ(s.get_scale(), 2.0);
  EXPECT_EQ(s.growth_tracker(), 0);
  s.update(0.25);  // an explicit scale
  EXPECT_EQ(s.get_scale(), 0.25);
  // Growth stops short of float32's range, as torch's float32 scale does (the loss is scaled by it
  // in float32: past FLT_MAX it would be inf and every step skipped).
  GradScaler big({.init_scale = std::ldexp(1.0, 127), .growth_interval = 1});
  for (int i = 0; i < 3; ++i) {
    t.backward(big, tensor({1.0f, 1.0f, 1.0f}));
    big.step(t.opt);
    big.update();
  }
  EXPECT_EQ(big.get_scale(), std::ldexp(1.0, 127));
}

// The scale is a float32 value, as torch's: each update's product is rounded to float32. Growth 3
// and backoff 0.3 end at torch 2.15's 218.69999694824219 (kept in double it was 218.7). A float64
// loss is scaled in float64, as torch promotes it; 16-bit losses in float32.
TEST(GradScaler, TheScaleIsAFloat32AsTorchs) {
  Toy t;
  GradScaler s({.init_scale = 1000.0, .growth_factor = 3.0, .backoff_factor = 0.3, .growth_interval = 1});
  for (bool inf : {true, true, false, true, false, false, true}) {
    t.backward(s, tensor({1.0f, inf ? std::numeric_limits<float>::infinity() : 1.0f, 1.0f}));
    s.step(t.opt);
    s.update();
  }
  EXPECT_EQ(s.get_scale(), 218.69999694824219);
  EXPECT_EQ(s.get_scale(), static_cast<double>(static_cast<float>(s.get_scale())));
  GradScaler d({.init_scale = 0.1});
  EXPECT_EQ(d.get_scale(), static_cast<double>(0.1f));
  EXPECT_EQ(d.scale(scalar_tensor(1.0 / 3, kFloat64)).dtype(), kFloat64);
  EXPECT_EQ(d.scale(scalar_tensor(1.0 / 3, kFloat64)).item<double>(), static_cast<double>(0.1f) / 3);
  EXPECT_EQ(d.scale(scalar_tensor(1.0, kBFloat16)).dtype(), kFloat32);
}

// Every gradient multiplied by the float32 reciprocal as g * inv would (in float for bfloat16),
// whatever its dtype, size and layout, with one AmpUnscale kernel per dtype; a flag only for an
// inf or NaN the gradients held, wherever it is (here in a late thread's share).
TEST(GradScaler, UnscalesEveryGradientInOneKernelPerDtype) {
  const double scale = 3.0;  // an inexact reciprocal: rounding differences would show
  const double inv = static_cast<float>(1.0 / scale);
  std::vector<Tensor> params = {zeros({100003}), zeros({7}, kBFloat16), zeros({5, 3}, kFloat64),
                                zeros({2, 3, 4, 5}).contiguous(MemoryFormat::ChannelsLast), zeros({4, 6})};
  for (Tensor& p : params) p.requires_grad_();
  optim::SGD opt(params, {.lr = 0.1});
  for (int bad = 0; bad < 2; ++bad) {
    manual_seed(3);
    const std::vector<Tensor> grads = {randn({100003}) * 1000.0, randn({7}).to(kBFloat16), randn({5, 3}, kFloat64),
                                       randn({2, 3, 4, 5}).contiguous(MemoryFormat::ChannelsLast),
                                       randn({4, 8}).narrow(1, 1, 6)};  // not dense: scaled through a copy
    if (bad) grads[0].narrow(0, 99000, 1).fill_(std::numeric_limits<float>::infinity());
    std::vector<Tensor> expected;
    for (size_t i = 0; i < grads.size(); ++i) {
      const ScalarType compute = grads[i].dtype() == kFloat64 ? kFloat64 : kFloat32;
      expected.push_back((grads[i].to(compute) * inv).to(grads[i].dtype()));
      params[i].set_grad(grads[i]);
    }
    GradScaler s({.init_scale = scale});
    profiler::Session session({.timing = false});
    s.unscale_(opt);
    int64_t kernels = 0;
    for (const profiler::OpStat& st : session.stats())
      if (st.op == "AmpUnscale") kernels += st.count;
    EXPECT_EQ(kernels, 3);  // float32, bfloat16, float64
    EXPECT_EQ(s.step(opt), bad == 0);
    for (size_t i = 0; i < grads.size(); ++i) {
      EXPECT_TRUE(params[i].grad().is_same(grads[i])) << i;  // scaled in place
      const std::vector<double> got = values(grads[i]), want = values(expected[i]);
      ASSERT_EQ(got.size(), want.size());
      for (size_t j = 0; j < got.size(); ++j) ASSERT_EQ(got[j], want[j]) << "gradient " << i << ", element " << j;
    }
  }
  // torch checks the gradients as they were: one that a scale below 1 overflows is no inf found.
  params[0].set_grad(full({100003}, 3e38f));
  GradScaler small({.init_scale = 0.5});
  small.unscale_(opt);
  EXPECT_TRUE(std::isinf(params[0].grad()[5].item<double>()));
  EXPECT_TRUE(small.step(opt));
  // A NaN in a bfloat16 gradient is found.
  params[0].set_grad(zeros({100003}));
  Tensor nan = zeros({7}, kBFloat16);
  nan.narrow(0, 4, 1).fill_(std::numeric_limits<float>::quiet_NaN());
  params[1].set_grad(nan);
  GradScaler s;
  s.unscale_(opt);
  EXPECT_FALSE(s.step(opt));
}

TEST(GradScaler, CallOrderErrorsAndDisabledPassThrough) {
  Toy t;
  GradScaler s;
  expect_error([&] { s.update(); }, "no inf checks were recorded prior to update()");
  t.backward(s, tensor({1.0f, 1.0f, 1.0f}));
  s.unscale_(t.opt);
  expect_error([&] { s.unscale_(t.opt); }, "unscale_() has already been called on this optimizer");
  s.step(t.opt);
  expect_error([&] { s.step(t.opt); }, "step() has already been called since the last update()");
  expect_error([&] { s.unscale_(t.opt); }, "unscale_() is being called after step()");
  s.update();
  // No gradient at all (backward not called): torch's "no inf checks were recorded", not a step
  // that update() would count toward growth.
  t.opt.zero_grad();
  expect_error([&] { s.step(t.opt); }, "no inf checks were recorded for this optimizer");
  expect_error([] { GradScaler({.backoff_factor = 1.5}); }, "backoff_factor must be in (0, 1)");

  GradScaler off({.enabled = false});
  Tensor loss = (t.w * 2.0).sum();
  EXPECT_TRUE(off.scale(loss).is_same(loss));
  EXPECT_EQ(off.get_scale(), 1.0);
  EXPECT_TRUE(off.state_dict().empty());
  // Resuming a run with AMP off from an AMP checkpoint: the scaler's state is ignored (torch's
  // documented no-op), not an error.
  off.load_state_dict(s.state_dict());
  EXPECT_EQ(off.get_scale(), 1.0);
}

TEST(GradScaler, StateDictRoundTrips) {
  Toy t;
  GradScaler s({.init_scale = 64.0, .growth_interval = 10});
  for (int i = 0; i < 3; ++i) {
    t.backward(s, tensor({1.0f, 1.0f, 1.0f}));
    s.step(t.opt);
    s.update();
  }
  GradScaler r;
  r.load_state_dict(s.state_dict());
  EXPECT_EQ(r.get_scale(), 64.0);
  EXPECT_EQ(r.growth_tracker(), 3);
  EXPECT_EQ(r.options().growth_interval, 10);
  auto bad = s.state_dict();
  bad.erase("scale");
  expect_error([&] { r.load_state_dict(bad); }, "[GradScaler::load_state_dict] missing 'scale'");
}

// A small MLP trained with autocast: float16 from a scale so large that the first gradients
// overflow (steps skipped, scale backed off), then the same loss curve as bfloat16.
std::vector<double> train_mlp(ScalarType low, GradScaler* scaler, int steps) {
  manual_seed(11);
  nn::Sequential net(nn::Linear(16, 32), nn::ReLU(), nn::Linear(32, 4));
  optim::SGD opt(net->parameters(), {.lr = 0.5});
  Tensor x = randn({64, 16}), y = randint(0, 4, {64});
  std::vector<double> losses;
  for (int s = 0; s < steps; ++s) {
    opt.zero_grad();
    Tensor loss;
    {
      AutocastGuard ac(low);
      loss = cross_entropy(net->forward(x), y);
    }
    losses.push_back(loss.item<double>());
    if (scaler) {
      scaler->scale(loss).backward();
      scaler->step(opt);
      scaler->update();
    } else {
      loss.backward();
      opt.step();
    }
  }
  return losses;
}

TEST(GradScaler, Float16TrainingRecoversFromOverflowAndFollowsBfloat16) {
  GradScaler scaler({.init_scale = std::ldexp(1.0, 40), .growth_interval = 1000});
  const std::vector<double> fp16 = train_mlp(kFloat16, &scaler, 60);
  const std::vector<double> bf16 = train_mlp(kBFloat16, nullptr, 60);
  EXPECT_GE(scaler.skipped_steps(), 10);  // 2^40 down to where float16 holds the gradients
  EXPECT_LE(scaler.skipped_steps(), 30);
  EXPECT_LT(scaler.get_scale(), std::ldexp(1.0, 30));
  // Skipped steps leave the weights alone, so the curve is bfloat16's shifted by the skips.
  const size_t k = static_cast<size_t>(scaler.skipped_steps());
  for (size_t i = 0; i + k < fp16.size(); i += 5)
    EXPECT_NEAR(fp16[i + k], bf16[i], 0.02 * bf16[i] + 0.01) << "step " << i + k << " vs bfloat16 step " << i;
  EXPECT_LT(fp16.back(), fp16.front() * 0.9);  // it learns
}

}  // namespace
}  // namespace kiln::test
