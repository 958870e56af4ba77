// The trainer with the image-classification task (`kiln train`): a resumed run gives exactly the
// losses of an uninterrupted one; bad checkpoints and settings are clear errors.
#include <filesystem>
#include <unistd.h>

#include <fstream>

#include "test_util.h"
#include "kiln/train/image_classification.h"

namespace {

namespace fs = std::filesystem;
using namespace kiln;
using kiln::test::expect_error;

void write_idx(const fs::path& p, const std::vector<uint32_t>& dims, const std::vector<uint8_t>& bytes) {
  std::ofstream f(p, std::ios::binary);
  const uint8_t magic[4] = {0, 0, 0x08, static_cast<uint8_t>(dims.size())};
  f.write(reinterpret_cast<const char*>(magic), 4);
  for (uint32_t d : dims) {
    const uint8_t be[4] = {static_cast<uint8_t>(d >> 24), static_cast<uint8_t>(d >> 16), static_cast<uint8_t>(d >> 8),
                           static_cast<uint8_t>(d)};
    f.write(reinterpret_cast<const char*>(be), 4);
  }
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

// A tiny MNIST-format dataset: class k is a bright bar at row 2k plus noise.
fs::path make_dataset(const std::string& name, int64_t n_train, int64_t n_test) {
  fs::path dir = fs::temp_directory_path() / ("kiln_trainer_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  uint32_t state = 12345;
  auto next = [&] { return state = state * 1664525u + 1013904223u; };
  for (bool train : {true, false}) {
    const int64_t n = train ? n_train : n_test;
    std::vector<uint8_t> img(n * 28 * 28), lab(n);
    for (int64_t i = 0; i < n; ++i) {
      lab[i] = static_cast<uint8_t>(i % 10);
      for (int64_t p = 0; p < 784; ++p) img[i * 784 + p] = static_cast<uint8_t>(next() >> 26);
      for (int64_t c = 0; c < 28; ++c) img[i * 784 + (2 * lab[i] + 4) * 28 + c] = 200;
    }
    const std::string pre = train ? "train" : "t10k";
    write_idx(dir / (pre + "-images-idx3-ubyte"), {static_cast<uint32_t>(n), 28, 28}, img);
    write_idx(dir / (pre + "-labels-idx1-ubyte"), {static_cast<uint32_t>(n)}, lab);
  }
  return dir;
}

train::ImageClassificationOptions options(const fs::path& data, const fs::path& ckpt) {
  train::ImageClassificationOptions o;
  o.data = data.string();
  o.checkpoint_dir = ckpt.string();
  o.epochs = 2;
  o.batch_size = 16;
  o.lr = 0.05;
  o.workers = 1;
  o.device = "cpu";
  o.seed = 3;
  return o;
}

std::vector<double> run(train::Trainer& t) {
  std::vector<double> losses;
  train::Callbacks cb;
  cb.on_step = [&](const train::StepInfo& s) { losses.push_back(s.loss_value()); };
  t.fit(cb);
  return losses;
}

// Sets up a run (and throws what setting up throws).
void set_up(const train::ImageClassificationOptions& o) {
  train::ImageClassification task(o);
  train::Trainer t(task);
}

TEST(Trainer, ResumeGivesTheSameLossesAsAnUninterruptedRun) {
  fs::path data = make_dataset("resume", 96, 30);
  fs::path a = data / "ckpt_a", b = data / "ckpt_b";
  train::ImageClassification full_task(options(data, a));
  train::Trainer full(full_task);
  std::vector<double> expected = run(full);
  ASSERT_EQ(expected.size(), 12u);  // 2 epochs of 6 batches
  EXPECT_LT(expected.back(), expected.front());

  // Stop in the middle of the second epoch (a checkpoint every 4 steps), then resume.
  auto o = options(data, b);
  o.checkpoint_every = 4;
  o.max_steps = 9;
  train::ImageClassification first_task(o);
  train::Trainer first(first_task);
  std::vector<double> part = run(first);
  ASSERT_EQ(part.size(), 9u);
  for (size_t i = 0; i < part.size(); ++i) EXPECT_EQ(part[i], expected[i]) << "step " << i;

  auto r = options(data, b);
  r.resume = true;
  r.lr = 99;  // ignored: the checkpoint's settings win
  train::ImageClassification resumed_task(r);
  train::Trainer resumed(resumed_task);
  EXPECT_EQ(resumed.step(), 9);  // stopping at --max-steps saved there (after the one at step 8)
  std::vector<double> rest = run(resumed);
  ASSERT_EQ(rest.size(), 3u);
  for (size_t i = 0; i < rest.size(); ++i) EXPECT_EQ(rest[i], expected[9 + i]) << "step " << 9 + i;
  EXPECT_EQ(resumed.evaluate().accuracy, full.evaluate().accuracy);

  train::EvalResult e = train::evaluate_checkpoint((a / "last.safetensors").string(), data.string(), "cpu");
  EXPECT_EQ(e.samples, 30);
  EXPECT_EQ(e.accuracy, full.evaluate().accuracy);
  fs::remove_all(data);
}

// kiln eval reads the weights alone: a checkpoint evaluates on another data set (whose training
// split has another size, so the training position would not fit). Resuming without data takes
// the checkpoint's; with a training split of another size it is an error naming both.
TEST(Trainer, EvalTakesAnyDataAndResumeKeepsTheCheckpointsData) {
  fs::path data = make_dataset("evaldata", 96, 30), other = make_dataset("evalother", 64, 20);
  fs::path ck = data / "ckpt";
  auto o = options(data, ck);
  o.max_steps = 7;
  o.checkpoint_every = 3;
  {
    train::ImageClassification task(o);
    train::Trainer t(task);
    run(t);
  }
  train::EvalResult e = train::evaluate_checkpoint((ck / "last.safetensors").string(), other.string(), "cpu");
  EXPECT_EQ(e.samples, 20);

  auto r = options("", ck);
  r.resume = true;
  train::ImageClassification task(r);
  train::Trainer resumed(task);
  EXPECT_EQ(resumed.step(), 7);
  EXPECT_EQ(task.options().data, data.string());
  EXPECT_EQ(task.options().checkpoint_every, 3);  // the run's periodic saves go on (they stopped at resume)

  r.data = other.string();
  expect_error([&] { set_up(r); }, "the checkpoint was written for 96 training images, but " + other.string() +
                                       " has 64");

  // A directory with the test split alone evaluates (as torchvision's FashionMNIST(train=False)).
  fs::remove(other / "train-images-idx3-ubyte");
  fs::remove(other / "train-labels-idx1-ubyte");
  e = train::evaluate_checkpoint((ck / "last.safetensors").string(), other.string(), "cpu");
  EXPECT_EQ(e.samples, 20);
  r.resume = false;
  r.evaluate_only = true;  // such a trainer does not train
  train::ImageClassification eval_task(r);
  train::Trainer evaluator(eval_task);
  EXPECT_EQ(evaluator.evaluate().samples, 20);
  expect_error([&] { run(evaluator); }, "set up to evaluate only");
  fs::remove_all(data);
  fs::remove_all(other);
}

// --momentum is the one-cycle schedule's top momentum (it used to be overwritten by the
// schedule's default 0.95 at once).
TEST(Trainer, MomentumSetsTheOneCyclesTopMomentum) {
  fs::path data = make_dataset("momentum", 32, 10);
  for (double momentum : {0.0, 0.5, 0.95}) {
    auto o = options(data, data / "ckpt");
    o.momentum = momentum;
    train::ImageClassification task(o);
    train::Trainer t(task);
    EXPECT_EQ(task.optimizer().param_groups()[0].get("momentum"), momentum);
  }
  fs::remove_all(data);
}

TEST(Trainer, BadInputIsAClearError) {
  fs::path data = make_dataset("errors", 32, 10);
  fs::path ck = data / "ckpt";
  auto o = options(data, ck);
  o.model = "resnet7";
  expect_error([&] { set_up(o); }, "resnet7");
  o = options(data, ck);
  o.data = (data / "missing").string();
  expect_error([&] { set_up(o); }, "missing");
  const fs::path empty = make_dataset("empty", 0, 10);
  o = options(empty, ck);
  expect_error([&] { set_up(o); }, "has no images");
  fs::remove_all(empty);
  o = options(data, ck);
  o.resume = true;
  expect_error([&] { set_up(o); }, "last.safetensors");
  o.device = "cuda:7";
  expect_error([&] { set_up(o); }, "cuda:7");

  // A truncated checkpoint and a file that is not one.
  o = options(data, ck);
  o.max_steps = 1;
  o.checkpoint_every = 1;
  o.epochs = 1;
  {
    train::ImageClassification task(o);
    train::Trainer t(task);
    run(t);
  }
  o.max_steps = -1;
  o.resume = true;
  fs::path file = ck / "last.safetensors";
  {  // A checkpoint without one of the model's weights: the error names it.
    io::SafetensorsFile f = io::load_checkpoint(file.string());
    const std::string saved = (ck / "saved.safetensors").string();
    fs::copy_file(file, saved);
    std::string dropped;
    for (const auto& [k, t] : f.tensors)
      if (k.starts_with("model.") && dropped.empty()) dropped = k;
    f.tensors.erase(dropped);
    std::map<std::string, std::string> meta = f.metadata;
    meta.erase(io::kChecksumKey);
    io::save_checkpoint(file.string(), f.tensors, meta);
    expect_error([&] { set_up(o); }, "[kiln train] checkpoint " + file.string() + ": missing keys: " + dropped.substr(6));
    fs::rename(saved, file);
  }
  fs::resize_file(file, fs::file_size(file) / 2);
  expect_error([&] { set_up(o); }, "last.safetensors");
  std::ofstream(file, std::ios::trunc) << "not a checkpoint at all";
  expect_error([&] { set_up(o); }, "last.safetensors");
  fs::remove_all(data);
}

}  // namespace
