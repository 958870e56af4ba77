// Backward on the streams the forward ran on (torch's engine), checked without a GPU on the
// stand-in device, whose streams are names that tests make up and whose waits between streams are
// written down: each node runs on its forward's stream, a gradient passed between streams is waited
// for and kept from reuse, and the caller's stream waits for the gradients at the end. The Cuda
// suite checks the same on a GPU (tests/test_cuda_backend.cpp).
#include <gtest/gtest.h>

#include <memory>
#include <utility>
#include <vector>

#include "kiln/kiln.h"
#include "stand_in_device.h"
#include "test_util.h"

namespace kiln::test {
namespace {

void* const kS1 = reinterpret_cast<void*>(0x51);
void* const kS2 = reinterpret_cast<void*>(0x52);
using Waits = std::vector<std::pair<void*, void*>>;  // {waiter, producer}

void expect_values(const Tensor& got, const Tensor& want) { expect_close(got.cpu(), values(want), want.shape()); }

class BackwardStreams : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda::is_available()) GTEST_SKIP() << "a real GPU is present: CudaStreams.* checks this there";
    stand_in_ = std::make_unique<StandInCuda>(StandInCuda::Kernels::CpuWhereCudaHasOne);
    if (stand_in_->native_ops() == 0) GTEST_SKIP() << "built without CUDA kernels";
  }
  HostBackedRuntime& rt() { return stand_in_->runtime(); }
  // Runs `f` with `stream` current (as cuda::StreamGuard).
  template <class F>
  auto on(void* stream, F&& f) {
    struct Restore {
      HostBackedRuntime& rt;
      void* prev;
      ~Restore() { rt.exchange_stream(0, prev); }
    } restore{rt(), rt().exchange_stream(0, stream)};
    return f();
  }
  void clear_logs() {
    rt().waits.clear();
    rt().recorded.clear();
  }
  const Device gpu{DeviceType::CUDA, 0};
  std::unique_ptr<StandInCuda> stand_in_;
};

TEST_F(BackwardStreams, EachOpRunsOnItsForwardsStreamAndGradientsAreHandedOver) {
  Tensor x = tensor({0.5, -1.0, 2.0}).to(gpu).requires_grad_();
  Tensor y = on(kS1, [&] { return x * 3.0; });
  Tensor z = on(kS2, [&] { return y.exp(); });
  Tensor loss = z.sum();  // the default stream
  std::vector<void*> seen_y, seen_z;
  y.register_hook([&](const Tensor&) { seen_y.push_back(rt().current_stream(0)); });
  z.register_hook([&](const Tensor&) { seen_z.push_back(rt().current_stream(0)); });
  clear_logs();
  loss.backward();
  EXPECT_EQ(seen_z, std::vector<void*>{kS2});
  EXPECT_EQ(seen_y, std::vector<void*>{kS1});
  EXPECT_EQ(rt().current_stream(0), nullptr) << "the caller's stream is current again";
  // sum's gradient to exp's stream, exp's to mul's, and the caller's stream waits for x's.
  EXPECT_EQ(rt().waits, (Waits{{kS2, nullptr}, {kS1, kS2}, {nullptr, kS1}}));
  ASSERT_EQ(rt().recorded.size(), 2u) << "each gradient handed to another stream is kept for it";
  EXPECT_EQ(rt().recorded[0].second, kS2);
  EXPECT_EQ(rt().recorded[1].second, kS1);
  expect_values(x.grad(), (tensor({0.5, -1.0, 2.0}) * 3.0).exp() * 3.0);
}

TEST_F(BackwardStreams, OnOneStreamNothingWaits) {
  for (void* stream : {static_cast<void*>(nullptr), kS1}) {
    on(stream, [&] {
      Tensor x = tensor({1.0, 2.0}).to(gpu).requires_grad_();
      Tensor loss = (x * x).sum();
      clear_logs();
      loss.backward();
      EXPECT_TRUE(rt().waits.empty());
      EXPECT_TRUE(rt().recorded.empty());
      EXPECT_EQ(rt().current_stream(0), stream);
      expect_values(x.grad(), tensor({2.0, 4.0}));
      return 0;
    });
  }
}

