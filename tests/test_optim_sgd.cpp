// SGD against PyTorch trajectories (tests/fixtures/optim/sgd.txt), its state_dict, zero_grad and errors.
#include <map>

#include "kiln/optim.h"
#include "optim_fixture.h"
#include "test_util.h"

namespace kiln::test {
namespace {

using optim::OptimizerParamGroup;
using optim::SGD;
using optim::SGDOptions;

SGDOptions sgd_options(const std::map<std::string, Scalar>& m) {
  SGDOptions o{.lr = m.at("lr").to_double()};
  if (m.count("momentum")) o.momentum = m.at("momentum").to_double();
  if (m.count("dampening")) o.dampening = m.at("dampening").to_double();
  if (m.count("weight_decay")) o.weight_decay = m.at("weight_decay").to_double();
  if (m.count("nesterov")) o.nesterov = m.at("nesterov").to<bool>();
  return o;
}

std::unique_ptr<optim::Optimizer> make_sgd(const std::string&, std::vector<OptimizerParamGroup> groups,
                                           const std::map<std::string, Scalar>& defaults) {
  return std::make_unique<SGD>(groups, sgd_options(defaults));
}

TEST(OptimSGD, MatchesPyTorchFloat64) {
  auto cases = read_fixture_cases("optim/sgd.txt");
  ASSERT_EQ(cases.size(), 10u);
  expect_trajectories_match(cases, make_sgd, kFloat64, {{1e-10, 1e-12}});
}

TEST(OptimSGD, MatchesPyTorchFloat32) {
  // The float64 fixture run in float32: float32's rounding from the first step on.
  expect_trajectories_match(read_fixture_cases("optim/sgd.txt"), make_sgd, kFloat32, {{1e-5, 1e-6}});
}

// Stopping after k steps, saving, loading into a new optimizer and continuing gives exactly
// the uninterrupted trajectory.
TEST(OptimSGD, StateDictRoundTrip) {
  expect_state_dict_round_trip(read_fixture_cases("optim/sgd.txt"), make_sgd, [](optim::Optimizer& o) {
    for (auto& g : o.param_groups()) g.set_lr(123.0);  // load must restore the options
  });
}

TEST(OptimSGD, StateDictKeysAndTypes) {
  Tensor a = zeros({2}).requires_grad_(), b = zeros({3}).requires_grad_();
  SGD opt({OptimizerParamGroup({a}), OptimizerParamGroup({b}, {{"lr", 0.5}, {"momentum", 0}, {"nesterov", false}})},
          {.lr = 0.1, .momentum = 0.9, .nesterov = true});
  a.set_grad(ones({2}));
  opt.step();
  auto sd = opt.state_dict();
  ASSERT_TRUE(sd.count("state.0.momentum_buffer"));
  EXPECT_FALSE(sd.count("state.1.momentum_buffer"));  // b had no grad
  EXPECT_EQ(values(sd.at("state.0.momentum_buffer")), (std::vector<double>{1, 1}));
  EXPECT_EQ(sd.at("param_groups.1.lr").dtype(), kFloat64);
  EXPECT_EQ(sd.at("param_groups.1.lr").dim(), 0);
  EXPECT_EQ(sd.at("param_groups.1.lr").item<double>(), 0.5);
  EXPECT_EQ(sd.at("param_groups.1.momentum").item<double>(), 0.0);
  EXPECT_EQ(sd.at("param_groups.0.nesterov").dtype(), kInt64);
  EXPECT_EQ(sd.at("param_groups.0.nesterov").item<int64_t>(), 1);
  EXPECT_EQ(values(sd.at("param_groups.1.params")), std::vector<double>{1});
  EXPECT_EQ(opt.options(1).lr, 0.5);
  EXPECT_EQ(opt.options(0).momentum, 0.9);
  EXPECT_EQ(sd.size(), 15u);  // 1 state + 2 groups x (params + 6 options)
}

TEST(OptimSGD, BufferIsACopyAndGradIsUntouched) {
  Tensor p = tensor({1.0, 2.0, 3.0}).requires_grad_();
  SGD opt({p}, {.lr = 0.1, .momentum = 0.9, .dampening = 0.5, .weight_decay = 0.1});
  p.set_grad(tensor({0.5, -1.0, 2.0}));
  opt.step();
  Tensor buf = opt.state(p).at("momentum_buffer");
  EXPECT_FALSE(buf.storage() == p.grad().storage());
  opt.zero_grad(false);  // zeroes the grad in place: the buffer must keep its values
  EXPECT_EQ(values(p.grad()), (std::vector<double>{0, 0, 0}));
  expect_close(buf, {0.5 + 0.1 * 1, -1.0 + 0.1 * 2, 2.0 + 0.1 * 3}, {3});
  Tensor g = tensor({1.0, 1.0, 1.0});
  p.set_grad(g);
  opt.step();
  EXPECT_EQ(values(g), (std::vector<double>{1, 1, 1}));
}

TEST(OptimSGD, ZeroGrad) {
  Tensor a = ones({2, 2}).requires_grad_(), b = ones({3}).requires_grad_();
  SGD opt({a, b}, {.lr = 1});
  (a.sum() * 2 + b.sum()).backward();
  ASSERT_TRUE(a.grad().defined());
  opt.zero_grad(false);
  EXPECT_EQ(values(a.grad()), (std::vector<double>{0, 0, 0, 0}));
  EXPECT_EQ(b.grad().shape(), Shape{3});
  opt.zero_grad();
  EXPECT_FALSE(a.grad().defined());
  EXPECT_FALSE(b.grad().defined());
  opt.step();  // no grads: nothing moves
  EXPECT_EQ(values(a), (std::vector<double>{1, 1, 1, 1}));
}

TEST(OptimSGD, TrainsWithBackwardAndClosure) {
  Tensor w = zeros({3}).requires_grad_();
  Tensor target = tensor({1.0, -2.0, 0.5});
  SGD opt({w}, {.lr = 0.1, .momentum = 0.9, .nesterov = true});
  double first = 0, last = 0;
  for (int i = 0; i < 60; ++i) {
    Tensor loss = opt.step([&] {
      opt.zero_grad();
      Tensor l = (w - target).square().sum();
      l.backward();
      return l;
    });
    (i == 0 ? first : last) = loss.item<double>();
  }
  EXPECT_EQ(first, 1.0 + 4.0 + 0.25);
  EXPECT_LT(last, 1e-4);
  expect_close(w, {1.0, -2.0, 0.5}, {3}, 0, 1e-2);
  EXPECT_FALSE(w.grad_fn());  // the update is not recorded
}

TEST(OptimSGD, AddParamGroupFillsDefaults) {
  Tensor a = zeros({1}).requires_grad_(), b = zeros({1}).requires_grad_();
  SGD opt({a}, {.lr = 0.1, .momentum = 0.9, .weight_decay = 1e-4});
  opt.add_param_group({{b}, {{"lr", 1}, {"momentum", 0}}});  // integers become floats
  ASSERT_EQ(opt.param_groups().size(), 2u);
  SGDOptions o = opt.options(1);
  EXPECT_EQ(o.lr, 1.0);
  EXPECT_EQ(o.momentum, 0.0);
  EXPECT_EQ(o.weight_decay, 1e-4);
  EXPECT_TRUE(opt.param_groups()[1].options().at("momentum").is_floating_point());
  EXPECT_EQ(opt.parameters().size(), 2u);
  EXPECT_TRUE(opt.parameters()[1].is_same(b));
}

// PyTorch's default lr (1e-3): options without one are not silently lr = 0 (nor, declared
// as `SGDOptions o;`, uninitialised).
TEST(OptimSGD, LrDefaultsToPyTorchs) {
  SGDOptions o;
  EXPECT_EQ(o.lr, 1e-3);
  Tensor p = zeros({2}).requires_grad_();
  SGD opt({p}, {.momentum = 0.9});
  EXPECT_EQ(opt.options(0).lr, 1e-3);
  EXPECT_EQ(opt.options(0).momentum, 0.9);
}

TEST(OptimSGD, OptionErrors) {
  Tensor p = zeros({2}).requires_grad_();
  expect_error([&] { SGD({p}, {.lr = -0.1}); }, "[SGD] invalid learning rate: -0.1");
  expect_error([&] { SGD({p}, {.lr = 0.1, .momentum = -1}); }, "[SGD] invalid momentum value: -1");
  expect_error([&] { SGD({p}, {.lr = 0.1, .weight_decay = -1e-4}); }, "[SGD] invalid weight_decay value");
  expect_error([&] { SGD({p}, {.lr = 0.1, .nesterov = true}); }, "[SGD] Nesterov momentum requires a momentum");
  expect_error([&] { SGD({p}, {.lr = 0.1, .momentum = 0.9, .dampening = 0.1, .nesterov = true}); },
               "zero dampening");
  expect_error([&] { SGD(std::vector<Tensor>{}, {.lr = 0.1}); }, "[SGD] got an empty parameter list");
  expect_error([&] { SGD({OptimizerParamGroup({p}, {{"lrr", 0.1}})}, {.lr = 0.1}); },
               "[SGD::add_param_group] unknown option 'lrr' in param group 0");
  expect_error([&] { SGD({OptimizerParamGroup({p}, {{"lr", -1}})}, {.lr = 0.1}); },
               "[SGD::add_param_group] invalid learning rate: -1");
  expect_error([&] { SGD({OptimizerParamGroup({p}), OptimizerParamGroup({p})}, {.lr = 0.1}); },
               "parameter 0 of param group 1 appears more than once");
  Tensor q = p * 2;
  expect_error([&] { SGD({q}, {.lr = 0.1}); }, "is not a leaf tensor");
  expect_error([&] { SGD({Tensor()}, {.lr = 0.1}); }, "undefined tensor");
  expect_error([&] { SGD({zeros({2}, kInt64)}, {.lr = 0.1}); }, "must be floating point");
  SGD opt({p}, {.lr = 0.1});
  expect_error([&] { opt.options(1); }, "[SGD::options] param group 1 out of range");
  expect_error([&] { opt.param_groups()[0].get("betas"); }, "[OptimizerParamGroup::get] no option 'betas'");
}

TEST(OptimSGD, LoadStateDictErrors) {
  Tensor a = zeros({2}).requires_grad_(), b = zeros({3}).requires_grad_();
  SGD opt({OptimizerParamGroup({a}), OptimizerParamGroup({b})}, {.lr = 0.1, .momentum = 0.9});
  a.set_grad(ones({2}));
  b.set_grad(ones({3}));
  opt.step();
  const auto good = opt.state_dict();
  auto with = [&](auto edit) {
    auto sd = good;
    edit(sd);
    return sd;
  };
  const char* L = "[SGD::load_state_dict] ";
  expect_error([&] { opt.load_state_dict(with([](auto& sd) { sd.erase("param_groups.1.momentum"); })); },
               std::string(L) + "missing key 'param_groups.1.momentum'");
  expect_error([&] { opt.load_state_dict(with([](auto& sd) { sd.erase("param_groups.0.params"); })); },
               std::string(L) + "missing key 'param_groups.0.params'");
  expect_error([&] { opt.load_state_dict(with([](auto& sd) { sd["state.1.momentum_buffer"] = zeros({2}); })); },
               std::string(L) + "'state.1.momentum_buffer' has shape [2] but parameter 1 has shape [3]");
  expect_error(
      [&] { opt.load_state_dict(with([](auto& sd) { sd["state.0.momentum_buffer"] = zeros({2}, kInt64); })); },
      std::string(L) + "'state.0.momentum_buffer' has dtype int64; optimizer state must be floating point");
  expect_error([&] { opt.load_state_dict(with([](auto& sd) { sd["state.2.momentum_buffer"] = zeros({2}); })); },
               std::string(L) + "'state.2.momentum_buffer' is for parameter 2 but the optimizer has 2 parameters");
  expect_error([&] { opt.load_state_dict(with([](auto& sd) { sd["state.0.exp_avg"] = zeros({2}); })); },
               std::string(L) + "unexpected key 'state.0.exp_avg'");
  expect_error([&] { opt.load_state_dict(with([](auto& sd) { sd["epoch"] = zeros({}); })); },
               std::string(L) + "unexpected key 'epoch'");
  expect_error([&] { opt.load_state_dict(with([](auto& sd) { sd["state.x.momentum_buffer"] = zeros({2}); })); },
               std::string(L) + "unexpected key 'state.x.momentum_buffer'");
  expect_error([&] { opt.load_state_dict(with([](auto& sd) { sd["param_groups.2.lr"] = scalar_tensor(0.1, kFloat64); })); },
               std::string(L) + "'param_groups.2.lr' is for param group 2 but the optimizer has 2 param groups");
  expect_error([&] { opt.load_state_dict(with([](auto& sd) { sd["param_groups.0.lr"] = scalar_tensor(0.1, kFloat32); })); },
               std::string(L) + "'param_groups.0.lr' has dtype float32, expected float64");
  expect_error([&] { opt.load_state_dict(with([](auto& sd) { sd["param_groups.0.lr"] = zeros({1}, kFloat64); })); },
               std::string(L) + "'param_groups.0.lr' must be a 0-d tensor, got shape [1]");
  expect_error([&] { opt.load_state_dict(with([](auto& sd) { sd["param_groups.0.nesterov"] = scalar_tensor(1.0, kFloat64); })); },
               std::string(L) + "'param_groups.0.nesterov' has dtype float64, expected int64");
  expect_error([&] { opt.load_state_dict(with([](auto& sd) { sd["param_groups.1.params"] = tensor({1L, 2L}, kInt64); })); },
               std::string(L) + "param group 1 has 2 parameters in the state dict but 1 in the optimizer");
  expect_error([&] { opt.load_state_dict(with([](auto& sd) { sd["param_groups.0.lr"] = scalar_tensor(-1.0, kFloat64); })); },
               std::string(L) + "invalid learning rate: -1");
  expect_error([&] { opt.load_state_dict(with([](auto& sd) { sd["param_groups.0.lr"] = Tensor(); })); },
               std::string(L) + "'param_groups.0.lr' is an undefined tensor");

  // A failed load changes nothing.
  Tensor buf_before = opt.state(a).at("momentum_buffer").clone();
  expect_error([&] {
    opt.load_state_dict(with([](auto& sd) {
      sd["state.0.momentum_buffer"] = full({2}, 7.0);
      sd["param_groups.0.lr"] = scalar_tensor(0.5, kFloat64);
      sd["bogus"] = zeros({});
    }));
  }, "unexpected key 'bogus'");
  EXPECT_EQ(values(opt.state(a).at("momentum_buffer")), values(buf_before));
  EXPECT_EQ(opt.options(0).lr, 0.1);
}

// maximize ascends: every step is the step on the negated gradient, bit for bit (the sign flip
// is exact), as torch's grad = -grad; a state dict from before the option loads it as false.
TEST(OptimSgd, MaximizeStepsOnTheNegatedGradient) {
  for (Device dev : test::devices())
    for (bool nesterov : {false, true}) {
      manual_seed(3);
      const Tensor w0 = randn({7}).to(dev);
      Tensor up_w = w0.clone().requires_grad_(), down_w = w0.clone().requires_grad_();
      SGDOptions o{.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01, .nesterov = nesterov};
      SGD down({down_w}, o);
      o.maximize = true;
      SGD up({up_w}, o);
      for (int s = 0; s < 3; ++s) {
        const Tensor g = randn({7}).to(dev);
        up_w.set_grad(g.clone());
        down_w.set_grad(-g);
        up.step();
        down.step();
      }
      EXPECT_EQ(values(up_w), values(down_w)) << dev.str();
      EXPECT_TRUE(up.options(0).maximize);
      // Plain SGD moves along the gradient.
      Tensor p = w0.clone().requires_grad_();
      SGD plain({p}, {.lr = 0.5, .maximize = true});
      p.set_grad(ones({7}).to(dev));
      plain.step();
      expect_close(p, values(w0 + 0.5), {7}, 1e-6);
      auto sd = up.state_dict();
      sd.erase("param_groups.0.maximize");
      up.load_state_dict(sd);
      EXPECT_FALSE(up.options(0).maximize);
    }
}

}  // namespace
}  // namespace kiln::test
