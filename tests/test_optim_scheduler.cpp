// LR schedulers against PyTorch's lr sequences (tests/fixtures/optim/schedulers.txt and, for
// ReduceLROnPlateau, plateau.txt), their state_dict round trip, and their errors.
#include <cmath>
#include <limits>
#include <map>
#include <numbers>

#include "kiln/optim.h"
#include "optim_fixture.h"
#include "test_util.h"

namespace kiln::test {
namespace {

using namespace kiln::optim;

std::vector<int64_t> int_list(const std::string& s) {
  std::vector<int64_t> v;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');) v.push_back(std::stoll(item));
  return v;
}

std::vector<double> num_list(const std::string& s) {
  std::vector<double> v;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');) v.push_back(num(item));
  return v;
}

// "Name key value key value ..." -> the scheduler, with PyTorch's defaults for absent keys.
std::shared_ptr<LRScheduler> build(Optimizer& opt, const std::vector<std::string>& w,
                                   std::vector<std::shared_ptr<LRScheduler>> children = {}) {
  std::map<std::string, std::string> a;
  for (size_t i = 2; i + 1 < w.size(); i += 2) a[w[i]] = w[i + 1];
  auto d = [&](const char* k, double def) { return a.count(k) ? num(a[k]) : def; };
  const std::string& name = w[1];
  if (name == "StepLR") return std::make_shared<StepLR>(opt, std::stoll(a.at("step_size")), d("gamma", 0.1));
  if (name == "MultiStepLR") return std::make_shared<MultiStepLR>(opt, int_list(a.at("milestones")), d("gamma", 0.1));
  if (name == "LinearLR")
    return std::make_shared<LinearLR>(opt, d("start_factor", 1.0 / 3), d("end_factor", 1.0),
                                      static_cast<int64_t>(d("total_iters", 5)));
  if (name == "CosineAnnealingLR")
    return std::make_shared<CosineAnnealingLR>(opt, std::stoll(a.at("T_max")), d("eta_min", 0.0));
  if (name == "SequentialLR") return std::make_shared<SequentialLR>(opt, children, int_list(a.at("milestones")));
  if (name == "ExponentialLR") return std::make_shared<ExponentialLR>(opt, num(a.at("gamma")));
  if (name == "ConstantLR")
    return std::make_shared<ConstantLR>(opt, d("factor", 1.0 / 3), static_cast<int64_t>(d("total_iters", 5)));
  if (name == "PolynomialLR")
    return std::make_shared<PolynomialLR>(opt, static_cast<int64_t>(d("total_iters", 5)), d("power", 1.0));
  if (name == "OneCycleLR") {
    OneCycleLROptions o;
    std::vector<double> max_lr = num_list(a.at("max_lr"));
    if (max_lr.size() == 1) o.max_lr = max_lr[0];
    else o.max_lr_per_group = max_lr;
    if (a.count("total_steps")) o.total_steps = std::stoll(a["total_steps"]);
    if (a.count("epochs")) o.epochs = std::stoll(a["epochs"]);
    if (a.count("steps_per_epoch")) o.steps_per_epoch = std::stoll(a["steps_per_epoch"]);
    o.pct_start = d("pct_start", o.pct_start);
    if (a.count("anneal_strategy")) o.anneal_strategy = a["anneal_strategy"];
    o.cycle_momentum = d("cycle_momentum", 1) != 0;
    o.base_momentum = d("base_momentum", o.base_momentum);
    o.max_momentum = d("max_momentum", o.max_momentum);
    o.div_factor = d("div_factor", o.div_factor);
    o.final_div_factor = d("final_div_factor", o.final_div_factor);
    o.three_phase = d("three_phase", 0) != 0;
    return std::make_shared<OneCycleLR>(opt, o);
  }
  ADD_FAILURE() << "unknown scheduler " << name;
  return nullptr;
}

// SGD(momentum 0.9) with one parameter (added to params) per group, with the case's "groups" lrs.
std::unique_ptr<SGD> sgd_for(const FixtureCase& c, std::vector<Tensor>& params) {
  std::vector<double> lrs = nums(c.with("groups").at(0), 1);
  std::vector<OptimizerParamGroup> groups;
  for (double lr : lrs) {
    params.push_back(zeros({1}).requires_grad_());
    groups.push_back(OptimizerParamGroup({params.back()}, {{"lr", lr}}));
  }
  return std::make_unique<SGD>(groups, SGDOptions{.lr = lrs[0], .momentum = 0.9});
}

// That SGD, and the case's scheduler on it.
struct SchedRun {
  std::vector<Tensor> params;
  std::unique_ptr<SGD> opt;
  std::shared_ptr<LRScheduler> sched;

