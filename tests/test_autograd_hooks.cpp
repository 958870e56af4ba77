// Autograd's hooks for data-parallel training: a leaf's post-accumulate-grad hook (after its
// .grad() is updated, once per backward) and callbacks queued to run when backward ends.
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

}  // namespace
}  // namespace kiln::test
