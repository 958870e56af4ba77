// RMSprop and Adagrad against PyTorch trajectories (tests/fixtures/optim/rmsprop_adagrad.txt),
// state_dict round trips, errors, and a step on the stand-in GPU without the CPU fallback.
#include <memory>

#include "kiln/optim.h"
#include "cuda_test_util.h"
#include "optim_fixture.h"
#include "stand_in_device.h"
#include "test_util.h"

namespace kiln::test {
namespace {

using optim::Adagrad;
using optim::AdagradOptions;
using optim::OptimizerParamGroup;
using optim::RMSprop;
using optim::RMSpropOptions;

RMSpropOptions rmsprop_options(const std::map<std::string, Scalar>& m) {
  RMSpropOptions o;
  for (const auto& [k, v] : m) {
    if (k == "lr") o.lr = v.to_double();
    else if (k == "alpha") o.alpha = v.to_double();
    else if (k == "eps") o.eps = v.to_double();
    else if (k == "weight_decay") o.weight_decay = v.to_double();
    else if (k == "momentum") o.momentum = v.to_double();
    else if (k == "centered") o.centered = v.to<bool>();
    else if (k == "maximize") o.maximize = v.to<bool>();
    else ADD_FAILURE() << "unknown RMSprop option " << k;
  }
  return o;
}

AdagradOptions adagrad_options(const std::map<std::string, Scalar>& m) {
  AdagradOptions o;
  for (const auto& [k, v] : m) {
    if (k == "lr") o.lr = v.to_double();
    else if (k == "lr_decay") o.lr_decay = v.to_double();
    else if (k == "weight_decay") o.weight_decay = v.to_double();
    else if (k == "initial_accumulator_value") o.initial_accumulator_value = v.to_double();
    else if (k == "eps") o.eps = v.to_double();
    else if (k == "maximize") o.maximize = v.to<bool>();
    else ADD_FAILURE() << "unknown Adagrad option " << k;
  }
  return o;
}

// RMSprop or Adagrad, as a fixture case's "kind" says.
std::unique_ptr<optim::Optimizer> make_optimizer(const std::string& kind, std::vector<OptimizerParamGroup> groups,
                                                 const std::map<std::string, Scalar>& defaults) {
  if (kind == "RMSprop") return std::make_unique<RMSprop>(groups, rmsprop_options(defaults));
  return std::make_unique<Adagrad>(groups, adagrad_options(defaults));
}

// The cases of one dtype.
std::vector<FixtureCase> of_dtype(const std::vector<FixtureCase>& cases, const std::string& dtype) {
  std::vector<FixtureCase> out;
  for (const auto& c : cases)
    if (c.with("dtype").at(0).at(1) == dtype) out.push_back(c);
  return out;
}

// The update is torch's op for op, with its roundings (addcmul_, addcdiv_, lerp_ and add's alpha
// each round once), so float32 and float64 runs equal torch's but for an ulp where torch's sqrt
// (MKL's, not correctly rounded) is one off. torch's bfloat16 ops round differently on short
// tensors (c10::BFloat16 arithmetic, a rounding per operation) than on its vector path (float,
// rounded once), which Kiln's follow on all lengths: with momentum, a few bfloat16 ulps apart after
// 6 steps (rmsprop_default, _centered and adagrad's bfloat16 cases are equal).
TEST(OptimRMSpropAdagrad, MatchPyTorch) {
  const auto cases = read_fixture_cases("optim/rmsprop_adagrad.txt");
  ASSERT_EQ(cases.size(), 20u);
  expect_trajectories_match(of_dtype(cases, "float64"), make_optimizer, std::nullopt, std::pair{5e-16, 0.0});
  expect_trajectories_match(of_dtype(cases, "float32"), make_optimizer, std::nullopt, std::pair{2.5e-7, 0.0});
  expect_trajectories_match(of_dtype(cases, "bfloat16"), make_optimizer, std::nullopt, std::pair{3e-2, 2e-3});
}

// Stopping after 3 steps, saving, loading into a fresh optimizer and continuing gives exactly the
// uninterrupted trajectory (the options from the state dict, not the fresh optimizer's).
TEST(OptimRMSpropAdagrad, StateDictRoundTrip) {
  expect_state_dict_round_trip(read_fixture_cases("optim/rmsprop_adagrad.txt"), make_optimizer,
                               [](optim::Optimizer& o) {
                                 for (auto& g : o.param_groups()) g.set_lr(123.0);
                               });
}

TEST(OptimRMSpropAdagrad, StateNamesAsPyTorch) {
  Tensor p = randn({3}).requires_grad_();
  RMSprop plain({p}), all({p}, {.momentum = 0.9, .centered = true});
  p.set_grad(ones({3}));
  plain.step();
  all.step();
  auto keys = [](const optim::Optimizer& o, const Tensor& t) {
    std::vector<std::string> k;
    for (const auto& [name, v] : o.state(t)) k.push_back(name);
    return k;
  };
  EXPECT_EQ(keys(plain, p), (std::vector<std::string>{"square_avg", "step"}));
  EXPECT_EQ(keys(all, p), (std::vector<std::string>{"grad_avg", "momentum_buffer", "square_avg", "step"}));
  Tensor q = randn({2}).requires_grad_();
  Adagrad ada({q}, {.initial_accumulator_value = 0.25});
  q.set_grad(full({2}, 2.0));
  ada.step();
  EXPECT_EQ(keys(ada, q), (std::vector<std::string>{"step", "sum"}));
  expect_close(ada.state(q).at("sum"), {4.25, 4.25}, {2});
  EXPECT_EQ(ada.options(0).initial_accumulator_value, 0.25);
  // A group added later starts from the optimizer's initial value, whatever it says (as torch's).
  Tensor r = randn({2}).requires_grad_();
  ada.add_param_group(OptimizerParamGroup({r}, {{"initial_accumulator_value", 0.9}}));
  r.set_grad(full({2}, 1.0));
  ada.step();
  expect_close(ada.state(r).at("sum"), {1.25, 1.25}, {2});
  EXPECT_TRUE(all.options(0).centered);
}

TEST(OptimRMSpropAdagrad, BadOptionsAreErrors) {
  Tensor p = randn({3}).requires_grad_();
  expect_error([&] { RMSprop({p}, {.lr = -1}); }, "[RMSprop] invalid learning rate: -1");
  expect_error([&] { RMSprop({p}, {.alpha = -0.5}); }, "invalid alpha value");
  expect_error([&] { RMSprop({p}, {.momentum = -0.1}); }, "invalid momentum value");
  expect_error([&] { RMSprop(std::vector<Tensor>{}); }, "[RMSprop] got an empty parameter list");
  expect_error([&] { Adagrad({p}, {.lr_decay = -1}); }, "[Adagrad] invalid lr_decay value: -1");
  expect_error([&] { Adagrad({p}, {.initial_accumulator_value = -1}); }, "invalid initial_accumulator_value");
  expect_error([&] { Adagrad({p}, {.eps = -1}); }, "invalid epsilon value");
  RMSprop opt({p});
  expect_error([&] { opt.add_param_group(OptimizerParamGroup({randn({2}).requires_grad_()}, {{"betas", 0.9}})); },
               "betas");
}

// The update's ops all run on a GPU (here the stand-in, the CPU kernels behind the CUDA kernels'
// own rules): no op goes through the CPU fallback, and the values are the CPU's.
TEST(OptimRMSpropAdagrad, StepOnTheStandInGpuWithoutFallback) {
  if (cuda::is_available()) GTEST_SKIP() << "a real GPU is present";
  StandInCuda stand_in(StandInCuda::Kernels::CpuWhereCudaHasOne);
  if (stand_in.native_ops() == 0) GTEST_SKIP() << "built without CUDA kernels";
  const Device gpu{DeviceType::CUDA, 0};
  manual_seed(5);
  const Tensor start = randn({4, 3}), grad = randn({4, 3});
  for (int which = 0; which < 2; ++which) {
    Tensor on_cpu = start.clone().requires_grad_(), on_gpu = start.to(gpu).requires_grad_();
    std::unique_ptr<optim::Optimizer> a, b;
    if (which == 0) {
      const RMSpropOptions o{.lr = 0.01, .weight_decay = 0.1, .momentum = 0.9, .centered = true};
      a = std::make_unique<RMSprop>(std::vector<Tensor>{on_cpu}, o);
      b = std::make_unique<RMSprop>(std::vector<Tensor>{on_gpu}, o);
    } else {
      const AdagradOptions o{.lr = 0.1, .lr_decay = 0.01, .initial_accumulator_value = 0.1};
      a = std::make_unique<Adagrad>(std::vector<Tensor>{on_cpu}, o);
      b = std::make_unique<Adagrad>(std::vector<Tensor>{on_gpu}, o);
    }
    const uint64_t before = total_fallbacks();
    for (int s = 0; s < 3; ++s) {
      on_cpu.set_grad(grad);
      on_gpu.set_grad(grad.to(gpu));
      a->step();
      b->step();
    }
    EXPECT_EQ(total_fallbacks(), before) << (which == 0 ? "RMSprop" : "Adagrad");
    EXPECT_EQ(on_gpu.device(), gpu);
    EXPECT_EQ(values(on_gpu.cpu()), values(on_cpu)) << (which == 0 ? "RMSprop" : "Adagrad");
  }
}

}  // namespace
}  // namespace kiln::test