  explicit SchedRun(const FixtureCase& c) {
    opt = sgd_for(c, params);
    std::vector<std::shared_ptr<LRScheduler>> children;
    for (const auto& w : c.with("child")) children.push_back(build(*opt, w));
    sched = build(*opt, c.with("sched").at(0), children);
  }
  std::vector<double> momenta() const {
    std::vector<double> m;
    for (size_t g = 0; g < opt->param_groups().size(); ++g) m.push_back(opt->options(g).momentum);
    return m;
  }
  std::vector<double> lrs() const {
    std::vector<double> m;
    for (const auto& g : opt->param_groups()) m.push_back(g.lr());
    return m;
  }
  void step() {
    opt->step();
    sched->step();
  }
};

void expect_near_all(const std::vector<double>& got, const std::vector<double>& want, double rtol,
                     const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], rtol * std::abs(want[i]) + 1e-300) << what << " group " << i;
}

TEST(OptimScheduler, MatchesPyTorch) {
  auto cases = read_fixture_cases("optim/schedulers.txt");
  ASSERT_EQ(cases.size(), 16u);
  for (const auto& c : cases) {
    SchedRun run(c);
    auto lr_lines = c.with("lr"), m_lines = c.with("momentum");
    ASSERT_GE(lr_lines.size(), 41u) << c.name;
    for (size_t s = 0; s < lr_lines.size(); ++s) {
      if (s > 0) run.step();
      const std::string what = c.name + " step " + std::to_string(s);
      expect_near_all(run.sched->get_last_lr(), nums(lr_lines[s], 2), 1e-12, what + " lr");
      EXPECT_EQ(run.sched->get_last_lr(), run.lrs()) << what;
      expect_near_all(run.momenta(), nums(m_lines[s], 2), 1e-12, what + " momentum");
    }
  }
}

// Stop after k steps, save optimizer and scheduler, build both anew, load, continue: the same
// lrs and momenta as without the interruption, to the bit.
TEST(OptimScheduler, StateDictRoundTrip) {
  for (const auto& c : read_fixture_cases("optim/schedulers.txt")) {
    const size_t steps = c.with("lr").size() - 1;
    for (size_t k : {size_t{1}, size_t{5}, size_t{17}}) {
      SchedRun whole(c), first(c);
      for (size_t s = 0; s < k; ++s) {
        whole.step();
        first.step();
      }
      auto opt_sd = first.opt->state_dict();
      auto sched_sd = first.sched->state_dict();
      SchedRun second(c);
      second.opt->load_state_dict(opt_sd);
      second.sched->load_state_dict(sched_sd);
      EXPECT_EQ(second.sched->get_last_lr(), whole.sched->get_last_lr()) << c.name;
      EXPECT_EQ(second.sched->last_epoch(), whole.sched->last_epoch()) << c.name;
      for (size_t s = k; s < steps; ++s) {
        whole.step();
        second.step();
        EXPECT_EQ(second.sched->get_last_lr(), whole.sched->get_last_lr()) << c.name << " k " << k << " step " << s;
        EXPECT_EQ(second.momenta(), whole.momenta()) << c.name << " k " << k << " step " << s;
      }
    }
  }
}

// total_iters 0 keeps start_factor for ever, as torch's (it was refused), also where SequentialLR
// restarts it at a milestone (its closed form, which must not divide 0 by 0).
TEST(OptimScheduler, LinearLRWithNoIterationsKeepsItsStartFactor) {
  Tensor p = zeros({1}).requires_grad_();
  SGD opt({p}, {.lr = 0.1});
  LinearLR s(opt, 0.5, 1.0, 0);
  EXPECT_EQ(s.get_last_lr()[0], 0.05);
  for (int i = 0; i < 3; ++i) {
    s.step();
    EXPECT_EQ(s.get_last_lr()[0], 0.05);
  }
  Tensor q = zeros({1}).requires_grad_();
  SGD opt2({q}, {.lr = 0.1});
  auto first = std::make_shared<StepLR>(opt2, 10);
  auto lin = std::make_shared<LinearLR>(opt2, 0.5, 1.0, 0);
  SequentialLR seq(opt2, {first, lin}, {2});
  for (int i = 0; i < 4; ++i) seq.step();
  EXPECT_EQ(seq.get_last_lr()[0], 0.05);
}

