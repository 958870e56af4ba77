// kiln train: trains a CNN on Fashion-MNIST (test accuracy per epoch) or pre-trains BERT with MLM on
// a text corpus (held-out loss and perplexity), with a progress bar and checkpoints; kiln eval:
// the same measures for a checkpoint.
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <cstdio>
#include <iostream>

#include "kiln/kiln.h"
#include "tools/kiln/args.h"
#include "tools/kiln/commands.h"

namespace kiln::cli {
namespace {

using Clock = std::chrono::steady_clock;

// The trainer's notes (settings it changed), one line each.
void print_notes(const train::Trainer& t) {
  for (const std::string& n : t.notes()) std::cout << "note: " << n << "\n";
}

// ", 2 processes (batch per process)" in a distributed job.
std::string processes_note() {
  const int w = distributed::world_size();
  return w > 1 ? ", " + std::to_string(w) + " processes (batch per process)" : "";
}

// "cpu", or "cpu (cuda:0 present but lacks kernels for ...)" when a GPU was passed over.
std::string device_line(const train::Trainer& t) {
  return t.device().str() + (t.device_note().empty() ? "" : " (" + t.device_note() + ")");
}

// One line per epoch, redrawn in place on a terminal (at most 4 times a second, and at the end)
// and printed every 10% otherwise. The loss's running average is kept where the loss is (on a
// GPU: the device) and read only for a line, so that the steps between lines never wait for the
// GPU.
class ProgressBar {
 public:
  explicit ProgressBar(const char* unit) : unit_(unit) {}
  void start(int64_t epoch, int64_t epochs) {
    epoch_ = epoch;
    epochs_ = epochs;
    t0_ = Clock::now();
    samples_ = 0;
    first_ = -1;
    last_decile_ = -1;
    loss_avg_ = Tensor();
  }
  // After batch `batch` (0-based) of `batches`, which held `count` samples or tokens and had the
  // loss `loss` (undefined: nothing to learn from, left out of the average).
  void update(int64_t batch, int64_t batches, const Tensor& loss, int64_t count) {
    if (quiet_) return;
    stepped_ = Clock::now();
    count *= distributed::world_size();  // the job's rate: every process steps alike
    if (loss.defined()) {
      NoGradGuard ng;
      const Tensor l = loss.to(kFloat64);
      loss_avg_ = loss_avg_.defined() ? loss_avg_ * 0.9 + l * 0.1 : l;
    }
    // Rates are timed from the end of the epoch's first batch (a resumed epoch starts mid-way).
    if (first_ < 0) {
      first_ = batch;
      t0_ = Clock::now();
    } else {
      samples_ += static_cast<double>(count);
    }
    const int64_t done = batch + 1, timed = batch - first_;
    const int64_t decile = done * 10 / std::max<int64_t>(batches, 1);
    const bool last = done == batches;
    if (tty_ ? !last && Clock::now() - drawn_ < std::chrono::milliseconds(250) : decile == last_decile_) return;
    last_decile_ = decile;
    // Read first: it waits for the steps queued so far, so the rate below counts finished work.
    const double loss_avg = loss_avg_.defined() ? loss_avg_.item<double>() : 0.0;
    drawn_ = Clock::now();
    const double secs = std::chrono::duration<double>(drawn_ - t0_).count();
    const double eta = timed > 0 ? secs / static_cast<double>(timed) * static_cast<double>(batches - done) : 0;
    const int width = 30, filled = static_cast<int>(width * done / std::max<int64_t>(batches, 1));
    char line[256];
    std::snprintf(line, sizeof line, "epoch %lld/%lld [%.*s%*s] %lld/%lld  %.0f %s/s  loss %.4f  ETA %.0fs",
                  static_cast<long long>(epoch_ + 1), static_cast<long long>(epochs_), filled,
                  "==============================", width - filled, "", static_cast<long long>(done),
                  static_cast<long long>(batches), secs > 0 ? samples_ / secs : 0.0, unit_, loss_avg, eta);
    std::fprintf(stderr, tty_ ? (last ? "\r%s\n" : "\r%s") : "%s\n", line);
    std::fflush(stderr);
    open_ = tty_ && !last;
  }
  // Ends a line left open on a terminal (training stopped mid-epoch); also when an error unwinds
  // past the bar, so that "kiln: error: ..." starts a line of its own.
  void end() {
    if (open_) std::fprintf(stderr, "\n");
    open_ = false;
  }
  ~ProgressBar() { end(); }
  // Leaves the time since the last step out of the rates (an evaluation ran: it is not training).
  void skip_idle() {
    if (first_ >= 0) t0_ += Clock::now() - stepped_;
  }

