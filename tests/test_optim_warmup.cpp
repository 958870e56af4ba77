// LambdaLR and the Hugging Face warm-up schedules against torch / transformers lr sequences
// (tests/fixtures/optim/warmup_schedulers.txt), with SequentialLR, resuming, and errors.
#include <cmath>

#include "kiln/optim.h"
#include "optim_fixture.h"
#include "test_util.h"

namespace kiln::test {
namespace {

using namespace kiln::optim;

// The fixture script's LAMBDAS, by name.
LambdaLR::LrLambda named_lambda(const std::string& name) {
  if (name == "exp95") return [](int64_t e) { return std::pow(0.95, static_cast<double>(e)); };
  if (name == "inverse") return [](int64_t e) { return 1.0 / static_cast<double>(e + 1); };
  if (name == "exp90") return [](int64_t e) { return std::pow(0.9, static_cast<double>(e)); };
  ADD_FAILURE() << "unknown lambda " << name;
  return nullptr;
}

// AdamW with one parameter per group at the case's lrs, and the case's schedule.
struct WarmupRun {
  std::vector<Tensor> params;
  std::unique_ptr<AdamW> opt;
  std::unique_ptr<LRScheduler> sched;

  explicit WarmupRun(const FixtureCase& c) {
    std::vector<OptimizerParamGroup> groups;
    for (double lr : nums(c.with("groups").at(0), 1)) {
      params.push_back(zeros({1}).requires_grad_());
      groups.push_back(OptimizerParamGroup({params.back()}, {{"lr", lr}}));
    }
    opt = std::make_unique<AdamW>(groups, AdamWOptions{.lr = 1e-3});
    const std::vector<std::string> w = c.with("sched").at(0);
    if (w[1] == "LambdaLR") {
      if (w.size() == 3) {
        sched = std::make_unique<LambdaLR>(*opt, named_lambda(w[2]));
      } else {
        std::vector<LambdaLR::LrLambda> fs;
        for (size_t i = 2; i < w.size(); ++i) fs.push_back(named_lambda(w[i]));
        sched = std::make_unique<LambdaLR>(*opt, fs);
      }
    } else if (w[1] == "linear") {
      sched = linear_schedule_with_warmup(*opt, std::stoll(w[2]), std::stoll(w[3]));
    } else {
      sched = cosine_schedule_with_warmup(*opt, std::stoll(w[2]), std::stoll(w[3]), num(w[4]));
    }
  }
  void step() {
    opt->step();  // no grads: nothing moves, as in the fixture
    sched->step();
  }
};

TEST(OptimWarmup, MatchesPyTorchAndTransformers) {
  auto cases = read_fixture_cases("optim/warmup_schedulers.txt");
  ASSERT_EQ(cases.size(), 11u);
  for (const auto& c : cases) {
    WarmupRun run(c);
    const auto lines = c.with("lr");
    ASSERT_GE(lines.size(), 5u) << c.name;
    for (size_t s = 0; s < lines.size(); ++s) {
      if (s > 0) run.step();
      const auto want = nums(lines[s], 2);
      const auto got = run.sched->get_last_lr();
      ASSERT_EQ(got.size(), want.size());
      for (size_t g = 0; g < got.size(); ++g)
        EXPECT_NEAR(got[g], want[g], 1e-15 * std::abs(want[g])) << c.name << " step " << s << " group " << g;
      EXPECT_EQ(run.opt->param_groups()[0].lr(), got[0]) << c.name;
    }
  }
}

TEST(OptimWarmup, StateDictRoundTrip) {
  for (const auto& c : read_fixture_cases("optim/warmup_schedulers.txt")) {
    const size_t steps = c.with("lr").size() - 1;
    const size_t k = 3;
    WarmupRun whole(c), first(c);
    for (size_t s = 0; s < k; ++s) {
      whole.step();
      first.step();
    }
    WarmupRun second(c);
    second.opt->load_state_dict(first.opt->state_dict());
    second.sched->load_state_dict(first.sched->state_dict());
    for (size_t s = k; s < steps; ++s) {
      whole.step();
      second.step();
      EXPECT_EQ(second.sched->get_last_lr(), whole.sched->get_last_lr()) << c.name << " step " << s;
    }
  }
}

// The warm-up values by hand: linear rises by lr / warmup per step; cosine's midpoint is half.
TEST(OptimWarmup, ShapesOfTheSchedules) {
  Tensor p = zeros({1}).requires_grad_();
  AdamW opt({p}, {.lr = 0.2});
  auto lin = linear_schedule_with_warmup(opt, 4, 12);
  EXPECT_EQ(opt.param_groups()[0].lr(), 0.0);  // step 0 of the warm-up
  std::vector<double> seen;
  for (int i = 0; i < 14; ++i) {
    lin->step();
    seen.push_back(opt.param_groups()[0].lr());
  }
  EXPECT_DOUBLE_EQ(seen[0], 0.05);
  EXPECT_DOUBLE_EQ(seen[3], 0.2);   // the peak at num_warmup_steps
  EXPECT_DOUBLE_EQ(seen[7], 0.1);   // half-way down
  EXPECT_EQ(seen[11], 0.0);         // num_training_steps
  EXPECT_EQ(seen[13], 0.0);         // and after

  Tensor q = zeros({1}).requires_grad_();
  AdamW opt2({q}, {.lr = 1.0});
  auto cos = cosine_schedule_with_warmup(opt2, 2, 12);
  for (int i = 0; i < 7; ++i) cos->step();
  EXPECT_NEAR(opt2.param_groups()[0].lr(), 0.5, 1e-15);  // progress 0.5 of a half cosine
}

// Warm-up then decay also composes from torch's pieces; LambdaLR joins SequentialLR.
TEST(OptimWarmup, LambdaInSequential) {
  Tensor p = zeros({1}).requires_grad_();
  AdamW opt({p}, {.lr = 0.1});
  auto warm = std::make_shared<LambdaLR>(opt, [](int64_t e) { return (e + 1) / 4.0; });
  auto decay = std::make_shared<LambdaLR>(opt, [](int64_t e) { return std::pow(0.5, static_cast<double>(e)); });
  SequentialLR sched(opt, {warm, decay}, {3});
  std::vector<double> lrs{opt.param_groups()[0].lr()};
  for (int i = 0; i < 5; ++i) {
    sched.step();
    lrs.push_back(opt.param_groups()[0].lr());
  }
  const std::vector<double> want{0.025, 0.05, 0.075, 0.1, 0.05, 0.025};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(lrs[i], want[i], 1e-15) << i;
}

TEST(OptimWarmup, Errors) {
  Tensor p = zeros({1}).requires_grad_(), q = zeros({1}).requires_grad_();
  AdamW opt({OptimizerParamGroup({p}), OptimizerParamGroup({q})});
  expect_error([&] { LambdaLR(opt, std::vector<LambdaLR::LrLambda>{[](int64_t) { return 1.0; }}); },
               "[LambdaLR] expected 2 lr_lambdas (one per param group), got 1");
  expect_error([&] { LambdaLR(opt, LambdaLR::LrLambda{}); }, "[LambdaLR] got an empty lr_lambda");
  expect_error([&] { linear_schedule_with_warmup(opt, -1, 10); },
               "[linear_schedule_with_warmup] num_warmup_steps must be non-negative, got -1");
  expect_error([&] { cosine_schedule_with_warmup(opt, 1, -10); },
               "[cosine_schedule_with_warmup] num_training_steps must be non-negative, got -10");
  expect_error([&] { cosine_schedule_with_warmup(opt, 1, 10, INFINITY); },
               "[cosine_schedule_with_warmup] num_cycles must be finite, got inf");
}

}  // namespace
}  // namespace kiln::test