TEST(OptimScheduler, StateDictKeys) {
  Tensor p = zeros({1}).requires_grad_();
  SGD opt({p}, {.lr = 0.1});
  auto warm = std::make_shared<LinearLR>(opt, 0.5, 1.0, 2);
  auto cos = std::make_shared<CosineAnnealingLR>(opt, 10);
  SequentialLR sched(opt, {warm, cos}, {2});
  for (int i = 0; i < 3; ++i) sched.step();
  auto sd = sched.state_dict();
  EXPECT_EQ(sd.at("last_epoch").item<int64_t>(), 3);
  EXPECT_EQ(sd.at("schedulers.1.last_epoch").item<int64_t>(), 1);  // restarted at the milestone
  EXPECT_EQ(sd.at("schedulers.0.base_lrs.0").dtype(), kFloat64);
  EXPECT_EQ(sd.at("schedulers.0.base_lrs.0").item<double>(), 0.1);
  EXPECT_EQ(sd.at("last_lr.0").item<double>(), sched.get_last_lr()[0]);
  EXPECT_EQ(sd.size(), 12u);  // 3 schedulers x (last_epoch, step_count, base_lrs.0, last_lr.0)
  // The optimizer's state_dict carries the lr and the initial_lr the schedulers recorded.
  auto osd = opt.state_dict();
  EXPECT_EQ(osd.at("param_groups.0.initial_lr").item<double>(), 0.1);
  EXPECT_EQ(osd.at("param_groups.0.lr").item<double>(), sched.get_last_lr()[0]);
}

TEST(OptimScheduler, OneCycleSetsGroupEntries) {
  Tensor p = zeros({1}).requires_grad_();
  SGD opt({p}, {.lr = 0.1});
  OneCycleLR sched(opt, {.max_lr = 1.0, .total_steps = 10, .div_factor = 4, .final_div_factor = 5});
  const auto& g = opt.param_groups()[0];
  EXPECT_EQ(g.get("initial_lr"), 0.25);
  EXPECT_EQ(g.get("max_lr"), 1.0);
  EXPECT_EQ(g.get("min_lr"), 0.05);
  EXPECT_EQ(g.lr(), 0.25);
  EXPECT_EQ(opt.options(0).momentum, 0.95);  // cycle_momentum starts at max_momentum
  for (int i = 0; i < 9; ++i) sched.step();
  EXPECT_NEAR(g.lr(), 0.05, 1e-15);  // min_lr at step total_steps - 1
  sched.step();                      // PyTorch allows one step more
  expect_error([&] { sched.step(); }, "[OneCycleLR] tried to step 11 times; the specified number of total steps is 10");
}

// With an optimizer that has betas (Adam, AdamW), cycle_momentum moves beta1, as PyTorch's
// use_beta1 moves betas[0]: from max_momentum (0.95) to base_momentum (0.85) while the lr rises
// to max_lr, then back while it falls.
// A phase of no steps (pct_start * total_steps = 1, or pct_start = 1) is an error, not NaN
// learning rates; pct_start 0 (a warm-up phase never entered) works, as in torch.
TEST(OptimScheduler, OneCycleRefusesAPhaseOfNoSteps) {
  Tensor w = zeros({2}).requires_grad_();
  optim::SGD opt({w}, {.lr = 0.1, .momentum = 0.9});
  expect_error([&] { OneCycleLR(opt, {.max_lr = 1.0, .total_steps = 10, .pct_start = 0.1}); },
               "[OneCycleLR] phase 1 of 2 has no steps (pct_start 0.1 of 10 total steps)");
  expect_error([&] { OneCycleLR(opt, {.max_lr = 1.0, .total_steps = 10, .pct_start = 1.0}); },
               "[OneCycleLR] phase 2 of 2 has no steps");
  expect_error([&] { OneCycleLR(opt, {.max_lr = 1.0, .total_steps = 10, .pct_start = 0.1, .three_phase = true}); },
               "phase 1 of 3 has no steps");
  OneCycleLR sched(opt, {.max_lr = 1.0, .total_steps = 10, .pct_start = 0.0});
  for (int i = 0; i < 10; ++i) {
    EXPECT_TRUE(std::isfinite(opt.param_groups()[0].get("lr"))) << i;
    EXPECT_TRUE(std::isfinite(opt.param_groups()[0].get("momentum"))) << i;
    sched.step();
  }
}

