// Autograd's hooks: a leaf's post-accumulate-grad hook (after its .grad() is updated, once per
// backward), callbacks queued to run when backward ends, and register_hook's gradient hooks.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "test_util.h"

namespace kiln::test {
namespace {

TEST(AutogradHooks, PostAccumulateGradHookSeesTheAccumulatedGradientOncePerBackward) {
  Tensor w = tensor({1.0, 2.0}).requires_grad_();
  std::vector<std::vector<double>> seen;
  const uint64_t id = w.register_post_accumulate_grad_hook([&](Tensor& t) { seen.push_back(values(t.grad())); });
  // w is used twice: the engine sums both paths before accumulating, so the hook runs once.
  (w * 3 + w * w).sum().backward();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0], (std::vector<double>{5, 7}));  // 3 + 2w
  (w * 2).sum().backward();  // accumulates: the hook sees the running total
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[1], (std::vector<double>{7, 9}));
  w.remove_post_accumulate_grad_hook(id);
  (w * 2).sum().backward();
  EXPECT_EQ(seen.size(), 2u);
  expect_error([] { (void)tensor({1.0}).register_post_accumulate_grad_hook([](Tensor&) {}); },
               "[register_post_accumulate_grad_hook] needs a leaf tensor that requires grad");
}

TEST(AutogradHooks, QueuedCallbacksRunAfterEveryGradientInOrderAndMayThrow) {
  Tensor a = tensor({1.0}).requires_grad_(), b = tensor({2.0}).requires_grad_();
  std::vector<std::string> log;
  for (Tensor* t : {&a, &b})
    t->register_post_accumulate_grad_hook([&, t](Tensor&) {
      log.push_back(t == &a ? "a" : "b");
      if (t == &a) {
        autograd::queue_callback([&] { log.push_back("first callback, b.grad " + std::to_string(b.grad().item<double>())); });
        autograd::queue_callback([&] { log.push_back("second callback"); });
      }
    });
  (a * b).sum().backward();
  ASSERT_EQ(log.size(), 4u);
  EXPECT_EQ(log[2], "first callback, b.grad 1.000000");  // after both leaves got their gradient
  EXPECT_EQ(log[3], "second callback");
  // A throwing callback makes backward() throw; the next backward starts with no callbacks left.
  Tensor c = tensor({1.0}).requires_grad_();
  bool armed = true;
  c.register_post_accumulate_grad_hook([&](Tensor&) {
    if (armed) autograd::queue_callback([] { throw Error("planted"); });
  });
  expect_error([&] { (c * 2).sum().backward(); }, "planted");
  armed = false;
  (c * 2).sum().backward();
  EXPECT_EQ(c.grad().item<double>(), 4.0);
  expect_error([] { autograd::queue_callback([] {}); }, "[autograd::queue_callback] called outside a backward pass");
}

// register_hook, as torch.Tensor.register_hook: a leaf's hooks see (and may replace) each gradient
// before it is accumulated; a non-leaf's before it is passed on and retained.
TEST(AutogradHooks, RegisterHookSeesAndReplacesTheGradient) {
  Tensor w = tensor({1.0, 2.0}).requires_grad_();
  std::vector<std::vector<double>> seen;
  const uint64_t watch = w.register_hook([&](const Tensor& g) { seen.push_back(values(g)); });  // void: unchanged
  const uint64_t twice = w.register_hook([](const Tensor& g) { return g * 2; });
  (w * 3).sum().backward();
  EXPECT_EQ(seen, (std::vector<std::vector<double>>{{3, 3}}));  // in order: before the doubling
  EXPECT_EQ(values(w.grad()), (std::vector<double>{6, 6}));
  (w * 3).sum().backward();  // each backward's gradient goes through the hooks, then accumulates
  EXPECT_EQ(values(w.grad()), (std::vector<double>{12, 12}));
  w.remove_hook(twice);
  w.remove_hook(watch);
  (w * 3).sum().backward();
  EXPECT_EQ(values(w.grad()), (std::vector<double>{15, 15}));
  EXPECT_EQ(seen.size(), 2u);

  // A non-leaf: the hook's gradient flows on to the leaves and is what retain_grad keeps, even when
  // the tensor itself is gone by backward (the hook lives on its node).
  Tensor x = tensor({1.0, 2.0}).requires_grad_();
  Tensor kept;
  Tensor loss;
  {
    Tensor y = x * x;
    y.register_hook([](const Tensor& g) { return g.clamp(0, 1); });
    Tensor z = y * 5;
    kept = y;
    kept.retain_grad();
    loss = z.sum();
  }
  loss.backward();
  EXPECT_EQ(values(kept.grad()), (std::vector<double>{1, 1}));  // 5 clamped to 1
  EXPECT_EQ(values(x.grad()), (std::vector<double>{2, 4}));     // 1 * 2x

  // autograd::grad returns what the input's hooks give.
  Tensor a = tensor({3.0}).requires_grad_();
  a.register_hook([](const Tensor& g) { return g + 100; });
  EXPECT_EQ(autograd::grad({(a * 2).sum()}, {a})[0].item<double>(), 102.0);

  // A hook that changes the gradient's shape or dtype is an error naming register_hook.
  Tensor b = tensor({1.0, 2.0}).requires_grad_();
  b.register_hook([](const Tensor& g) { return g.sum(); });
  expect_error([&] { (b * 2).sum().backward(); }, "[register_hook] a hook returned a gradient float32 []");
  Tensor c = tensor({1.0}).requires_grad_();
  c.register_hook([](const Tensor& g) { return g.to(kFloat64); });
  expect_error([&] { (c * 2).sum().backward(); }, "float64 [1] on cpu for one float32 [1] on cpu");
  expect_error([] { tensor({1.0}).register_hook([](const Tensor&) {}); }, "[register_hook] the tensor does not require grad");
}

