// The trainer with the masked-LM task (`kiln train --model bert-*`): it learns a small corpus, a
// resumed run gives exactly the losses of an uninterrupted one, and bad settings are clear errors.
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "data_util.h"
#include "test_util.h"
#include "kiln/train/masked_lm.h"

namespace {

namespace fs = std::filesystem;
using namespace kiln;
using kiln::test::expect_error;

fs::path make_corpus(const std::string& name, int64_t docs) {
  fs::path dir = fs::temp_directory_path() / ("kiln_mlm_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  test::write_grammar_corpus((dir / "corpus").string(), docs);
  return dir;
}

train::MaskedLMOptions options(const fs::path& dir) {
  train::MaskedLMOptions o;
  o.model = "bert-tiny";
  o.data = (dir / "corpus").string();
  o.checkpoint_dir = (dir / "ck").string();
  o.vocab_size = 100;
  o.seq_len = 32;
  o.batch_size = 16;
  o.epochs = 8;
  o.lr = 3e-3;
  o.warmup = 0.1;
  o.eval_every = 0;
  o.device = "cpu";
  o.seed = 5;
  return o;
}

// Sets up a run (and throws what setting up throws).
void set_up(const train::MaskedLMOptions& o) {
  train::MaskedLM task(o);
  train::Trainer t(task);
}

TEST(MlmTrainer, HeldOutLossFallsWellBelowTheUntrainedModels) {
  fs::path dir = make_corpus("learn", 300);
  train::MaskedLM task(options(dir));
  train::Trainer t(task);
  EXPECT_FALSE(task.data().held_out.empty());
  std::vector<double> held_out;
  t.fit({.on_step = nullptr, .on_eval = [&](int64_t, const train::EvalResult& r) { held_out.push_back(r.loss); }});
  ASSERT_EQ(held_out.size(), 9u);  // untrained, then one per epoch
  // Untrained: about ln(vocabulary); trained: the grammar leaves few choices per masked word.
  EXPECT_GT(held_out.front(), 3.5);
  // (About 2.0 lower after 8 epochs, depending on the masking stream.)
  EXPECT_LT(held_out.back(), held_out.front() - 1.8) << "untrained " << held_out.front() << ", trained " << held_out.back();
  EXPECT_TRUE(fs::exists(dir / "ck" / "last.safetensors"));
  EXPECT_TRUE(fs::exists(dir / "ck" / "vocab.txt"));
  // The checkpoint evaluates to the same held-out loss.
  train::EvalResult r = train::evaluate_mlm_checkpoint((dir / "ck" / "last.safetensors").string(), "", "cpu");
  EXPECT_NEAR(r.loss, held_out.back(), 1e-5);
  EXPECT_TRUE(train::is_mlm_checkpoint((dir / "ck" / "last.safetensors").string()));
  fs::remove_all(dir);
}

TEST(MlmTrainer, ResumeGivesTheSameLossesAsAnUninterruptedRun) {
  fs::path dir = make_corpus("resume", 120);
  auto run = [&](int64_t max_steps, bool resume) {
    train::MaskedLMOptions o = options(dir);
    o.eval_every = 3;  // a checkpoint every 3 steps
    o.max_steps = max_steps;
    o.resume = resume;
    if (resume) o = [&] {
      train::MaskedLMOptions r;  // everything else comes from the checkpoint
      r.data = o.data;
      r.checkpoint_dir = o.checkpoint_dir;
      r.device = "cpu";
      r.max_steps = max_steps;
      r.resume = true;
      return r;
    }();
    train::MaskedLM task(o);
    train::Trainer t(task);
    std::vector<double> losses;
    t.fit({.on_step = [&](const train::StepInfo& s) { losses.push_back(s.loss_value()); }, .on_eval = nullptr});
    return std::make_pair(losses, task.model()->state_dict());
  };
  auto [straight, w_straight] = run(7, false);
  ASSERT_EQ(straight.size(), 7u);
  fs::remove_all(dir / "ck");
  auto [first, w_first] = run(3, false);
  auto [rest, w_rest] = run(7, true);
  ASSERT_EQ(first.size() + rest.size(), 7u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(first[i], straight[i]) << "step " << i + 1;
  for (size_t i = 0; i < rest.size(); ++i) EXPECT_EQ(rest[i], straight[3 + i]) << "step " << i + 4;
  for (const auto& [k, v] : w_straight) EXPECT_EQ(kiln::test::values(v), kiln::test::values(w_rest.at(k))) << k;
  fs::remove_all(dir);
}

TEST(MlmTrainer, BadSettingsAreClearErrors) {
  fs::path dir = make_corpus("errors", 20);
  auto o = options(dir);
  o.seq_len = 513;
  expect_error([&] { set_up(o); }, "max_position_embeddings");
  o = options(dir);
  o.model = "bert-large";
  expect_error([&] { set_up(o); }, "unknown BERT preset 'bert-large'");
  o = options(dir);
  o.vocab = (dir / "missing-vocab.txt").string();
  expect_error([&] { set_up(o); }, "missing-vocab.txt");
  o = options(dir);
  o.resume = true;
  expect_error([&] { set_up(o); }, "last.safetensors");
  { std::ofstream(dir / "empty"); }
  o = options(dir);
  o.data = (dir / "empty").string();
  expect_error([&] { set_up(o); }, "empty");
  fs::remove_all(dir);
}

}  // namespace