TEST(OptimScheduler, OneCycleCyclesAdamsBeta1) {
  Tensor p = zeros({1}).requires_grad_();
  Adam opt({p}, {.lr = 0.1});
  OneCycleLR sched(opt, {.max_lr = 1.0, .total_steps = 10});
  const auto& g = opt.param_groups()[0];
  EXPECT_FALSE(g.has("momentum"));
  EXPECT_EQ(g.get("max_momentum"), 0.95);
  EXPECT_EQ(g.get("base_momentum"), 0.85);
  // PyTorch's cosine annealing; phase 1 ends at step 0.3 * 10 - 1 = 2, phase 2 at step 9.
  auto anneal = [](double start, double end, double pct) {
    return end + (start - end) / 2.0 * (std::cos(std::numbers::pi * pct) + 1);
  };
  for (int64_t step = 0; step < 10; ++step) {
    const bool up = step <= 2;
    const double pct = up ? static_cast<double>(step) / 2.0 : static_cast<double>(step - 2) / 7.0;
    const double want_beta1 = up ? anneal(0.95, 0.85, pct) : anneal(0.85, 0.95, pct);
    const double want_lr = up ? anneal(0.04, 1.0, pct) : anneal(1.0, 0.04 / 1e4, pct);
    EXPECT_NEAR(std::get<0>(opt.options(0).betas), want_beta1, 1e-12) << "step " << step;
    EXPECT_EQ(std::get<1>(opt.options(0).betas), 0.999) << "step " << step;
    EXPECT_NEAR(g.lr(), want_lr, 1e-12) << "step " << step;
    if (step < 9) sched.step();
  }
  EXPECT_NEAR(std::get<0>(opt.options(0).betas), 0.95, 1e-12);

  Tensor q = zeros({1}).requires_grad_();
  AdamW adamw({q});
  OneCycleLR on_adamw(adamw, {.max_lr = 0.01, .total_steps = 5, .base_momentum = 0.8, .max_momentum = 0.9});
  EXPECT_NEAR(std::get<0>(adamw.options(0).betas), 0.9, 1e-12);
}

// ReduceLROnPlateau over PyTorch's metric sequences: each step's lrs, bad-epoch count and best.
struct PlateauRun {
  std::vector<Tensor> params;
  std::unique_ptr<SGD> opt;
  std::unique_ptr<ReduceLROnPlateau> sched;
  explicit PlateauRun(const FixtureCase& c) {
    opt = sgd_for(c, params);
    const auto sched_lines = c.with("sched");
    const auto& w = sched_lines.at(0);
    ReduceLROnPlateauOptions o;
    for (size_t i = 2; i + 1 < w.size(); i += 2) {
      const std::string& k = w[i];
      const std::string& v = w[i + 1];
      if (k == "mode") o.mode = v;
      else if (k == "factor") o.factor = num(v);
      else if (k == "patience") o.patience = std::stoll(v);
      else if (k == "threshold") o.threshold = num(v);
      else if (k == "threshold_mode") o.threshold_mode = v;
      else if (k == "cooldown") o.cooldown = std::stoll(v);
      else if (k == "eps") o.eps = num(v);
      else if (k == "min_lr") o.min_lr_per_group = num_list(v);
      else ADD_FAILURE() << "unknown option " << k;
    }
    sched = std::make_unique<ReduceLROnPlateau>(*opt, o);
  }
};