// A hook belongs to the value it was registered on: after an in-place change it sees the gradient
// of the value before, as torch's; a hook registered after sees the new value's.
TEST(AutogradHooks, HooksStayWithTheValueTheyWereRegisteredOn) {
  Tensor x = tensor({1.0}).requires_grad_();
  Tensor y = x * 1.0;
  std::vector<double> before, after;
  y.register_hook([&](const Tensor& g) { before.push_back(g.item<double>()); });
  y.mul_(4.0);
  y.register_hook([&](const Tensor& g) { after.push_back(g.item<double>()); });
  (y * 3).sum().backward();
  EXPECT_EQ(after, std::vector<double>{3.0});   // d(3y')/dy'
  EXPECT_EQ(before, std::vector<double>{12.0});  // d(3 * 4y)/dy
}

// Anomaly mode (torch.autograd.set_detect_anomaly): the node that first returns a NaN gradient is
// named; off, the NaN flows into .grad() as before.
TEST(AutogradAnomaly, TheNodeThatReturnsNanIsNamed) {
  Tensor x = tensor({0.0f, 4.0f}).requires_grad_();
  {
    autograd::DetectAnomalyGuard anomaly;
    EXPECT_TRUE(autograd::is_anomaly_enabled());
    // d sqrt(x)/dx at 0 is inf, times the 0 that MulBackward passes down: NaN in SqrtBackward.
    expect_error([&] { (x.sqrt() * 0).sum().backward(); },
                 "Function 'SqrtBackward' returned nan values in its 0th output (the gradient of its forward op's "
                 "input 0, float32 [2])");
    x.set_grad(Tensor());
    (x.sqrt() * 1).sum().backward();  // inf is not an anomaly (as in torch)
    EXPECT_TRUE(std::isinf(x.grad().to_vector<float>()[0]));
  }
  EXPECT_FALSE(autograd::is_anomaly_enabled());
  x.set_grad(Tensor());
  (x.sqrt() * 0).sum().backward();
  EXPECT_TRUE(std::isnan(x.grad().to_vector<float>()[0]));
  EXPECT_EQ(x.grad().to_vector<float>()[1], 0.0f);
}

// backward(inputs) (torch's backward(inputs=...)): only the leaves given get gradients, through
// their own accumulation (post-accumulate hooks run); autograd::backward takes several outputs.
TEST(AutogradBackwardInputs, OnlyTheLeavesGivenGetGradients) {
  Tensor a = tensor({1.0f, 2.0f}).requires_grad_(), b = tensor({3.0f, 4.0f}).requires_grad_();
  int accumulated = 0;
  b.register_post_accumulate_grad_hook([&](Tensor&) { ++accumulated; });
  Tensor loss = (a * b).sum();
  loss.backward(Tensor(), /*retain_graph=*/true, {b, b});  // a leaf given twice gets it once
  EXPECT_FALSE(a.grad().defined());
  EXPECT_EQ(b.grad().to_vector<float>(), (std::vector<float>{1, 2}));
  EXPECT_EQ(accumulated, 1);
  loss.backward(Tensor(), /*retain_graph=*/true, {a});
  EXPECT_EQ(a.grad().to_vector<float>(), (std::vector<float>{3, 4}));
  EXPECT_EQ(b.grad().to_vector<float>(), (std::vector<float>{1, 2}));  // untouched
  // Several outputs at once, with their gradients; into every leaf without inputs.
  Tensor y1 = a * 2, y2 = (b * b).sum();
  autograd::backward({y1, y2}, {ones({2}), Tensor()});
  EXPECT_EQ(a.grad().to_vector<float>(), (std::vector<float>{5, 6}));
  EXPECT_EQ(b.grad().to_vector<float>(), (std::vector<float>{7, 10}));
  expect_error([&] { (a * b).sum().backward(Tensor(), false, {a * 1}); },
               "[backward] input 0 is not a leaf: backward(inputs) accumulates into leaves' .grad()");
  expect_error([&] { (a * b).sum().backward(Tensor(), false, {tensor({1.0f})}); },
               "[backward] input 0 does not require grad");
  expect_error([&] { autograd::backward({a * 2}); }, "[backward] a gradient must be given for an output of shape [2]");
  expect_error([&] { autograd::backward({a * 2, b * 2}, {ones({2})}); }, "[backward] got 1 grad_tensors for 2 outputs");
  expect_error([&] { autograd::backward({a * 2, b * 2}, {ones({2}), ones({3})}); },
               "[backward] grad_tensor 1 of shape [3] does not match the output's shape [2]");
}

}  // namespace
}  // namespace kiln::test
