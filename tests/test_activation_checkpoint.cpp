// Saved-tensor hooks (torch.autograd.graph.saved_tensors_hooks, save_on_cpu) and activation
// checkpointing on them (torch.utils.checkpoint, use_reentrant=False): the same gradients as
// without, first and second order, the memory of the region's activations not kept, and errors
// for what cannot be run again.
#include <gtest/gtest.h>

#include <optional>
#include <thread>

#include "kiln/kiln.h"
#include "stand_in_device.h"
#include "test_util.h"

namespace kiln::test {
namespace {

using autograd::graph::SaveOnCpu;
using autograd::graph::SavedTensorsHooks;

void expect_same(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_TRUE(got.defined()) << what;
  ASSERT_EQ(got.shape(), want.shape()) << what;
  EXPECT_EQ(values(got), values(want)) << what;
}

// A block with dropout between two linear layers and a GELU; its parameters are leaves.
struct Block {
  Tensor w1 = randn({32, 16}, TensorOptions(kFloat64).requires_grad(true));
  Tensor b1 = randn({32}, TensorOptions(kFloat64).requires_grad(true));
  Tensor w2 = randn({16, 32}, TensorOptions(kFloat64).requires_grad(true));
  Tensor operator()(const Tensor& x) const { return tanh(linear(dropout(gelu(linear(x, w1, b1)), 0.25), w2)) + x; }
  std::vector<Tensor> params() const { return {w1, b1, w2}; }
};

TEST(SavedTensorsHooks, PackAndUnpackEverySavedTensorOnce) {
  Tensor x = randn({4, 5}, TensorOptions(kFloat64).requires_grad(true));
  int packed = 0, unpacked = 0;
  Tensor y;
  {
    SavedTensorsHooks hooks(
        [&](const Tensor& t) -> std::any {
          ++packed;
          EXPECT_FALSE(t.requires_grad());  // values, without history
          return t.clone();
        },
        [&](const std::any& p) -> Tensor {
          ++unpacked;
          return std::any_cast<Tensor>(p);
        });
    y = (sin(x) * exp(x)).sum();  // sin saves x, exp its result, mul both operands
  }
  EXPECT_EQ(packed, 4);
  EXPECT_EQ(unpacked, 0);
  Tensor z = (sin(x) * exp(x)).sum();  // no hooks: not counted
  EXPECT_EQ(packed, 4);
  y.backward();
  EXPECT_EQ(unpacked, 4);
  const Tensor want = autograd::grad({z}, {x})[0];
  expect_same(x.grad(), want, "x.grad with hooks");
}

TEST(SavedTensorsHooks, InnermostHooksApplyAndSaveTimeDecides) {
  Tensor x = randn({3}, TensorOptions(kFloat64).requires_grad(true));
  std::vector<std::string> log;
  auto hooks = [&](std::string name) {
    return std::make_unique<SavedTensorsHooks>(
        [&log, name](const Tensor& t) -> std::any {
          log.push_back("pack " + name);
          return t;
        },
        [&log, name](const std::any& p) -> Tensor {
          log.push_back("unpack " + name);
          return std::any_cast<Tensor>(p);
        });
  };
  Tensor y;
  {
    auto outer = hooks("outer");
    Tensor a = exp(x);  // saves its result: packed by outer
    {
      auto inner = hooks("inner");
      y = sin(a);  // saves a: packed by inner
    }
  }
  // Unpacked by the hooks each was packed by, though none is alive now.
  y.sum().backward();
  EXPECT_EQ(log, (std::vector<std::string>{"pack outer", "pack inner", "unpack inner", "unpack outer"}));
  expect_close(x.grad(), values(cos(exp(x)) * exp(x)), {3});
}

// The unpacked tensor takes the saved tensor's history: gradgradcheck through hooks that copy
// every saved tensor (outputs saved by their op, inputs with history, leaves).
TEST(SavedTensorsHooks, SecondDerivativesThroughCopiedTensors) {
  auto fn = [](const std::vector<Tensor>& in) {
    SavedTensorsHooks hooks([](const Tensor& t) -> std::any { return t.clone(); },
                            [](const std::any& p) -> Tensor { return std::any_cast<Tensor>(p).clone(); });
    Tensor h = tanh(in[0] * in[1]);
    return (exp(h) * sigmoid(h) * in[1]).sum();
  };
  std::vector<Tensor> inputs = {randn({3, 2}, TensorOptions(kFloat64).requires_grad(true)),
                                randn({3, 2}, TensorOptions(kFloat64).requires_grad(true))};
  EXPECT_TRUE(autograd::gradcheck(fn, inputs));
  EXPECT_TRUE(autograd::gradgradcheck(fn, inputs));
}

// Saved tensors that need no gradient (a constant operand, masks, indices, a target) come back as
// they were under create_graph too, and a leaf's comes back as unpack gives it (here doubled:
// the same doubled gradient whether or not the pass records itself).
TEST(SavedTensorsHooks, CreateGraphTakesWhatUnpackGives) {
  manual_seed(15);
  Tensor x = randn({4, 6}, TensorOptions(kFloat64).requires_grad(true));
  const Tensor target = randn({4, 6}, kFloat64);
  const Tensor ids = randint(0, 6, {5}, kInt64);
  auto fn = [&](const Tensor& t) {
    Tensor h = layer_norm(t * 2.0, {6}) + softmax(t, 1);
    Tensor m = masked_fill(h, lt(target, 0.0), 0.0);
    return mse_loss(dropout(m, 0.3), target) + embedding(t, ids).sum() + max_pool2d(t.view({1, 1, 4, 6}), {2, 2}).sum();
  };
  auto copying = [] {
    return std::make_unique<SavedTensorsHooks>([](const Tensor& t) -> std::any { return t.clone(); },
                                               [](const std::any& p) -> Tensor { return std::any_cast<Tensor>(p); });
  };
  manual_seed(16);
  const Tensor want = autograd::grad({fn(x)}, {x})[0];
  for (const bool create_graph : {false, true}) {
    manual_seed(16);
    Tensor y;
    {
      auto hooks = copying();
      y = fn(x);
    }
    const Tensor got = autograd::grad({y}, {x}, {}, false, false, create_graph)[0];
    expect_close(got, values(want), want.shape(), 1e-12, 1e-12, create_graph ? "create_graph" : "plain");
  }
  // A leaf's value as unpack gives it.
  Tensor w = randn({3}, TensorOptions(kFloat64).requires_grad(true));
  for (const bool create_graph : {false, true}) {
    Tensor y;
    {
      SavedTensorsHooks doubling([](const Tensor& t) -> std::any { return t; },
                                 [](const std::any& p) -> Tensor { return std::any_cast<Tensor>(p) * 2.0; });
      y = (w * w).sum();  // mul saves w twice
    }
    const Tensor g = autograd::grad({y}, {w}, {}, false, false, create_graph)[0];
    expect_close(g, values(w * 4.0), {3}, 1e-12, 1e-12, create_graph ? "leaf, create_graph" : "leaf");
  }
}

// Guards may end out of order (held in smart pointers): each takes its own hooks away.
TEST(SavedTensorsHooks, GuardsEndingOutOfOrderRemoveTheirOwnHooks) {
  std::vector<std::string> log;
  auto named = [&](std::string name) {
    return std::make_unique<SavedTensorsHooks>(
        [&log, name](const Tensor& t) -> std::any {
          log.push_back(name);
          return t;
        },
        [](const std::any& p) -> Tensor { return std::any_cast<Tensor>(p); });
  };
  Tensor x = randn({3}, TensorOptions(kFloat64).requires_grad(true));
  auto a = named("a");
  auto b = named("b");
  a.reset();  // b stays the innermost
  Tensor y = sin(x);
  b.reset();
  Tensor z = sin(x);  // none
  EXPECT_EQ(log, std::vector<std::string>{"b"});
}

TEST(SavedTensorsHooks, UndefinedFromUnpackIsAnError) {
  Tensor x = randn({4}, TensorOptions(kFloat64).requires_grad(true));
  Tensor y;
  {
    SavedTensorsHooks hooks([](const Tensor&) -> std::any { return 0; },
                            [](const std::any&) -> Tensor { return {}; });
    y = sin(x);
  }
  expect_error([&] { y.sum().backward(); }, "unpack hook gave an undefined tensor");
  expect_error([] { SavedTensorsHooks h(nullptr, [](const std::any&) { return Tensor(); }); },
               "[saved_tensors_hooks]");
}

TEST(SavedTensorsHooks, CustomFunctionsSavedTensorsArePacked) {
  struct Square : autograd::Function<Square> {
    static Tensor forward(autograd::AutogradContext* ctx, const Tensor& x) {
      ctx->save_for_backward({x});
      return x * x;
    }
    static std::vector<Tensor> backward(autograd::AutogradContext* ctx, std::vector<Tensor> g) {
      return {2 * ctx->get_saved_variables()[0] * g[0]};
    }
  };
  Tensor x = randn({5}, TensorOptions(kFloat64).requires_grad(true));
  int packed = 0, unpacked = 0;
  Tensor y;
  {
    SavedTensorsHooks hooks(
        [&](const Tensor& t) -> std::any {
          ++packed;
          return t.clone();
        },
        [&](const std::any& p) -> Tensor {
          ++unpacked;
          return std::any_cast<Tensor>(p);
        });
    y = Square::apply(x);
  }
  y.sum().backward();
  EXPECT_EQ(packed, 1);
  EXPECT_EQ(unpacked, 1);
  expect_close(x.grad(), values(2 * x), {5});
}

TEST(SavedTensorsHooks, SaveOnCpuGivesTheSameGradients) {
  manual_seed(3);
  Block b;
  Tensor x = randn({8, 16}, TensorOptions(kFloat64).requires_grad(true));
  manual_seed(9);
  Tensor want = b(x).pow(2).sum();
  const std::vector<Tensor> want_grads = autograd::grad({want}, {x, b.w1, b.b1, b.w2});
  manual_seed(9);
  Tensor got;
  {
    SaveOnCpu on_cpu;
    got = b(x).pow(2).sum();
  }
  const std::vector<Tensor> got_grads = autograd::grad({got}, {x, b.w1, b.b1, b.w2});
  for (size_t i = 0; i < got_grads.size(); ++i) expect_same(got_grads[i], want_grads[i], "grad " + std::to_string(i));
}

// On a device (the stand-in GPU, host memory behind it): what the region saves goes to pinned host
// memory, so the device keeps only the output; the gradients are the same.
TEST(SavedTensorsHooks, SaveOnCpuKeepsADevicesSavedTensorsOffIt) {
  if (cuda::is_available()) GTEST_SKIP() << "a real GPU is present: the stand-in device is for machines without";
  StandInCuda stand_in(StandInCuda::Kernels::CpuWhereCudaHasOne);
  if (stand_in.native_ops() == 0) GTEST_SKIP() << "built without CUDA kernels";
  const Device gpu{DeviceType::CUDA, 0};
  manual_seed(14);
  Tensor w = randn({256, 256}).to(gpu).requires_grad_();
  Tensor x = randn({128, 256}).to(gpu);
  auto run = [&](bool on_cpu, size_t& kept) {
    const size_t before = memory_stats(gpu).allocated;
    Tensor y;
    {
      std::optional<SaveOnCpu> save;
      if (on_cpu) save.emplace(/*pin_memory=*/true);
      y = x;
      for (int i = 0; i < 4; ++i) y = tanh(linear(y, w));  // each layer keeps tanh's output [128, 256]
    }
    kept = memory_stats(gpu).allocated - before;
    Tensor g = autograd::grad({y.sum()}, {w})[0];
    EXPECT_EQ(g.device(), gpu);
    return g.cpu();
  };
  size_t kept_plain = 0, kept_on_cpu = 0;
  const Tensor want = run(false, kept_plain);
  const int copies_before = stand_in.runtime().to_host;
  const Tensor got = run(true, kept_on_cpu);
  EXPECT_GE(stand_in.runtime().to_host - copies_before, 8) << "each saved activation copied out";
  expect_same(got, want, "grad w");
  const size_t activation = 128 * 256 * sizeof(float);
  EXPECT_GE(kept_plain, 4 * activation);
  EXPECT_LE(kept_on_cpu, activation + activation / 2);  // the output alone
}

// ---- checkpoint

TEST(Checkpoint, SameOutputsAndGradientsAsWithoutDropoutIncluded) {
  manual_seed(1);
  Block b;
  Tensor x = randn({8, 16}, TensorOptions(kFloat64).requires_grad(true));
  manual_seed(7);
  Tensor want = b(b(x));
  Tensor want_loss = (want * want).sum();
  const std::vector<Tensor> want_grads = autograd::grad({want_loss}, {x, b.w1, b.b1, b.w2});
  const GeneratorState after_plain = get_rng_state();

  manual_seed(7);
  Tensor got = utils::checkpoint([&](const Tensor& t) { return b(b(t)); }, x);
  EXPECT_EQ(get_rng_state().offset, after_plain.offset);  // the forward drew the same numbers
  expect_same(got, want, "output");
  Tensor got_loss = (got * got).sum();
  manual_seed(1234);  // the recomputation draws the forward's masks whatever the generator is at now
  const std::vector<Tensor> got_grads = autograd::grad({got_loss}, {x, b.w1, b.b1, b.w2});
  EXPECT_EQ(get_rng_state().seed, 1234u);  // and leaves it as it found it
  EXPECT_EQ(get_rng_state().offset, 0u);
  const char* names[] = {"x", "w1", "b1", "w2"};
  for (size_t i = 0; i < got_grads.size(); ++i) expect_same(got_grads[i], want_grads[i], names[i]);
}

TEST(Checkpoint, ParametersGetGradientsFromBackward) {
  manual_seed(2);
  Block b;
  Tensor x = randn({4, 16}, kFloat64);  // no gradient for the input: the parameters carry it
  manual_seed(5);
  b(x).sum().backward();
  std::vector<Tensor> want;
  for (Tensor& p : b.params()) {
    want.push_back(p.grad().clone());
    p.set_grad({});
  }
  manual_seed(5);
  Tensor y = utils::checkpoint([&](const Tensor& t) { return b(t); }, x);
  ASSERT_TRUE(y.requires_grad());
  y.sum().backward();
  for (size_t i = 0; i < want.size(); ++i) expect_same(b.params()[i].grad(), want[i], "param " + std::to_string(i));
}

TEST(Checkpoint, SecondDerivatives) {
  auto region = [](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{tanh(in[0] * in[1]) * exp(in[1]), sigmoid(in[0])};
  };
  auto fn = [&](const std::vector<Tensor>& in) {
    Tensor pre = in[0] * 1.5;  // an input with history
    std::vector<Tensor> out = utils::checkpoint(region, {pre, in[1]});
    return (out[0] * out[0]).sum() + out[1].sum();
  };
  std::vector<Tensor> inputs = {randn({3, 2}, TensorOptions(kFloat64).requires_grad(true)),
                                randn({3, 2}, TensorOptions(kFloat64).requires_grad(true))};
  EXPECT_TRUE(autograd::gradcheck(fn, inputs));
  EXPECT_TRUE(autograd::gradgradcheck(fn, inputs));
}

TEST(Checkpoint, TheRegionsActivationsAreNotKept) {
  Tensor w = randn({512, 512}, TensorOptions(kFloat32).requires_grad(true));
  Tensor x = randn({256, 512}, kFloat32);
  auto region = [&](const Tensor& t) {
    Tensor h = t;
    for (int i = 0; i < 6; ++i) h = gelu(linear(h, w));  // each layer saves two 512 KiB tensors
    return h;
  };
  auto kept_after_forward = [&](bool checkpointed) {
    const size_t before = memory_stats(Device::cpu()).allocated;
    Tensor y = checkpointed ? utils::checkpoint(region, x) : region(x);
    const size_t kept = memory_stats(Device::cpu()).allocated - before;
    y.sum().backward();
    w.set_grad({});
    return kept;
  };
  const size_t plain = kept_after_forward(false), checkpointed = kept_after_forward(true);
  const size_t activation = 256 * 512 * sizeof(float);
  EXPECT_GE(plain, 10 * activation);
  EXPECT_LE(checkpointed, 2 * activation);  // the output (and the frame's alias of x: no memory)
}

TEST(Checkpoint, AutocastIsAppliedAgainInTheRecomputation) {
  manual_seed(4);
  Tensor w = randn({16, 16}, TensorOptions(kFloat32).requires_grad(true));
  Tensor x = randn({8, 16}, kFloat32);
  auto region = [&](const Tensor& t) { return relu(linear(relu(linear(t, w)), w)); };
  Tensor want_grad;
  {
    AutocastGuard amp(kCPU, kBFloat16);
    Tensor y = region(x).to(kFloat32).sum();
    want_grad = autograd::grad({y}, {w})[0];
  }
  Tensor y;
  {
    AutocastGuard amp(kCPU, kBFloat16);
    y = utils::checkpoint(region, x);
    EXPECT_EQ(y.dtype(), kBFloat16);
  }
  // Backward outside the guard: the recomputation still runs in bfloat16 (the saved tensors'
  // dtypes are checked against the forward's).
  expect_same(autograd::grad({y.to(kFloat32).sum()}, {w})[0], want_grad, "grad w under autocast");
}

TEST(Checkpoint, RetainedGraphRunsTheRegionAgainForEachBackward) {
  manual_seed(6);
  Block b;
  Tensor x = randn({4, 16}, TensorOptions(kFloat64).requires_grad(true));
  manual_seed(8);
  Tensor y = utils::checkpoint([&](const Tensor& t) { return b(t); }, x).sum();
  y.backward({}, /*retain_graph=*/true);
  const Tensor once = x.grad().clone();
  y.backward();
  expect_close(x.grad(), values(2 * once), {4, 16}, 1e-12, 1e-12);
}

TEST(Checkpoint, NestedCheckpoints) {
  manual_seed(10);
  Block b;
  Tensor x = randn({4, 16}, TensorOptions(kFloat64).requires_grad(true));
  manual_seed(11);
  const Tensor want = autograd::grad({b(b(b(x))).sum()}, {x, b.w1})[0];
  manual_seed(11);
  Tensor y = utils::checkpoint(
      [&](const Tensor& t) { return b(utils::checkpoint([&](const Tensor& u) { return b(b(u)); }, t)); }, x);
  expect_same(autograd::grad({y.sum()}, {x, b.w1})[0], want, "x through nested checkpoints");
}

TEST(Checkpoint, CheckpointSequentialMatchesTheSequential) {
  manual_seed(12);
  nn::Sequential seq(nn::Linear(16, 32), nn::GELU(), nn::Dropout(0.2), nn::Linear(32, 32), nn::ReLU(),
                     nn::Linear(32, 8), nn::Tanh());
  Tensor x = randn({4, 16}, TensorOptions(kFloat32).requires_grad(true));
  manual_seed(13);
  const std::vector<Tensor> want = autograd::grad({seq->forward(x).sum()}, {x, seq->parameters()[0]});
  for (int64_t segments : {1, 2, 3, 7}) {
    manual_seed(13);
    Tensor y = utils::checkpoint_sequential(seq, segments, x);
    const std::vector<Tensor> got = autograd::grad({y.sum()}, {x, seq->parameters()[0]});
    expect_same(got[0], want[0], "x, " + std::to_string(segments) + " segments");
    expect_same(got[1], want[1], "weight 0, " + std::to_string(segments) + " segments");
  }
  expect_error([&] { utils::checkpoint_sequential(seq, 0, x); }, "segments must be between 1 and the 7");
  expect_error([&] { utils::checkpoint_sequential(seq, 8, x); }, "segments must be between 1 and the 7");
}

TEST(Checkpoint, ARegionRunningOtherOpsTheSecondTimeIsAnError) {
  Tensor x = randn({4}, TensorOptions(kFloat64).requires_grad(true));
  int calls = 0;
  Tensor y = utils::checkpoint([&](const Tensor& t) { return ++calls == 1 ? sin(t) : exp(t) * t; }, x);
  expect_error([&] { y.sum().backward(); }, "[checkpoint]");
  Tensor x2 = randn({4, 3}, TensorOptions(kFloat64).requires_grad(true));
  calls = 0;
  Tensor z = utils::checkpoint([&](const Tensor& t) { return ++calls == 1 ? sin(t) : sin(t.t()); }, x2);
  expect_error([&] { z.sum().backward(); }, "float64 [3, 4] on cpu where the forward saved float64 [4, 3] on cpu");
}

// An op of fn changing in place what an earlier op saved: an error in backward, as without
// checkpointing (the recomputation would hand the changed value to the earlier op's backward).
TEST(Checkpoint, AnInPlaceChangeInsideTheRegionIsAnError) {
  Tensor x = randn({4}, TensorOptions(kFloat64).requires_grad(true));
  Tensor y = utils::checkpoint(
      [](const Tensor& t) {
        Tensor e = exp(t * 1.0);  // saves its result
        e.mul_(2.0);
        return e;
      },
      x);
  expect_error([&] { y.sum().backward(); }, "modified in place later in the checkpointed function");
}

// Changing the region's output in place afterwards is fine (as in torch): what backward needs is
// made again, not the output kept.
TEST(Checkpoint, TheOutputMayBeChangedInPlaceAfterwards) {
  Tensor x = randn({6}, TensorOptions(kFloat64).requires_grad(true));
  Tensor w = randn({6}, TensorOptions(kFloat64).requires_grad(true));
  Tensor y = utils::checkpoint([&](const Tensor& t) { return sigmoid(t * w); }, x);  // sigmoid saves its result
  y.add_(1.0);
  y.sum().backward();
  const Tensor s = sigmoid(x * w);
  expect_close(x.grad(), values(s * (1.0 - s) * w), {6}, 1e-12, 1e-12);
}

// A backward inside fn (a gradient penalty inside a block), in the forward and when run again.
TEST(Checkpoint, GradientsTakenInsideTheRegion) {
  auto region = [](const Tensor& t) {
    Tensor h = tanh(t * t);
    const Tensor dh = autograd::grad({h.sum()}, {t}, {}, false, false, /*create_graph=*/true)[0];
    return dh * h;
  };
  Tensor x = randn({5}, TensorOptions(kFloat64).requires_grad(true));
  const Tensor want = autograd::grad({region(x).sum()}, {x})[0];
  const Tensor got = autograd::grad({utils::checkpoint(region, x).sum()}, {x})[0];
  expect_close(got, values(want), {5}, 1e-12, 1e-12);
}

// Two threads recomputing regions with dropout at once: each draws its own forward's masks (the
// recomputation replays the generator on its own thread).
TEST(Checkpoint, ConcurrentRecomputationsDrawTheirOwnMasks) {
  auto region = [](const Tensor& t) { return dropout(sin(t), 0.5) * t; };
  for (int round = 0; round < 5; ++round) {
    manual_seed(30 + round);
    Tensor a = randn({4096}, TensorOptions(kFloat64).requires_grad(true));
    Tensor b = randn({4096}, TensorOptions(kFloat64).requires_grad(true));
    const GeneratorState start = get_rng_state();
    const Tensor want_a = autograd::grad({region(a).sum()}, {a})[0];
    const Tensor want_b = autograd::grad({region(b).sum()}, {b})[0];
    set_rng_state(start);
    Tensor ya = utils::checkpoint(region, a).sum(), yb = utils::checkpoint(region, b).sum();
    Tensor ga, gb;
    std::thread ta([&] { ga = autograd::grad({ya}, {a})[0]; });
    std::thread tb([&] { gb = autograd::grad({yb}, {b})[0]; });
    ta.join();
    tb.join();
    expect_same(ga, want_a, "a, round " + std::to_string(round));
    expect_same(gb, want_b, "b, round " + std::to_string(round));
  }
}

TEST(Checkpoint, AnInputChangedInPlaceIsAnError) {
  Tensor x = randn({4}, kFloat64);
  Tensor w = randn({4}, TensorOptions(kFloat64).requires_grad(true));
  Tensor y = utils::checkpoint([&](const Tensor& t) { return sin(t * w); }, x);
  x.add_(1);
  expect_error([&] { y.sum().backward(); }, "input 0 was modified in place");
}

// BertConfig::gradient_checkpointing: the same loss and gradients, bit for bit (dropout on), and
// the encoder layers' activations not kept after the forward.
TEST(Checkpoint, BertWithCheckpointedLayersTrainsAsWithout) {
  models::BertConfig c = models::BertConfig::tiny();
  c.vocab_size = 200;
  c.num_hidden_layers = 4;
  manual_seed(21);
  models::BertForMaskedLM model = models::bert_for_masked_lm(c);
  const Tensor ids = randint(0, c.vocab_size, {4, 64}, kInt64);
  const Tensor labels = randint(0, c.vocab_size, {4, 64}, kInt64);
  Tensor mask = ones({4, 64}, kInt64);
  mask.narrow(1, 48, 16).zero_();
  auto step = [&](bool checkpointed, size_t& kept) {
    model->bert->encoder->gradient_checkpointing = checkpointed;
    model->zero_grad();
    manual_seed(22);
    const size_t before = memory_stats(Device::cpu()).allocated;
    Tensor loss = model->masked_lm_loss(ids, labels, mask);
    kept = memory_stats(Device::cpu()).allocated - before;
    loss.backward();
    std::vector<Tensor> grads{loss.detach()};
    for (const Tensor& p : model->parameters()) grads.push_back(p.grad().defined() ? p.grad().clone() : Tensor());
    return grads;
  };
  size_t kept_plain = 0, kept_checkpointed = 0;
  const std::vector<Tensor> want = step(false, kept_plain), got = step(true, kept_checkpointed);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].defined(), want[i].defined()) << i;
    if (want[i].defined()) expect_same(got[i], want[i], i == 0 ? "loss" : "grad " + std::to_string(i));
  }
  // 4 layers' activations (attention, feed-forward, layer norms, dropout masks) against about one.
  EXPECT_LT(kept_checkpointed * 2, kept_plain) << kept_checkpointed << " bytes kept, against " << kept_plain;
  // In eval mode, or under NoGradGuard, the layers run as they are.
  model->eval();
  NoGradGuard no_grad;
  model->bert->encoder->gradient_checkpointing = true;
  Tensor a = model->forward(ids, mask);
  model->bert->encoder->gradient_checkpointing = false;
  expect_same(a, model->forward(ids, mask), "eval logits");
}

TEST(Checkpoint, UnderNoGradItIsTheFunction) {
  Tensor x = randn({4}, TensorOptions(kFloat64).requires_grad(true));
  NoGradGuard no_grad;
  Tensor y = utils::checkpoint([](const Tensor& t) { return sin(t); }, x);
  EXPECT_FALSE(y.requires_grad());
  expect_same(y, sin(x), "no grad");
}

}  // namespace
}  // namespace kiln::test
