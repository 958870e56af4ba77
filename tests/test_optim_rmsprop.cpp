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

// A fixture case's parameters (fresh leaves, in the case's dtype) and its optimizer.
struct OptimRun {
  std::vector<Tensor> params;
  std::unique_ptr<optim::Optimizer> opt;
  const FixtureCase* c;
  ScalarType dtype;

  explicit OptimRun(const FixtureCase& fc) : c(&fc) {
    dtype = fc.with("dtype").at(0).at(1) == "float32" ? kFloat32 : kFloat64;
    params = fixture_params(fc, dtype);
    std::vector<OptimizerParamGroup> groups = fixture_groups(fc, params);
    const auto defaults = option_pairs(fc.with("defaults").at(0), 1);
    if (fc.with("kind").at(0).at(1) == "RMSprop")
      opt = std::make_unique<RMSprop>(groups, rmsprop_options(defaults));
    else
      opt = std::make_unique<Adagrad>(groups, adagrad_options(defaults));
  }
  void step(int64_t s) {
    for (auto& p : params) p.set_grad(Tensor());
    for (const auto& w : c->with("grad"))
      if (std::stoll(w[1]) == s) {
        Tensor& p = params[std::stoll(w[2])];
        p.set_grad(tensor(nums(w, 3), p.shape(), kFloat64).to(dtype));
      }
    opt->step();
  }
  int64_t steps() const { return std::stoll(c->with("expect").back().at(1)) + 1; }
};

TEST(OptimRMSpropAdagrad, MatchPyTorch) {
  const auto cases = read_fixture_cases("optim/rmsprop_adagrad.txt");
  ASSERT_EQ(cases.size(), 14u);
  for (const auto& fc : cases) {
    OptimRun run(fc);
    const bool f32 = run.dtype == kFloat32;
    const double rtol = f32 ? 1e-6 : 1e-12, atol = f32 ? 1e-7 : 1e-15;
    for (int64_t s = 0; s < run.steps(); ++s) {
      run.step(s);
      for (const auto& w : fc.with("expect"))
        if (std::stoll(w[1]) == s) {
          const Tensor& p = run.params[std::stoll(w[2])];
          expect_close(p, nums(w, 3), p.shape(), rtol, atol, fc.name + " step " + w[1] + " param " + w[2]);
        }
      for (const auto& w : fc.with("step"))
        if (std::stoll(w[1]) == s) {
          const auto& st = run.opt->state(run.params[std::stoll(w[2])]);
          ASSERT_TRUE(st.count("step")) << fc.name;
          EXPECT_EQ(st.at("step").item<float>(), num(w[3])) << fc.name << " step " << s << " param " << w[2];
        }
    }
  }
}

// Stopping after k steps, saving, loading into a fresh optimizer and continuing gives exactly the
// uninterrupted trajectory.
TEST(OptimRMSpropAdagrad, StateDictRoundTrip) {
  for (const auto& c : read_fixture_cases("optim/rmsprop_adagrad.txt")) {
    OptimRun whole(c), first(c);
    const int64_t k = 3;
    for (int64_t s = 0; s < k; ++s) {
      whole.step(s);
      first.step(s);
    }
    const auto sd = first.opt->state_dict();
    OptimRun second(c);
    for (size_t i = 0; i < second.params.size(); ++i) {
      NoGradGuard g;
      second.params[i].copy_(first.params[i]);
    }
    second.opt->load_state_dict(sd);
    for (int64_t s = k; s < whole.steps(); ++s) {
      whole.step(s);
      second.step(s);
    }
    for (size_t i = 0; i < whole.params.size(); ++i)
      EXPECT_EQ(values(second.params[i]), values(whole.params[i])) << c.name << " param " << i;
  }
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