TEST(OptimScheduler, ReduceLROnPlateauMatchesPyTorch) {
  const auto cases = read_fixture_cases("optim/plateau.txt");
  ASSERT_EQ(cases.size(), 6u);
  for (const auto& c : cases) {
    PlateauRun run(c);
    const auto metrics = c.with("metric"), lrs = c.with("lr"), bad = c.with("bad");
    ASSERT_EQ(metrics.size(), lrs.size());
    for (size_t s = 0; s < metrics.size(); ++s) {
      run.sched->step(num(metrics[s].at(2)));
      const std::string what = c.name + " step " + std::to_string(s + 1);
      EXPECT_EQ(run.sched->get_last_lr(), nums(lrs[s], 2)) << what;
      EXPECT_EQ(run.sched->num_bad_epochs(), std::stoll(bad[s].at(2))) << what;
      EXPECT_EQ(run.sched->best(), num(bad[s].at(3))) << what;
    }
    EXPECT_LT(run.sched->get_last_lr()[0], num(c.with("groups").at(0).at(1))) << c.name << " never reduced";
  }
}

TEST(OptimScheduler, ReduceLROnPlateauStateDictRoundTripAndErrors) {
  const auto cases = read_fixture_cases("optim/plateau.txt");
  const FixtureCase& c = cases.at(1);  // patience, cooldown, min_lr
  const auto metrics = c.with("metric");
  PlateauRun whole(c), first(c);
  const size_t k = 13;
  for (size_t s = 0; s < k; ++s) {
    whole.sched->step(num(metrics[s].at(2)));
    first.sched->step(num(metrics[s].at(2)));
  }
  PlateauRun second(c);
  second.opt->load_state_dict(first.opt->state_dict());
  second.sched->load_state_dict(first.sched->state_dict());
  for (size_t s = k; s < metrics.size(); ++s) {
    whole.sched->step(num(metrics[s].at(2)));
    second.sched->step(num(metrics[s].at(2)));
    EXPECT_EQ(second.sched->get_last_lr(), whole.sched->get_last_lr()) << "step " << s;
    EXPECT_EQ(second.sched->num_bad_epochs(), whole.sched->num_bad_epochs()) << "step " << s;
  }
  auto sd = first.sched->state_dict();
  sd.erase("best");
  expect_error([&] { second.sched->load_state_dict(sd); }, "[ReduceLROnPlateau::load_state_dict] missing key 'best'");
  expect_error([&] { second.sched->step(); }, "[ReduceLROnPlateau::step] takes the metric it watches");
  SGD& opt = *second.opt;
  expect_error([&] { ReduceLROnPlateau(opt, {.factor = 1.0}); }, "[ReduceLROnPlateau] the factor must be below 1, got 1");
  expect_error([&] { ReduceLROnPlateau(opt, {.mode = "lowest"}); }, "mode must be 'min' or 'max', got 'lowest'");
  expect_error([&] { ReduceLROnPlateau(opt, {.threshold_mode = "x"}); }, "threshold_mode must be 'rel' or 'abs'");
  expect_error([&] { ReduceLROnPlateau(opt, {.min_lr_per_group = {0.1, 0.2, 0.3}}); },
               "expected 2 min_lrs (one per param group), got 3");
  // One min_lr for all also floors a group added afterwards (as torch's).
  ReduceLROnPlateau one(opt, {.factor = 0.5, .patience = 0, .min_lr = 0.04});
  opt.add_param_group(OptimizerParamGroup({zeros({1}).requires_grad_()}, {{"lr", 0.05}}));
  one.step(1.0);
  for (int i = 0; i < 3; ++i) one.step(2.0);
  EXPECT_EQ(one.get_last_lr().size(), 3u);
  EXPECT_EQ(one.get_last_lr().back(), 0.04);
}

