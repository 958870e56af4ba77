// kiln::train as a user program sees it, through kiln/kiln.h only: the image-classification task
// trains on a small IDX data set and its checkpoint evaluates, and a task of the user's own plugs
// into the Trainer, whose checkpoints then resume it exactly.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "data_util.h"
#include "kiln/kiln.h"

namespace {

using namespace kiln;
using kiln::test::TempDir;
using kiln::test::write_mnist_like;
namespace F = nn::functional;

TEST(TrainApi, ImageClassificationTrainsAndItsCheckpointEvaluates) {
  TempDir dir;
  write_mnist_like(dir, "train", 40);
  write_mnist_like(dir, "t10k", 20);
  train::ImageClassificationOptions o;
  o.data = dir.str();
  o.checkpoint_dir = dir.file("ck");
  o.epochs = 1;
  o.batch_size = 8;
  o.workers = 0;
  o.device = "cpu";
  train::ImageClassification task(o);
  train::Trainer trainer(task);
  std::vector<train::StepInfo> steps;
  std::vector<train::EvalResult> evals;
  trainer.fit({.on_step = [&](const train::StepInfo& s) { steps.push_back(s); },
               .on_epoch = [&](int64_t, const train::EvalResult& r) { evals.push_back(r); }});
  ASSERT_EQ(steps.size(), 5u);
  EXPECT_EQ(steps.back().step, 5);
  EXPECT_EQ(steps.back().batches, 5);
  EXPECT_EQ(steps.back().samples, 8);
  ASSERT_EQ(evals.size(), 1u);
  EXPECT_EQ(evals[0].samples, 20);
  EXPECT_EQ(trainer.epoch(), 1);
  const train::EvalResult e = train::evaluate_checkpoint(trainer.checkpoint_path(), dir.str(), "cpu");
  EXPECT_EQ(e.samples, 20);
  EXPECT_EQ(e.accuracy, evals[0].accuracy);
  EXPECT_NEAR(e.loss, evals[0].loss, 1e-6);
}

// A task of the user's own: y = 2x + 1 fitted by one Linear layer, 32 points in 4 batches.
class FitALine : public train::Task {
 public:
  explicit FitALine(train::TrainerOptions options) : options_(std::move(options)) {}

  train::TrainerOptions& options() override { return options_; }
  std::string checkpoint_format() const override { return "test-fit-a-line-1"; }
  void load_settings(const train::CheckpointMeta& m) override { options_.epochs = m.integer("epochs"); }
  void prepare(std::vector<std::string>&) override {
    x_ = linspace(-1, 1, 32).reshape({32, 1});
    y_ = x_ * 2.0 + 1.0;
  }
  void probe_step() override { probe_autocast.push_back(autocast_enabled()); }
  void build(Device device) override {
    model_ = nn::Linear(1, 1);
    model_->to(device);
    optimizer_ = std::make_unique<optim::SGD>(model_->parameters(), optim::SGDOptions{.lr = 0.5});
    scheduler_ = std::make_unique<optim::StepLR>(*optimizer_, 10, 0.5);
  }
  nn::Module& module() override { return *model_; }
  optim::Optimizer& optimizer() override { return *optimizer_; }
  optim::LRScheduler& scheduler() override { return *scheduler_; }
  int64_t batches_per_epoch() const override { return 4; }
  void begin_epoch(int64_t, int64_t first_batch) override { next_ = first_batch; }
  train::TrainingBatch next_batch() override {
    Tensor x = x_.narrow(0, 8 * next_, 8), y = y_.narrow(0, 8 * next_, 8);
    ++next_;
    return {.loss = [this, x, y] { return F::mse_loss(model_(x), y); }, .samples = 8};
  }
  train::EvalResult evaluate() override {
    eval_autocast.push_back(autocast_enabled());
    return {.loss = F::mse_loss(model_(x_), y_).item<double>(), .samples = 32};
  }
  void save_metadata(std::map<std::string, std::string>& m) const override { m["epochs"] = std::to_string(options_.epochs); }

  std::vector<bool> probe_autocast, eval_autocast;  // autocast_enabled() as each ran