 private:
  const char* unit_;
  bool tty_ = isatty(2) != 0;
  bool quiet_ = distributed::rank() != 0;  // with several processes, rank 0 reports
  bool open_ = false;                      // a line drawn on the terminal without its newline
  int64_t epoch_ = 0, epochs_ = 0, first_ = -1, last_decile_ = -1;
  double samples_ = 0;
  Tensor loss_avg_;  // on the loss's device
  Clock::time_point t0_, drawn_, stepped_;
};

// Flags only the MLM trainer takes, and flags only the image trainer takes.
constexpr const char* kBertFlags[] = {"vocab", "vocab-size", "seq-len", "warmup", "clip", "eval-every",
                                      "gradient-checkpointing"};
constexpr const char* kImageFlags[] = {"momentum", "checkpoint-every", "workers"};
// Data-loading threads beyond this only wait on one another (each makes whole batches).
constexpr int64_t kMaxWorkers = 64;

// With --resume the checkpoint sets the model and its training settings: the flags that would
// set them again are errors, not silently overridden.
void refuse_with_resume(const Args& args, std::initializer_list<const char*> task_flags) {
  auto refuse = [&](const char* f) {
    KILN_CHECK(!args.has(f), "kiln train", "--", f, " cannot be combined with --resume (the checkpoint sets it)");
  };
  for (const char* f : {"epochs", "batch-size", "lr", "weight-decay", "seed", "amp"}) refuse(f);
  for (const char* f : task_flags) refuse(f);
}

// A resumed run with nothing left to train (its epochs done, or --max-steps at or below its step)
// says so, rather than a line about resuming at an epoch past the last.
bool nothing_to_resume(const train::Trainer& trainer, int64_t epochs, int64_t max_steps) {
  if (trainer.epoch() >= epochs) {
    std::cout << "kiln train: nothing to do: the checkpoint finished its " << epochs << " epoch(s), at step "
              << trainer.step() << std::endl;
    return true;
  }
  if (max_steps >= 0 && max_steps <= trainer.step()) {
    std::cout << "kiln train: nothing to do: the checkpoint is at step " << trainer.step() << ", --max-steps "
              << max_steps << std::endl;
    return true;
  }
  return false;
}

// --model with --resume may name the checkpoint's model, not another one (it was dropped unseen).
void check_resumed_model(const Args& args, const std::string& model) {
  KILN_CHECK(!args.has("model") || args.get("model", "") == model, "kiln train", "--model ", args.get("model", ""),
             " is not the checkpoint's model, ", model, " (--resume continues the checkpoint's)");
}

int train_bert(const Args& args) {
  for (const char* f : kImageFlags)
    KILN_CHECK(!args.has(f), "kiln train", "--", f, " is not a flag of the BERT trainer");
  KILN_CHECK(!(args.has("vocab") && args.has("vocab-size")), "kiln train",
             "--vocab-size goes without --vocab (the vocabulary file sets the size)");
  train::MaskedLMOptions o;
  o.model = args.get("model", o.model);
  o.data = args.get("data", "");
  o.vocab = args.get("vocab", "");
  o.vocab_size = args.get_int("vocab-size", o.vocab_size, 16);
  o.seq_len = args.get_int("seq-len", o.seq_len, 3);
  o.epochs = args.get_int("epochs", o.epochs, 1);
  o.batch_size = args.get_int("batch-size", o.batch_size, 1);
  o.lr = args.get_double("lr", o.lr);
  o.weight_decay = args.get_double("weight-decay", o.weight_decay);
  o.warmup = args.get_double("warmup", o.warmup);
  o.clip = args.get_double("clip", o.clip);
  o.eval_every = args.get_int("eval-every", o.eval_every, 0);
  o.device = args.get("device", "");
  o.seed = args.get_unsigned("seed", 0);
  o.checkpoint_dir = args.get("checkpoint-dir", o.checkpoint_dir);
  o.max_steps = args.get_int("max-steps", -1, -1);
  o.resume = args.has("resume");
  o.verify_checkpoint = !args.has("no-verify");
  o.amp = args.get("amp", "");
  o.gradient_checkpointing = args.has("gradient-checkpointing");
  if (o.resume) refuse_with_resume(args, {"seq-len", "vocab", "vocab-size", "warmup", "clip", "eval-every"});

  const auto t0 = Clock::now();
  train::MaskedLM task(o);
  train::Trainer trainer(task);
  const auto& opt = task.options();
  if (o.resume) check_resumed_model(args, opt.model);
  if (o.resume && nothing_to_resume(trainer, opt.epochs, o.max_steps)) return 0;
  const auto& d = task.data();
  std::cout << "kiln train: " << opt.model << " (masked LM) on " << opt.data << ": " << d.documents << " documents, "
            << d.train.size() << " training sequences (" << d.train_tokens << " tokens), " << d.held_out.size()
            << " held out; vocabulary " << task.tokenizer().vocab_size() << "; device " << device_line(trainer)
            << ", " << opt.epochs << " epoch(s), batch " << opt.batch_size << ", seq " << opt.seq_len << ", AdamW lr "
            << opt.lr << ", " << get_num_threads() << " thread(s)" << processes_note() << " (prepared in "
            << static_cast<int>(std::chrono::duration<double>(Clock::now() - t0).count()) << " s)";
  if (o.resume) std::cout << ", resumed at epoch " << trainer.epoch() + 1 << " step " << trainer.step();
  std::cout << std::endl;
  print_notes(trainer);
  ProgressBar bar("tokens");
  int64_t current = -1;
  const auto t1 = Clock::now();
  train::Callbacks cb;
  cb.on_step = [&](const train::StepInfo& s) {
    if (s.epoch != current) {
      current = s.epoch;
      bar.start(s.epoch, opt.epochs);
    }
    bar.update(s.batch, s.batches, s.loss, s.samples);  // tokens
  };
  cb.on_eval = [&](int64_t step, const train::EvalResult& r) {
    bar.skip_idle();
    bar.end();
    std::printf("step %lld: held-out loss %.4f, perplexity %.1f (%lld masked tokens), %.0fs elapsed%s\n",
                static_cast<long long>(step), r.loss, r.perplexity, static_cast<long long>(r.samples),
                std::chrono::duration<double>(Clock::now() - t1).count(), step == 0 ? " (untrained)" : "");
    std::fflush(stdout);
  };
  trainer.fit(cb);
  bar.end();
  if (trainer.has_checkpoint())  // none when no step ran
    std::printf("checkpoint %s\n", trainer.checkpoint_path().c_str());
  return 0;
}

int train_image(const Args& args) {
  for (const char* f : kBertFlags)
    KILN_CHECK(!args.has(f), "kiln train", "--", f, " is a flag of the BERT trainer (--model bert-mini)");
  train::ImageClassificationOptions o;
  o.model = args.get("model", o.model);
  o.epochs = args.get_int("epochs", o.epochs, 1);
  o.batch_size = args.get_int("batch-size", o.batch_size, 1);
  o.lr = args.get_double("lr", o.lr);
  o.momentum = args.get_double("momentum", o.momentum);
  o.weight_decay = args.get_double("weight-decay", o.weight_decay);
  o.device = args.get("device", o.device);
  o.resume = args.has("resume");
  o.data = args.get("data", o.resume ? "" : o.data);  // resuming: the checkpoint's, unless given
  o.seed = args.get_unsigned("seed", 0);
  o.checkpoint_dir = args.get("checkpoint-dir", o.checkpoint_dir);
  o.checkpoint_every = args.get_int("checkpoint-every", 0, 0);
  o.workers = args.get_int("workers", o.workers, 0, kMaxWorkers);
  o.max_steps = args.get_int("max-steps", -1, -1);
  o.verify_checkpoint = !args.has("no-verify");
  o.amp = args.get("amp", "");
  if (o.resume) refuse_with_resume(args, {"momentum"});

  train::ImageClassification task(o);
  train::Trainer trainer(task);
  const auto& opt = task.options();
  if (o.resume) check_resumed_model(args, opt.model);
  if (o.resume && nothing_to_resume(trainer, opt.epochs, o.max_steps)) return 0;
  std::cout << "kiln train: " << opt.model << " on " << opt.data << ", device " << device_line(trainer) << ", "
            << opt.epochs << " epoch(s), batch " << opt.batch_size << ", lr " << opt.lr << ", "
            << get_num_threads() << " thread(s)" << processes_note();
  if (o.resume) std::cout << ", resumed at epoch " << trainer.epoch() + 1 << " step " << trainer.step();
  std::cout << std::endl;
  print_notes(trainer);
  ProgressBar bar("samples");
  int64_t current = -1;
  const auto t0 = Clock::now();
  train::Callbacks cb;
  cb.on_step = [&](const train::StepInfo& s) {
    if (s.epoch != current) {
      current = s.epoch;
      bar.start(s.epoch, opt.epochs);
    }
    bar.update(s.batch, s.batches, s.loss, s.samples);
  };
  cb.on_epoch = [&](int64_t epoch, const train::EvalResult& r) {
    std::printf("epoch %lld: test accuracy %.2f%%, test loss %.4f, %.0fs elapsed, checkpoint %s\n",
                static_cast<long long>(epoch), 100 * r.accuracy, r.loss,
                std::chrono::duration<double>(Clock::now() - t0).count(), trainer.checkpoint_path().c_str());
    std::fflush(stdout);
  };
  trainer.fit(cb);
  bar.end();
  if (trainer.epoch() < opt.epochs && trainer.has_checkpoint())
    std::printf("stopped at step %lld (--max-steps), checkpoint %s\n", static_cast<long long>(trainer.step()),
                trainer.checkpoint_path().c_str());
  return 0;
}

bool is_mlm_file(const std::string& path) {
  return std::filesystem::is_regular_file(path) && train::is_mlm_checkpoint(path);
}

// Which trainer: --model's, or with --resume the checkpoint's (which sets the model).
bool bert_run(const Args& args) {
  if (!args.has("resume")) return train::is_bert_model(args.get("model", ""));
  const std::string path =
      (std::filesystem::path(args.get("checkpoint-dir", train::TrainerOptions{}.checkpoint_dir)) / "last.safetensors")
          .string();
  return is_mlm_file(path);
}

}  // namespace

int train(int argc, char** argv) {
  // clang-format off
  Args args("train", argc, argv,
            {"model", "epochs", "batch-size", "lr", "momentum", "weight-decay", "device", "data", "seed",
             "checkpoint-dir", "checkpoint-every", "workers", "threads", "memory-limit", "gpu-memory-limit",
             "max-steps", "vocab", "vocab-size", "seq-len", "warmup", "clip", "eval-every", "amp"},
            {"resume", "no-verify", "gradient-checkpointing"});
  // clang-format on
  KILN_CHECK(args.has("resume") || !args.has("no-verify"), "kiln train",
             "--no-verify goes with --resume (it loads a checkpoint without checking its checksum)");
  apply_runtime_flags(args);
  // Under mpirun (or another MPI launcher): one process of a data-parallel job; rank 0 prints.
  if (!distributed::is_initialized()) distributed::init();
  if (distributed::rank() != 0) (void)std::freopen("/dev/null", "w", stdout);
  const int status = bert_run(args) ? train_bert(args) : train_image(args);
  print_fallbacks(std::cout);
  return status;
}

int eval(int argc, char** argv) {
  Args args("eval", argc, argv, {"checkpoint", "data", "device", "threads", "memory-limit", "gpu-memory-limit"},
            {"no-verify"});
  KILN_CHECK(args.has("checkpoint"), "kiln eval", "--checkpoint PATH is required (kiln train writes checkpoints/last.safetensors)");
  apply_runtime_flags(args);
  const std::string path = args.get("checkpoint", "");
  if (is_mlm_file(path)) {
    train::EvalResult r =
        train::evaluate_mlm_checkpoint(path, args.get("data", ""), args.get("device", ""), !args.has("no-verify"));
    std::printf("held-out loss %.4f, perplexity %.2f (%lld masked tokens)\n", r.loss, r.perplexity,
                static_cast<long long>(r.samples));
    return 0;
  }
  train::EvalResult r = train::evaluate_checkpoint(args.get("checkpoint", ""), args.get("data", ""),  // "": the checkpoint's
                                                   args.get("device", ""), !args.has("no-verify"));
  std::printf("test accuracy %.2f%% (%lld samples), test loss %.4f\n", 100 * r.accuracy,
              static_cast<long long>(r.samples), r.loss);
  return 0;
}

}  // namespace kiln::cli
