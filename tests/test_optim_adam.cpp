// Adam and AdamW against PyTorch trajectories (tests/fixtures/optim/adam.txt), the fused
// kernel against a float64 loop, state_dict round trips, and errors.
#include <cmath>
#include <limits>
#include <map>
#include <optional>

#include "stand_in_device.h"
#include "kiln/nn.h"
#include "kiln/optim.h"
#include "optim_fixture.h"
#include "test_util.h"

namespace kiln::test {
namespace {

using optim::Adam;
using optim::AdamBase;
using optim::AdamOptions;
using optim::AdamW;
using optim::AdamWOptions;
using optim::OptimizerParamGroup;

template <class O>
O typed_options(const std::map<std::string, Scalar>& m) {
  O o;
  if (m.count("lr")) o.lr = m.at("lr").to_double();
  if (m.count("beta1")) std::get<0>(o.betas) = m.at("beta1").to_double();
  if (m.count("beta2")) std::get<1>(o.betas) = m.at("beta2").to_double();
  if (m.count("eps")) o.eps = m.at("eps").to_double();
  if (m.count("weight_decay")) o.weight_decay = m.at("weight_decay").to_double();
  if (m.count("amsgrad")) o.amsgrad = m.at("amsgrad").to<bool>();
  return o;
}

// Adam or AdamW, as a fixture case's "kind" says.
std::unique_ptr<optim::Optimizer> make_adam(const std::string& kind, std::vector<OptimizerParamGroup> groups,
                                            const std::map<std::string, Scalar>& defaults) {
  if (kind == "AdamW") return std::make_unique<AdamW>(groups, typed_options<AdamWOptions>(defaults));
  return std::make_unique<Adam>(groups, typed_options<AdamOptions>(defaults));
}

TEST(OptimAdam, MatchesPyTorch) {
  auto cases = read_fixture_cases("optim/adam.txt");
  ASSERT_EQ(cases.size(), 24u);
  expect_trajectories_match(cases, make_adam);
}

// Stopping after k steps, saving, loading into a fresh optimizer and continuing gives exactly
// the uninterrupted trajectory.
TEST(OptimAdam, StateDictRoundTrip) {
  expect_state_dict_round_trip(read_fixture_cases("optim/adam.txt"), make_adam, [](optim::Optimizer& o) {
    for (auto& g : o.param_groups()) {
      g.set_lr(123.0);
      g.set("beta1", 0.5);
    }
  });
}

TEST(OptimAdam, StateDictKeysAndTypes) {
  Tensor a = zeros({2}).requires_grad_(), b = zeros({3}).requires_grad_();
  AdamW opt({OptimizerParamGroup({a}), OptimizerParamGroup({b}, {{"beta2", 0.98}, {"amsgrad", true}})},
            {.lr = 0.1, .betas = {0.8, 0.9}});
  a.set_grad(ones({2}));
  opt.step();
  opt.step();
  auto sd = opt.state_dict();
  ASSERT_TRUE(sd.count("state.0.step"));
  EXPECT_EQ(sd.at("state.0.step").dtype(), kFloat32);
  EXPECT_EQ(sd.at("state.0.step").dim(), 0);
  EXPECT_EQ(sd.at("state.0.step").item<float>(), 2.0f);
  expect_close(sd.at("state.0.exp_avg"), {1 - 0.8 * 0.8, 1 - 0.8 * 0.8}, {2}, 1e-6);
  expect_close(sd.at("state.0.exp_avg_sq"), {1 - 0.9 * 0.9, 1 - 0.9 * 0.9}, {2}, 1e-6);
  EXPECT_FALSE(sd.count("state.0.max_exp_avg_sq"));  // group 0 has no amsgrad
  EXPECT_FALSE(sd.count("state.1.step"));            // b had no grad
  EXPECT_EQ(sd.at("param_groups.1.beta2").item<double>(), 0.98);
  EXPECT_EQ(sd.at("param_groups.1.beta1").item<double>(), 0.8);
  EXPECT_EQ(sd.at("param_groups.0.weight_decay").item<double>(), 1e-2);  // AdamW's default
  EXPECT_EQ(sd.at("param_groups.1.amsgrad").dtype(), kInt64);
  EXPECT_EQ(sd.at("param_groups.1.amsgrad").item<int64_t>(), 1);
  EXPECT_EQ(sd.size(), 3u + 2u * 8u);  // 3 state + 2 groups x (params + 7 options)
  EXPECT_EQ(std::get<1>(opt.options(1).betas), 0.98);
  EXPECT_TRUE(opt.options(1).amsgrad);
  EXPECT_EQ(Adam({a}).options(0).weight_decay, 0.0);
  EXPECT_EQ(AdamW({a}).options(0).weight_decay, 1e-2);
  EXPECT_EQ(Adam({a}).options(0).lr, 1e-3);
  EXPECT_EQ(std::get<1>(Adam({a}).options(0).betas), 0.999);
}

// AMSGrad's running maximum keeps a NaN, as torch.maximum does: a NaN gradient's second moment
// is NaN, and so is its maximum from then on (not the old value, as std::max would keep).
TEST(OptimAdam, AmsgradMaximumKeepsANaN) {
  Tensor p = tensor({1.0, 2.0}, kFloat32).requires_grad_();
  AdamW opt({OptimizerParamGroup({p})}, {.amsgrad = true});
  for (const double g1 : {std::numeric_limits<double>::quiet_NaN(), 0.25}) {
    p.set_grad(tensor({0.5, g1}, kFloat32));
    opt.step();
    const std::vector<double> vmax = values(opt.state_dict().at("state.0.max_exp_avg_sq"));
    EXPECT_TRUE(std::isfinite(vmax[0])) << vmax[0];
    EXPECT_TRUE(std::isnan(vmax[1])) << "after a gradient of " << g1 << ": " << vmax[1];
  }
}

// The fused kernel over many tensors of uneven sizes (some empty, some split across threads)
// equals a per-element float64 loop of the update.
TEST(OptimAdam, FusedKernelMatchesLoopOnManyTensors) {
  for (bool decoupled : {false, true})
    for (bool amsgrad : {false, true}) {
      const std::vector<int64_t> sizes{70001, 0, 3, 1, 40000, 129, 0, 65536};
      std::vector<Tensor> ps;
      for (size_t i = 0; i < sizes.size(); ++i) ps.push_back(randn({sizes[i]}, kFloat64).requires_grad_());
      std::vector<std::vector<double>> p0, m(sizes.size()), v(sizes.size()), vmax(sizes.size());
      for (auto& p : ps) p0.push_back(values(p));
      const double lr = 0.01, b1 = 0.9, b2 = 0.99, eps = 1e-8, wd = 0.1;
      std::unique_ptr<AdamBase> opt;
      if (decoupled) opt = std::make_unique<AdamW>(ps, AdamWOptions{lr, {b1, b2}, eps, wd, amsgrad});
      else opt = std::make_unique<Adam>(ps, AdamOptions{lr, {b1, b2}, eps, wd, amsgrad});
      for (int step = 1; step <= 3; ++step) {
        for (size_t i = 0; i < ps.size(); ++i) {
          if (step == 2 && i == 2) {  // no grad: skipped, its count lags
            ps[i].set_grad(Tensor());
            continue;
          }
          Tensor g = randn({sizes[i]}, kFloat64) * (step == 2 ? 0.1 : 1.0);
          ps[i].set_grad(g);
          const auto gv = values(g);
          const double t = (i == 2 && step == 3) ? 2 : step;
          m[i].resize(gv.size());
          v[i].resize(gv.size());
          vmax[i].resize(gv.size());
          for (size_t j = 0; j < gv.size(); ++j) {
            double& p = p0[i][j];
            double gj = gv[j];
            if (decoupled) p *= 1 - lr * wd;
            else gj += wd * p;
            m[i][j] = m[i][j] + (1 - b1) * (gj - m[i][j]);
            v[i][j] = v[i][j] * b2 + (1 - b2) * gj * gj;
            vmax[i][j] = std::max(vmax[i][j], v[i][j]);
            const double denom = std::sqrt(amsgrad ? vmax[i][j] : v[i][j]) / std::sqrt(1 - std::pow(b2, t)) + eps;
            p -= lr / (1 - std::pow(b1, t)) * m[i][j] / denom;
          }
        }
        opt->step();
        for (size_t i = 0; i < ps.size(); ++i)
          expect_close(ps[i], p0[i], {sizes[i]}, 1e-12, 1e-14,
                       "tensor " + std::to_string(i) + " step " + std::to_string(step));
      }
    }
}

TEST(OptimAdam, GradUntouchedAndUpdateNotRecorded) {
  Tensor p = tensor({1.0, -2.0, 3.0}).requires_grad_();
  Adam opt({p}, {.lr = 0.1, .weight_decay = 0.5});
  Tensor g = tensor({0.5, 0.5, -1.0});
  p.set_grad(g);
  opt.step();
  EXPECT_EQ(values(g), (std::vector<double>{0.5, 0.5, -1.0}));
  EXPECT_FALSE(p.grad_fn());
  EXPECT_TRUE(p.requires_grad());
  // First step: m / sqrt(v) corrected is sign(g) (eps aside), so each element moves by lr.
  expect_close(p, {0.9, -1.9, 2.9}, {3}, 1e-6);  // g + 0.5 p = (1, -0.5, 0.5)
}

// Non-contiguous gradients are laid out like their parameter; channels-last parameters keep
// their layout and their state follows it.
TEST(OptimAdam, LayoutsOfGradsAndParams) {
  Tensor w = randn({3, 4}, kFloat64).requires_grad_();
  Tensor ref = w.detach().clone().requires_grad_();
  Tensor g = randn({4, 3}, kFloat64);
  Adam a({w}, {.lr = 0.1}), b({ref}, {.lr = 0.1});
  w.set_grad(g.t());  // a transposed view
  ref.set_grad(g.t().contiguous());
  a.step();
  b.step();
  EXPECT_EQ(values(w), values(ref));

  Tensor c = randn({2, 3, 2, 2}, kFloat64).contiguous(MemoryFormat::ChannelsLast).requires_grad_();
  Tensor c_ref = c.detach().contiguous().requires_grad_();
  Tensor gc = randn({2, 3, 2, 2}, kFloat64);
  AdamW oc({c}, {.lr = 0.1}), oc_ref({c_ref}, {.lr = 0.1});
  c.set_grad(gc);  // row-major grad for a channels-last parameter
  c_ref.set_grad(gc);
  oc.step();
  oc_ref.step();
  EXPECT_TRUE(c.is_contiguous(MemoryFormat::ChannelsLast));
  EXPECT_EQ(oc.state(c).at("exp_avg").strides(), c.strides());
  EXPECT_EQ(values(c), values(c_ref));
}

// One param group with float32 and float64 parameters: each dtype updated as on its own.
TEST(OptimAdam, MixedDtypesInOneGroup) {
  Tensor a = randn({5}).requires_grad_(), b = randn({4}, kFloat64).requires_grad_();
  Tensor a2 = a.detach().clone().requires_grad_(), b2 = b.detach().clone().requires_grad_();
  AdamW both({a, b}, {.lr = 0.1}), only_a({a2}, {.lr = 0.1}), only_b({b2}, {.lr = 0.1});
  for (int i = 0; i < 3; ++i) {
    Tensor ga = randn({5}), gb = randn({4}, kFloat64);
    a.set_grad(ga), a2.set_grad(ga), b.set_grad(gb), b2.set_grad(gb);
    both.step(), only_a.step(), only_b.step();
  }
  EXPECT_EQ(values(a), values(a2));
  EXPECT_EQ(values(b), values(b2));
  EXPECT_EQ(a.dtype(), kFloat32);
  EXPECT_EQ(both.state(a).at("exp_avg").dtype(), kFloat32);
}

TEST(OptimAdam, TrainsWithClosure) {
  Tensor w = zeros({3}).requires_grad_();
  Tensor target = tensor({1.0, -2.0, 0.5});
  AdamW opt({w}, {.lr = 0.05, .weight_decay = 0});
  double first = 0, last = 0;
  for (int i = 0; i < 400; ++i) {
    Tensor loss = opt.step([&] {
      opt.zero_grad();
      Tensor l = (w - target).square().sum();
      l.backward();
      return l;
    });
    (i == 0 ? first : last) = loss.item<double>();
  }
  EXPECT_EQ(first, 1.0 + 4.0 + 0.25);
  EXPECT_LT(last, 1e-3);
  expect_close(w, {1.0, -2.0, 0.5}, {3}, 0, 2e-2);
}

TEST(OptimAdam, OptionErrors) {
  Tensor p = zeros({2}).requires_grad_();
  expect_error([&] { Adam({p}, {.lr = -0.1}); }, "[Adam] invalid learning rate: -0.1");
  expect_error([&] { AdamW({p}, {.lr = -1}); }, "[AdamW] invalid learning rate: -1");
  expect_error([&] { Adam({p}, {.eps = -1e-8}); }, "[Adam] invalid epsilon value: -1e-08");
  expect_error([&] { Adam({p}, {.betas = {1.0, 0.999}}); }, "[Adam] invalid beta parameter at index 0: 1");
  expect_error([&] { AdamW({p}, {.betas = {0.9, -0.5}}); }, "[AdamW] invalid beta parameter at index 1: -0.5");
  expect_error([&] { AdamW({p}, {.betas = {0.9, 1.5}}); }, "index 1: 1.5");
  expect_error([&] { Adam({p}, {.weight_decay = -1e-4}); }, "[Adam] invalid weight_decay value: -0.0001");
  expect_error([&] { Adam({p}, {.lr = std::nan("")}); }, "[Adam] invalid learning rate: nan");
  expect_error([&] { Adam(std::vector<Tensor>{}); }, "[Adam] got an empty parameter list");
  expect_error([&] { AdamW(std::vector<OptimizerParamGroup>{}); }, "[AdamW] got an empty list of param groups");
  expect_error([&] { Adam({OptimizerParamGroup({p}, {{"betas", 0.9}})}); },
               "[Adam::add_param_group] unknown option 'betas' in param group 0");
  expect_error([&] { AdamW({OptimizerParamGroup({p}, {{"beta1", 1.0}})}); },
               "[AdamW::add_param_group] invalid beta parameter at index 0: 1");
  AdamW opt({p});
  expect_error([&] { opt.options(1); }, "[AdamW::options] param group 1 out of range");
}

// bfloat16 parameters and state: computed in float, rounded once per stored value, so they
// track a float32 run to bfloat16's precision.
TEST(OptimAdam, BFloat16TracksFloat32) {
  Tensor p32 = randn({64}).requires_grad_();
  Tensor p16 = p32.detach().to(kBFloat16).requires_grad_();
  Tensor start = p16.detach().to(kFloat32);
  {
    NoGradGuard g;
    p32.copy_(start);  // the same starting values
  }
  AdamW a32({p32}, {.lr = 0.01}), a16({p16}, {.lr = 0.01});
  for (int s = 0; s < 3; ++s) {
    Tensor g = randn({64});
    p32.set_grad(g);
    p16.set_grad(g.to(kBFloat16));
    a32.step();
    a16.step();
  }
  EXPECT_EQ(a16.state(p16).at("exp_avg").dtype(), kBFloat16);
  expect_close(p16.to(kFloat32), values(p32), {64}, 1e-2, 1e-2);
  EXPECT_NE(values(p16.to(kFloat32)), values(start));
}

TEST(OptimAdam, StepErrors) {
  Tensor p = randn({4, 3}).t().requires_grad_();  // a transposed leaf
  AdamW op({p});
  p.set_grad(ones({3, 4}));
  expect_error([&] { op.step(); }, "[AdamW::step] parameter 0 of shape [3, 4] has strides [1, 3]; parameters must be contiguous");
  EXPECT_TRUE(op.state(p).empty());  // the failed step changed no state

  Tensor q = randn({3, 4}).t().requires_grad_();
  optim::SGD sgd({q}, {.lr = 0.1, .momentum = 0.9});
  q.set_grad(ones({4, 3}));
  expect_error([&] { sgd.step(); }, "[SGD::step] parameter 0 of shape [4, 3] has strides [1, 4]");
  EXPECT_TRUE(sgd.state(q).empty());  // no buffer was made
}

// A gradient the fused step refuses (here a float32 gradient left on a parameter made float64
// behind its handle) is found before anything changes, in every param group: no step counted,
// no moment or momentum buffer made, no parameter moved. After fixing it, one step equals a
// fresh optimizer's first step.
TEST(OptimAdam, AFailedStepChangesNothing) {
  auto check = [](auto make, const std::string& error) {
    Tensor a = tensor({1.0, 2.0, 3.0}, kFloat64).requires_grad_(), b = tensor({-1.0f, 0.5f}).requires_grad_();
    const Tensor a0 = a.detach().clone(), b0 = b.detach().to(kFloat64);
    const Tensor ga = tensor({0.5, -1.0, 2.0}, kFloat64), gb = tensor({1.0, 2.0}, kFloat64);
    auto opt = make(a, b);  // a in param group 0, b in group 1
    a.set_grad(ga);
    b.set_grad(gb.to(kFloat32));
    nn::detail::set_data(b, b.detach().to(kFloat64));  // b is float64 now; its gradient is not
    expect_error([&] { opt->step(); }, error);
    EXPECT_TRUE(opt->state(a).empty()) << error;
    EXPECT_TRUE(opt->state(b).empty()) << error;
    EXPECT_EQ(values(a), values(a0)) << error;
    EXPECT_EQ(values(b), values(b0)) << error;
    b.set_grad(gb);
    opt->step();
    Tensor fa = a0.clone().requires_grad_(), fb = b0.clone().requires_grad_();
    auto fresh = make(fa, fb);
    fa.set_grad(ga);
    fb.set_grad(gb);
    fresh->step();
    EXPECT_EQ(values(a), values(fa)) << error;
    EXPECT_EQ(values(b), values(fb)) << error;
    for (const auto& [name, t] : fresh->state(fb)) EXPECT_EQ(values(opt->state(b).at(name)), values(t)) << name;
  };
  auto groups = [](const Tensor& a, const Tensor& b) {
    return std::vector<OptimizerParamGroup>{OptimizerParamGroup({a}), OptimizerParamGroup({b})};
  };
  check([&](const Tensor& a, const Tensor& b) { return std::make_unique<Adam>(groups(a, b), AdamOptions{.lr = 0.1}); },
        "[Adam::step] the gradient of parameter 0 of param group 1 has dtype float32 but the parameter has dtype float64");
  check([&](const Tensor& a, const Tensor& b) {
          return std::make_unique<optim::SGD>(groups(a, b), optim::SGDOptions{.lr = 0.1, .momentum = 0.9, .dampening = 0.5});
        },
        "[SGD::step] the gradient of parameter 0 of param group 1 has dtype float32 but the parameter has dtype float64");

  // A gradient on another device than its parameter (the parameter moved after its gradient was
  // set; set_grad itself refuses one), likewise.
  std::optional<test::StandInCuda> stand_in;
  if (!cuda::is_available()) stand_in.emplace();
  {
    Tensor p = tensor({1.0f, 2.0f}).requires_grad_();
    optim::SGD opt({p}, {.lr = 0.1, .momentum = 0.9});
    p.set_grad(tensor({1.0f, 1.0f}));
    nn::detail::set_data(p, p.detach().to(Device::cuda(0)));
    expect_error([&] { opt.step(); }, "[SGD::step] the gradient of parameter 0 of param group 0 is on cpu but the parameter is on cuda:0");
    EXPECT_TRUE(opt.state(p).empty());
  }

  // State made before the model was converted: refused before the step count moves.
  {
    Tensor p = tensor({1.0f, 2.0f}).requires_grad_();
    Adam opt({p}, {.lr = 0.1});
    p.set_grad(tensor({1.0f, 1.0f}));
    opt.step();
    nn::detail::set_data(p, p.detach().to(kFloat64));
    p.set_grad(tensor({1.0, 1.0}, kFloat64));
    expect_error([&] { opt.step(); }, "[Adam::step] the exp_avg of parameter 0 of param group 0 is float32 [2] on cpu");
    EXPECT_EQ(opt.state(p).at("step").item<float>(), 1.0f);
  }
}

TEST(OptimAdam, LoadStateDictErrors) {
  Tensor a = zeros({2}).requires_grad_(), b = zeros({3}).requires_grad_();
  Adam opt({OptimizerParamGroup({a}), OptimizerParamGroup({b}, {{"amsgrad", true}})}, {.lr = 0.1});
  a.set_grad(ones({2}));
  b.set_grad(ones({3}));
  opt.step();
  const auto good = opt.state_dict();
  auto with = [&](auto edit) {
    auto sd = good;
    edit(sd);
    return sd;
  };
  const std::string L = "[Adam::load_state_dict] ";
  expect_error([&] { opt.load_state_dict(with([](auto& sd) { sd["state.0.step"] = zeros({1}); })); },
               L + "'state.0.step' must be a 0-d float32 tensor, got float32 of shape [1]");
  expect_error([&] { opt.load_state_dict(with([](auto& sd) { sd["state.0.step"] = scalar_tensor(1.0, kFloat64); })); },
               L + "'state.0.step' must be a 0-d float32 tensor, got float64");
  expect_error([&] { opt.load_state_dict(with([](auto& sd) { sd["state.0.step"] = scalar_tensor(-1.0f); })); },
               L + "'state.0.step' must hold a whole number of steps, got -1");
  expect_error([&] { opt.load_state_dict(with([](auto& sd) { sd["state.0.step"] = scalar_tensor(1.5f); })); },
               "whole number of steps, got 1.5");
  expect_error([&] { opt.load_state_dict(with([](auto& sd) { sd["state.1.max_exp_avg_sq"] = zeros({2}); })); },
               L + "'state.1.max_exp_avg_sq' has shape [2] but parameter 1 has shape [3]");
  expect_error([&] { opt.load_state_dict(with([](auto& sd) { sd["state.0.momentum_buffer"] = zeros({2}); })); },
               L + "unexpected key 'state.0.momentum_buffer'");
  expect_error([&] { opt.load_state_dict(with([](auto& sd) { sd.erase("param_groups.0.beta2"); })); },
               L + "missing key 'param_groups.0.beta2'");
  expect_error([&] { opt.load_state_dict(with([](auto& sd) { sd["param_groups.1.beta1"] = scalar_tensor(1.0, kFloat64); })); },
               L + "invalid beta parameter at index 0: 1");
  // A parameter with some of its state has all of it (max_exp_avg_sq where its group has amsgrad):
  // a dict without exp_avg_sq loaded and gave a first update 7 times the learning rate, as torch
  // refuses it. A parameter with none of it starts afresh.
  for (const char* key : {"state.0.step", "state.0.exp_avg", "state.0.exp_avg_sq", "state.1.max_exp_avg_sq"})
    expect_error([&] { opt.load_state_dict(with([&](auto& sd) { sd.erase(key); })); },
                 L + "missing key '" + key + "' (parameter " + key[6] + " has other state, and Adam keeps all of it or none)");
  opt.load_state_dict(with([](auto& sd) {
    for (const char* name : {"step", "exp_avg", "exp_avg_sq"}) sd.erase(std::string("state.0.") + name);
  }));
  EXPECT_TRUE(opt.state(a).empty());
  opt.load_state_dict(with([](auto& sd) { sd.erase("state.0.max_exp_avg_sq"); }));  // group 0 has no amsgrad
  // A failed load changes nothing.
  Tensor m_before = opt.state(a).at("exp_avg").clone();
  expect_error([&] {
    opt.load_state_dict(with([](auto& sd) {
      sd["state.0.exp_avg"] = full({2}, 7.0f);
      sd["bogus"] = zeros({});
    }));
  }, "unexpected key 'bogus'");
  EXPECT_EQ(values(opt.state(a).at("exp_avg")), values(m_before));
  // A good load copies: the loaded optimizer does not share the dict's tensors.
  opt.load_state_dict(good);
  EXPECT_FALSE(opt.state(a).at("exp_avg").storage() == good.at("state.0.exp_avg").storage());
  EXPECT_TRUE(opt.state(a).at("step").device().is_cpu());
}

// As PyTorch, loading casts each state tensor to its parameter's dtype (and device), but not
// 'step': state saved from a float32 model loads into the same model converted to float64.
TEST(OptimAdam, LoadStateDictCastsStateToTheParametersDtype) {
  nn::Linear lin(3, 2);
  Adam opt(lin->parameters(), {.lr = 0.1});
  lin(ones({4, 3})).sum().backward();
  opt.step();
  const auto sd = opt.state_dict();
  lin->to(kFloat64);
  opt.load_state_dict(sd);
  const auto& st = opt.state(lin->weight);
  EXPECT_EQ(st.at("exp_avg").dtype(), kFloat64);
  EXPECT_EQ(st.at("exp_avg_sq").dtype(), kFloat64);
  EXPECT_EQ(values(st.at("exp_avg")), values(sd.at("state.0.exp_avg")));
  EXPECT_EQ(st.at("step").dtype(), kFloat32);
  EXPECT_TRUE(st.at("step").device().is_cpu());
  opt.zero_grad();
  lin(ones({4, 3}, kFloat64)).sum().backward();
  opt.step();  // the second step, in float64
  EXPECT_EQ(opt.state(lin->weight).at("step").item<float>(), 2.0f);
  EXPECT_EQ(opt.state(lin->weight).at("exp_avg").dtype(), kFloat64);
  EXPECT_EQ(lin->weight.dtype(), kFloat64);
}

// A device without an AdamStep kernel: the whole group is one fallback call per step, on
// copies of every tensor, and the results come back.
TEST(OptimAdam, OneDispatchPerGroupAndDevice) {
  if (cuda::is_available()) GTEST_SKIP() << "a real GPU is present; the stand-in device is not needed";
  test::StandInCuda stand_in;
  {
    std::vector<Tensor> host, dev;
    for (int64_t n : {3, 5, 7, 2}) {
      host.push_back(randn({n}).requires_grad_());
      dev.push_back(host.back().detach().to(Device::cuda(0)).requires_grad_());
    }
    AdamW on_host({OptimizerParamGroup({host[0], host[1]}), OptimizerParamGroup({host[2], host[3]})}, {.lr = 0.1});
    AdamW on_dev({OptimizerParamGroup({dev[0], dev[1]}), OptimizerParamGroup({dev[2], dev[3]})}, {.lr = 0.1});
    const uint64_t before = fallback_counts()["AdamStep"];
    for (int s = 0; s < 3; ++s) {
      for (size_t i = 0; i < host.size(); ++i) {
        Tensor g = randn(host[i].shape());
        host[i].set_grad(g);
        dev[i].set_grad(g.to(Device::cuda(0)));
      }
      on_host.step();
      on_dev.step();
    }
    EXPECT_EQ(fallback_counts()["AdamStep"], before + 3 * 2);  // 3 steps x 2 groups
    for (size_t i = 0; i < host.size(); ++i) EXPECT_EQ(values(dev[i].cpu()), values(host[i]));
    EXPECT_TRUE(on_dev.state(dev[0]).at("step").device().is_cpu());
    EXPECT_EQ(on_dev.state(dev[0]).at("exp_avg").device(), Device::cuda(0));
  }
}

// maximize ascends: every step is the step on the negated gradient, bit for bit, in Adam and
// AdamW with and without amsgrad (torch's grad = -grad before the weight decay).
TEST(OptimAdam, MaximizeStepsOnTheNegatedGradient) {
  for (Device dev : test::devices())
    for (bool decoupled : {false, true})
      for (bool amsgrad : {false, true}) {
        manual_seed(4);
        const Tensor w0 = randn({9}).to(dev);
        Tensor up_w = w0.clone().requires_grad_(), down_w = w0.clone().requires_grad_();
        auto make = [&](Tensor w, bool maximize) -> std::unique_ptr<AdamBase> {
          if (decoupled)
            return std::make_unique<AdamW>(std::vector<Tensor>{w},
                                           AdamWOptions{.lr = 0.1, .amsgrad = amsgrad, .maximize = maximize});
          return std::make_unique<Adam>(std::vector<Tensor>{w},
                                        AdamOptions{.lr = 0.1, .weight_decay = 0.01, .amsgrad = amsgrad, .maximize = maximize});
        };
        auto up = make(up_w, true), down = make(down_w, false);
        for (int s = 0; s < 3; ++s) {
          const Tensor g = randn({9}).to(dev);
          up_w.set_grad(g.clone());
          down_w.set_grad(-g);
          up->step();
          down->step();
        }
        EXPECT_EQ(values(up_w), values(down_w)) << dev.str() << " decoupled " << decoupled << " amsgrad " << amsgrad;
        EXPECT_EQ(values(up->state(up_w).at("exp_avg_sq")), values(down->state(down_w).at("exp_avg_sq")));
      }
}

}  // namespace
}  // namespace kiln::test