 private:
  train::TrainerOptions options_;
  Tensor x_, y_;
  nn::Linear model_{nullptr};
  std::unique_ptr<optim::SGD> optimizer_;
  std::unique_ptr<optim::StepLR> scheduler_;
  int64_t next_ = 0;
};

TEST(TrainApi, AUsersOwnTaskTrainsAndResumesExactly) {
  TempDir dir;
  struct Run {
    std::vector<double> losses, evals;
  };
  auto run = [&](const std::string& ck, int64_t max_steps, bool resume) {
    train::TrainerOptions o;
    o.device = "cpu";
    o.checkpoint_dir = dir.file(ck);
    o.max_steps = max_steps;
    o.resume = resume;
    FitALine task(o);
    train::Trainer trainer(task);
    Run r;
    trainer.fit({.on_step = [&](const train::StepInfo& s) { r.losses.push_back(s.loss_value()); },
                 .on_eval = [&](int64_t, const train::EvalResult& e) { r.evals.push_back(e.loss); }});
    return r;
  };
  const Run straight = run("a", -1, false);
  ASSERT_EQ(straight.losses.size(), 12u);  // 3 epochs of 4 batches
  ASSERT_EQ(straight.evals.size(), 4u);    // the untrained model, then each epoch
  EXPECT_LT(straight.evals.back(), straight.evals.front() / 4);

  const Run first = run("b", 6, false);  // stops in the second epoch, and saves there
  const Run rest = run("b", -1, true);
  ASSERT_EQ(first.losses.size(), 6u);
  ASSERT_EQ(rest.losses.size(), 6u);
  for (size_t i = 0; i < 6; ++i) {
    EXPECT_EQ(first.losses[i], straight.losses[i]) << "step " << i + 1;
    EXPECT_EQ(rest.losses[i], straight.losses[6 + i]) << "step " << i + 7;
  }

  FitALine restored{train::TrainerOptions{}};
  const train::EvalResult e = train::evaluate_checkpoint(restored, dir.file("a") + "/last.safetensors", "cpu");
  EXPECT_DOUBLE_EQ(e.loss, straight.evals.back());
  EXPECT_EQ(restored.eval_autocast, std::vector<bool>{false});
}

// --amp covers evaluation too (as the model trained, as Hugging Face's Trainer evaluates) and the
// device probe (it dispatches the ops the job will); a checkpoint evaluates as it trained.
TEST(TrainApi, AmpEvaluatesUnderAutocast) {
  TempDir dir;
  train::TrainerOptions o;
  o.device = "cpu";
  o.checkpoint_dir = dir.file("amp");
  o.amp = "bf16";
  o.max_steps = 4;
  FitALine task(o);
  train::Trainer(task).fit({});
  ASSERT_FALSE(task.eval_autocast.empty());
  for (bool on : task.eval_autocast) EXPECT_TRUE(on);
  FitALine restored{train::TrainerOptions{}};
  train::evaluate_checkpoint(restored, dir.file("amp") + "/last.safetensors", "cpu");
  EXPECT_EQ(restored.eval_autocast, std::vector<bool>{true});
  EXPECT_FALSE(autocast_enabled());
}

}  // namespace

namespace {

// The steps a schedule spans: an error where epochs x batches pass int64 (it wrapped, and the
// schedule then failed on a negative count or ran a wrong one).
TEST(TrainApi, TotalStepsRefusesAnOverflow) {
  EXPECT_EQ(train::total_steps(3, 7, "T"), 21);
  try {
    train::total_steps(INT64_MAX, 2, "MaskedLM");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[MaskedLM] 9223372036854775807 epochs of 2 batches are more steps"),
              std::string::npos)
        << e.what();
  }
}

// The checkpoint's numbers read back as written: all 64 bits of a seed (a library user's seed can
// be past INT64_MAX), a subnormal learning rate (strtod calls it out of range), and nothing after
// the number.
TEST(TrainApi, CheckpointNumbersReadBackAsWritten) {
  io::SafetensorsFile f;
  f.metadata = {{"seed", "18446744073709551615"}, {"lr", train::exact_number(1e-310)}, {"neg", "-3"},
                {"bad", "12x"}, {"empty", ""}, {"big", "1e400"}};
  train::CheckpointMeta m(f, "c.ckpt", "kiln train");
  EXPECT_EQ(m.unsigned_integer("seed"), UINT64_MAX);
  EXPECT_EQ(m.number("lr"), 1e-310);
  EXPECT_EQ(m.integer("neg"), -3);
  EXPECT_THROW(m.unsigned_integer("neg"), Error);
  EXPECT_THROW(m.integer("bad"), Error);
  EXPECT_THROW(m.number("bad"), Error);
  EXPECT_THROW(m.integer("empty"), Error);
  EXPECT_THROW(m.number("big"), Error);
  try {
    m.integer("seed");
    ADD_FAILURE() << "past INT64_MAX read as an int64";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[kiln train] checkpoint c.ckpt: entry 'seed' is not an integer"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