TEST(OptimScheduler, Errors) {
  Tensor p = zeros({1}).requires_grad_(), q = zeros({1}).requires_grad_();
  SGD opt({p}, {.lr = 0.1});
  SGD other({q}, {.lr = 0.1});
  expect_error([&] { StepLR(opt, 0); }, "[StepLR] step_size must be positive, got 0");
  expect_error([&] { LinearLR(opt, 0.0); }, "[LinearLR] start_factor must be greater than 0 and at most 1, got 0");
  expect_error([&] { LinearLR(opt, 0.5, 1.5); }, "[LinearLR] end_factor must be between 0 and 1, got 1.5");
  expect_error([&] { LinearLR(opt, 0.5, 1.0, -1); }, "[LinearLR] total_iters must not be negative, got -1");
  expect_error([&] { CosineAnnealingLR(opt, 0); }, "[CosineAnnealingLR] T_max must be positive");
  expect_error([&] { ConstantLR(opt, 1.5); }, "[ConstantLR] the factor must be above 0 and at most 1, got 1.5");
  expect_error([&] { ConstantLR(opt, 0.0); }, "[ConstantLR] the factor must be above 0 and at most 1, got 0");
  expect_error([&] { ConstantLR(opt, 0.5, -1); }, "[ConstantLR] total_iters must not be negative, got -1");
  expect_error([&] { PolynomialLR(opt, 0); }, "[PolynomialLR] total_iters must be positive, got 0");
  expect_error([&] { OneCycleLR(opt, {.max_lr = 0.1}); },
               "[OneCycleLR] give either total_steps or both epochs and steps_per_epoch");
  expect_error([&] { OneCycleLR(opt, {.max_lr = 0.1, .total_steps = 0}); }, "expected a positive total_steps, got 0");
  expect_error([&] { OneCycleLR(opt, {.max_lr = 0.1, .total_steps = 10, .pct_start = 1.5}); },
               "expected pct_start between 0 and 1, got 1.5");
  expect_error([&] { OneCycleLR(opt, {.max_lr = 0.1, .total_steps = 10, .anneal_strategy = "exp"}); },
               "anneal_strategy must be \"cos\" or \"linear\", got \"exp\"");
  expect_error([&] { OneCycleLR(opt, {.max_lr = 0.1, .total_steps = 10, .max_lr_per_group = {0.1, 0.2}}); },
               "[OneCycleLR] expected 1 values for max_lr_per_group, got 2");
  // max_lr has no default in PyTorch: a forgotten (0), negative or non-finite one is an error.
  expect_error([&] { OneCycleLR(opt, {.total_steps = 10}); }, "[OneCycleLR] expected a positive, finite max_lr, got 0");
  expect_error([&] { OneCycleLR(opt, {.max_lr = -0.1, .total_steps = 10}); }, "expected a positive, finite max_lr, got -0.1");
  expect_error([&] { OneCycleLR(opt, {.max_lr = std::numeric_limits<double>::quiet_NaN(), .total_steps = 10}); },
               "[OneCycleLR] expected a positive, finite max_lr, got ");
  expect_error([&] { OneCycleLR(opt, {.total_steps = 10, .max_lr_per_group = {0.0}}); },
               "[OneCycleLR] expected a positive, finite max_lr, got 0 (param group 0)");
  EXPECT_FALSE(opt.param_groups()[0].has("max_lr"));  // a failed construction left the groups alone

  auto a = std::make_shared<LinearLR>(opt);
  auto b = std::make_shared<StepLR>(other, 3);
  expect_error([&] { SequentialLR(opt, {a, b}, {2}); }, "[SequentialLR] scheduler 1 (StepLR) belongs to a different optimizer");
  expect_error([&] { SequentialLR(opt, {a}, {2}); }, "[SequentialLR] expects one milestone fewer than schedulers, got 1 schedulers and 1 milestones");
  expect_error([&] { SequentialLR(opt, {}, {}); }, "[SequentialLR] expects at least one scheduler");

  StepLR s(opt, 3);
  auto sd = s.state_dict();
  auto bad = sd;
  bad.erase("base_lrs.0");
  expect_error([&] { s.load_state_dict(bad); }, "[StepLR::load_state_dict] missing key 'base_lrs.0'");
  bad = sd;
  bad["last_epoch"] = scalar_tensor(3.0, kFloat64);
  expect_error([&] { s.load_state_dict(bad); }, "[StepLR::load_state_dict] 'last_epoch' must be a 0-d int64 tensor, got float64 of shape []");
  bad = sd;
  bad["base_lrs.1"] = scalar_tensor(0.1, kFloat64);
  expect_error([&] { s.load_state_dict(bad); }, "[StepLR::load_state_dict] unexpected key 'base_lrs.1' (the optimizer has 1 param groups)");

  auto w = std::make_shared<LinearLR>(opt);
  auto c = std::make_shared<CosineAnnealingLR>(opt, 5);
  SequentialLR seq(opt, {w, c}, {3});
  auto ssd = seq.state_dict();
  ssd.erase("schedulers.1.step_count");
  expect_error([&] { seq.load_state_dict(ssd); }, "[SequentialLR::load_state_dict] missing key 'schedulers.1.step_count'");
}

}  // namespace
}  // namespace kiln::test