TEST_F(BackwardStreams, GradientsFromTwoStreamsAreSummedAfterBoth) {
  Tensor x = tensor({1.0, 2.0}).to(gpu).requires_grad_();
  Tensor a = on(kS1, [&] { return x * 2.0; });
  Tensor b = on(kS2, [&] { return x * 3.0; });  // recorded later: its backward runs first
  Tensor loss = (a + b).sum();
  clear_logs();
  loss.backward();
  // Both products' backward wait for the sum's gradient; x's accumulation, on b's stream, waits
  // for a's gradient before adding it; the caller waits for x's.
  EXPECT_EQ(rt().waits, (Waits{{kS2, nullptr}, {kS1, nullptr}, {kS2, kS1}, {nullptr, kS2}}));
  expect_values(x.grad(), tensor({5.0, 5.0}));
}

TEST_F(BackwardStreams, AutogradGradLeavesTheCallerWaitingForItsResults) {
  Tensor x = tensor({1.0, -2.0}).to(gpu).requires_grad_();
  Tensor loss = on(kS1, [&] { return (x * x).sum(); });
  clear_logs();
  std::vector<Tensor> g = autograd::grad({loss}, {x});
  // The gradient of 1 made on the caller's stream goes to the forward's, the result comes back.
  EXPECT_EQ(rt().waits, (Waits{{kS1, nullptr}, {nullptr, kS1}}));
  expect_values(g[0], tensor({2.0, -4.0}));
}

TEST_F(BackwardStreams, AFailingNodeLeavesTheCallersStreamCurrent) {
  Tensor x = tensor({1.0, 2.0}).to(gpu).requires_grad_();
  Tensor y = on(kS1, [&] { return x * 2.0; });
  y.register_hook([](const Tensor&) -> Tensor { KILN_FAIL("test hook", "fails"); });
  EXPECT_THROW(y.sum().backward(), Error);
  EXPECT_EQ(rt().current_stream(0), nullptr);
}

// A gradient left in a leaf before a node throws is still waited for by the caller's stream.
TEST_F(BackwardStreams, AFailingNodeStillLeavesTheCallerWaitingForTheGradientsMade) {
  Tensor x = tensor({1.0, 2.0}).to(gpu).requires_grad_();
  Tensor z = tensor({3.0, 4.0}).to(gpu).requires_grad_();
  Tensor a = on(kS1, [&] { return x * 2.0; });
  Tensor b = on(kS2, [&] { return z * 3.0; });  // recorded later: its backward (and z's) runs first
  a.register_hook([](const Tensor&) -> Tensor { KILN_FAIL("test hook", "fails"); });
  Tensor loss = a.sum() + b.sum();
  clear_logs();
  EXPECT_THROW(loss.backward(), Error);
  ASSERT_FALSE(rt().waits.empty());
  EXPECT_EQ(rt().waits.back(), std::make_pair(static_cast<void*>(nullptr), kS2));
  expect_values(z.grad(), tensor({3.0, 3.0}));
}

// A custom function with outputs on two devices runs where its last output is (the CPU here); the
// gradient of its GPU output, made on another stream, is waited for by the stream its backward's
// GPU work runs on (the caller's current one).
struct OnTwoDevices : autograd::Function<OnTwoDevices> {
  static std::vector<Tensor> forward(autograd::AutogradContext*, const Tensor& x) {
    return {x * 2.0, x.cpu() * 3.0};
  }
  static std::vector<Tensor> backward(autograd::AutogradContext*, std::vector<Tensor> g) {
    return {g[0] * 2.0 + g[1].to(g[0].device()) * 3.0};
  }
};

TEST_F(BackwardStreams, AGradientFromAnotherDeviceIsWaitedForOnItsOwn) {
  Tensor x = tensor({1.0, 2.0}).to(gpu).requires_grad_();
  std::vector<Tensor> out = OnTwoDevices::apply(x);
  ASSERT_TRUE(out[1].device().is_cpu());
  Tensor on_gpu = on(kS1, [&] { return (out[0] * 5.0).sum(); });
  Tensor on_cpu = out[1].sum();
  clear_logs();
  autograd::backward({on_gpu, on_cpu});
  // The product's backward on kS1 waits for the caller's gradient of 1; the function's backward
  // (its GPU work on the caller's stream) waits for kS1's gradient.
  EXPECT_EQ(rt().waits, (Waits{{kS1, nullptr}, {nullptr, kS1}}));
  expect_values(x.grad(), tensor({13.0, 13.0}));
}

}  // namespace
}  // namespace kiln::test
