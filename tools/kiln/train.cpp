// kiln train: trains a model on Fashion-MNIST with a progress bar, test accuracy per epoch and a
// checkpoint; kiln eval: the test accuracy of a checkpoint.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <iostream>

#include "kiln/kiln.h"
#include "tools/kiln/args.h"
#include "tools/kiln/commands.h"
#include "tools/kiln/trainer.h"

namespace kiln::cli {
namespace {

using Clock = std::chrono::steady_clock;

// One line per epoch, redrawn in place on a terminal (and printed every 10% otherwise).
class ProgressBar {
 public:
  void start(int64_t epoch, int64_t epochs) {
    epoch_ = epoch;
    epochs_ = epochs;
    t0_ = Clock::now();
    samples_ = 0;
    last_decile_ = -1;
    loss_avg_ = -1;
  }
  void update(const train::StepInfo& s) {
    samples_ += s.samples;
    loss_avg_ = loss_avg_ < 0 ? s.loss : 0.9 * loss_avg_ + 0.1 * s.loss;
    const double secs = std::chrono::duration<double>(Clock::now() - t0_).count();
    const int64_t done = s.batch + 1;
    const double eta = done > 0 ? secs / static_cast<double>(done) * static_cast<double>(s.batches - done) : 0;
    const int width = 30, filled = static_cast<int>(width * done / std::max<int64_t>(s.batches, 1));
    char line[256];
    std::snprintf(line, sizeof line, "epoch %lld/%lld [%.*s%*s] %lld/%lld  %.0f samples/s  loss %.4f  ETA %.0fs",
                  static_cast<long long>(epoch_ + 1), static_cast<long long>(epochs_), filled,
                  "==============================", width - filled, "", static_cast<long long>(done),
                  static_cast<long long>(s.batches), secs > 0 ? samples_ / secs : 0.0, loss_avg_, eta);
    if (tty_) {
      std::fprintf(stderr, "\r%s", line);
      if (done == s.batches) std::fprintf(stderr, "\n");
    } else if (const int64_t decile = done * 10 / std::max<int64_t>(s.batches, 1); decile != last_decile_) {
      last_decile_ = decile;
      std::fprintf(stderr, "%s\n", line);
    }
    std::fflush(stderr);
  }

 private:
  bool tty_ = isatty(2) != 0;
  int64_t epoch_ = 0, epochs_ = 0, last_decile_ = -1;
  double samples_ = 0, loss_avg_ = -1;
  Clock::time_point t0_;
};

}  // namespace

int train(int argc, char** argv) {
  Args args("train", argc, argv,
            {"model", "epochs", "batch-size", "lr", "momentum", "weight-decay", "device", "data", "seed",
             "checkpoint-dir", "checkpoint-every", "workers", "threads", "max-steps"},
            {"resume"});
  train::TrainOptions o;
  o.model = args.get("model", o.model);
  o.epochs = args.get_int("epochs", o.epochs, 1);
  o.batch_size = args.get_int("batch-size", o.batch_size, 1);
  o.lr = args.get_double("lr", o.lr);
  o.momentum = args.get_double("momentum", o.momentum);
  o.weight_decay = args.get_double("weight-decay", o.weight_decay);
  o.device = args.get("device", o.device);
  o.data = args.get("data", o.data);
  o.seed = static_cast<uint64_t>(args.get_int("seed", 0, 0));
  o.checkpoint_dir = args.get("checkpoint-dir", o.checkpoint_dir);
  o.checkpoint_every = args.get_int("checkpoint-every", 0, 0);
  o.workers = args.get_int("workers", o.workers, 0);
  o.max_steps = args.get_int("max-steps", -1, -1);
  o.resume = args.has("resume");
  if (args.has("threads")) set_num_threads(static_cast<int>(args.get_int("threads", 1, 1)));
  if (o.resume)
    for (const char* f : {"model", "epochs", "batch-size", "lr", "momentum", "weight-decay", "seed"})
      KILN_CHECK(!args.has(f), "kiln train", "--", f, " cannot be combined with --resume (the checkpoint sets it)");

  train::Trainer trainer(o);
  const auto& opt = trainer.options();
  std::cout << "kiln train: " << opt.model << " on " << opt.data << ", device " << trainer.device().str() << ", "
            << opt.epochs << " epoch(s), batch " << opt.batch_size << ", lr " << opt.lr << ", "
            << get_num_threads() << " thread(s)";
  if (o.resume) std::cout << ", resumed at epoch " << trainer.epoch() + 1 << " step " << trainer.step();
  std::cout << std::endl;
  ProgressBar bar;
  int64_t current = -1;
  const auto t0 = Clock::now();
  train::Callbacks cb;
  cb.on_step = [&](const train::StepInfo& s) {
    if (s.epoch != current) {
      current = s.epoch;
      bar.start(s.epoch, opt.epochs);
    }
    bar.update(s);
  };
  cb.on_epoch = [&](int64_t epoch, const train::EvalResult& r) {
    std::printf("epoch %lld: test accuracy %.2f%%, test loss %.4f, %.0fs elapsed, checkpoint %s\n",
                static_cast<long long>(epoch), 100 * r.accuracy, r.loss,
                std::chrono::duration<double>(Clock::now() - t0).count(), trainer.checkpoint_path().c_str());
    std::fflush(stdout);
  };
  trainer.fit(cb);
  return 0;
}

int eval(int argc, char** argv) {
  Args args("eval", argc, argv, {"checkpoint", "data", "device", "threads"}, {});
  KILN_CHECK(args.has("checkpoint"), "kiln eval", "--checkpoint PATH is required (kiln train writes checkpoints/last.safetensors)");
  if (args.has("threads")) set_num_threads(static_cast<int>(args.get_int("threads", 1, 1)));
  train::EvalResult r = train::evaluate_checkpoint(args.get("checkpoint", ""),
                                                   args.get("data", "/usr/share/datasets/fashion-mnist"),
                                                   args.get("device", ""));
  std::printf("test accuracy %.2f%% (%lld samples), test loss %.4f\n", 100 * r.accuracy,
              static_cast<long long>(r.samples), r.loss);
  return 0;
}

}  // namespace kiln::cli
