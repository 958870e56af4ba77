// kiln::train's one training loop: the Trainer runs a Task (image classification, masked LM, or
// a user's own) over epochs and steps, with progress callbacks, evaluation, mixed precision,
// atomic checkpoints and exact resume, in one process or in several (kiln::distributed).
//
// Several processes (after kiln::distributed::init(), e.g. under mpirun): the module is wrapped
// in DistributedDataParallel, each process trains on its share of every epoch (the tasks shard
// their data with DistributedSampler; the batch size is per process, as in PyTorch), evaluation
// is sharded and its sums reduced, a CUDA device means the GPU of the process's local rank, only
// rank 0 writes checkpoints, and a checkpoint resumes at the world size that wrote it.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kiln/device.h"
#include "kiln/nn/module.h"
#include "kiln/nn/parallel.h"
#include "kiln/optim/lr_scheduler.h"
#include "kiln/optim/optimizer.h"
#include "kiln/tensor.h"
#include "kiln/train/checkpoint.h"
#include "kiln/train/mixed_precision.h"

namespace kiln::train {

// The loop's settings. Each task's options derive from these and add the task's own (model,
// data, batch size, learning rate, ...).
struct TrainerOptions {
  int64_t epochs = 3;
  std::string device;  // empty: the best device present (see choose_device)
  uint64_t seed = 0;
  std::string checkpoint_dir = "checkpoints";
  bool resume = false;            // continue from a checkpoint, whose settings replace these
  std::string resume_from;        // the checkpoint file to resume from (default: checkpoint_dir's)
  int64_t checkpoint_every = 0;   // also save every N steps (0: at the end of each epoch only)
  int64_t eval_every = 0;         // also evaluate (and save) every N steps (0: once per epoch)
  int64_t max_steps = -1;         // stop after this many steps in total (a checkpoint is saved there)
  bool verify_checkpoint = true;  // check the checksum of the checkpoint resumed from
  std::string amp;                // "", "off", "bf16" or "fp16" (autocast, and a GradScaler for fp16)
  std::string command = "kiln train";  // names the command in errors
  // Evaluation alone (kiln eval): the weights are read from the checkpoint and nothing trains, so
  // a task may leave out its training data, loader, optimizer and schedule.
  bool evaluate_only = false;
};

// The settings every task has, checked alike; errors name the kiln train flags (--epochs,
// --batch-size, --lr, --weight-decay) and what they got.
void check_training_numbers(int64_t epochs, int64_t batch_size, double lr, double weight_decay, const char* where);

// After each training step (on every process; samples are this process's).
struct StepInfo {
  int64_t epoch, batch, batches, step;  // 0-based epoch and batch in it; step: steps completed
  // The batch's loss, a 0-dim tensor on the training device (detached); undefined when the batch
  // had nothing to learn from. On a GPU reading it (loss_value(), item()) waits for the step to
  // finish: a loop that reads it only now and then keeps the GPU busy while the host queues the
  // next steps.
  Tensor loss;
  double lr;                            // the learning rate the step used (the first param group's)
  int64_t samples;                      // the batch's size: images, or (masked LM) tokens that are not padding
  double loss_value() const { return loss.defined() ? loss.item<double>() : 0.0; }  // 0 without one
};

// An evaluation on held-out data. Each task fills the measures it has. With several processes,
// each task measures its share and the Trainer combines them (loss and accuracy weighted by samples).
struct EvalResult {
  double loss = 0;        // the mean loss
  double accuracy = 0;    // image classification: the share classified right
  double perplexity = 0;  // masked LM: exp(loss)
  int64_t samples = 0;    // what was scored: test images, or masked tokens
};

struct Callbacks {
  std::function<void(const StepInfo&)> on_step = {};
  // After each epoch's evaluation and checkpoint; `epoch` counts the epochs completed.
  std::function<void(int64_t epoch, const EvalResult&)> on_epoch = {};
  // After every evaluation: the untrained model's at step 0 (when it is set and fit() starts
  // there), every eval_every steps, and each epoch's (before on_epoch).
  std::function<void(int64_t step, const EvalResult&)> on_eval = {};
};

// One batch of training data, as a task hands it to the loop.
struct TrainingBatch {
  // The batch's loss (run under autocast when --amp is on); empty: the batch has nothing to learn
  // from, and the step only advances the schedule.
  std::function<Tensor()> loss = {};
  int64_t samples = 0;  // StepInfo::samples
};

// What a kind of training job is: the Trainer calls these in order. Construct a task with its
// options only; the Trainer builds the rest through the hooks (so that a checkpoint's settings,
// the device choice and the seed come first).
class Task {
 public:
  virtual ~Task() = default;

  // The loop's settings within the task's options.
  virtual TrainerOptions& options() = 0;
  // The checkpoint's "format" entry ("kiln-train-checkpoint-1"): resuming checks it.
  virtual std::string checkpoint_format() const = 0;

  // Setting up, in this order:
  // the options as given, before a checkpoint replaces them;
  virtual void check_options() {}
  // with resume: the checkpoint's settings replace the options (the loop then reads "amp");
  virtual void load_settings(const CheckpointMeta& checkpoint) = 0;
  // checks the settings and reads the data; a setting it changes is a line in `notes`;
  virtual void prepare(std::vector<std::string>& notes) = 0;
  // one small training and evaluation step of a fresh model on the CPU, whose ops decide
  // whether a GPU runs the job natively (choose_device); the generator is restored after it;
  virtual void probe_step() = 0;
  // the model (on `device`), the optimizer and the schedule, after the generator is seeded.
  virtual void build(Device device) = 0;

  // What the loop drives, once built.
  virtual nn::Module& module() = 0;
  virtual optim::Optimizer& optimizer() = 0;
  virtual optim::LRScheduler& scheduler() = 0;
  virtual int64_t batches_per_epoch() const = 0;

  // Training: begin_epoch, then next_batch for each step, then end_epoch (also when the loop
  // stops early or throws). `first_batch` > 0 resumes the epoch mid-way, with the same batches.
  virtual void begin_epoch(int64_t epoch, int64_t first_batch) = 0;
  virtual TrainingBatch next_batch() = 0;
  virtual void end_epoch() {}
  // Between backward and the optimizer's step, on unscaled gradients (gradient clipping).
  virtual void before_optimizer_step() {}
  // Measures the held-out data; the loop has set eval mode and turned gradients off.
  virtual EvalResult evaluate() = 0;

  // Checkpoints: the task's settings and state into the metadata (the loop adds "format", "amp"
  // and the position; each step's random numbers follow from step_in_run, so need no saving),
  // and its state back (with its own checks, such as its data's size) before the position is
  // checked. kiln eval restores the weights alone.
  virtual void save_metadata(std::map<std::string, std::string>& metadata) const = 0;
  virtual void load_state(const CheckpointMeta& /*checkpoint*/) {}
  // After each checkpoint is written (files beside it, such as a vocabulary).
  virtual void checkpoint_saved(const std::string& /*checkpoint_dir*/) {}
  // Whether a run that max_steps stops before its first step still saves (the initial model).
  virtual bool checkpoints_untrained_model() const { return false; }
};

class Trainer {
 public:
  // Builds the task; with its options' resume, restores the checkpoint (resume_from, or
  // checkpoint_dir's last.safetensors). The task must outlive the trainer.
  explicit Trainer(Task& task);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // Trains the remaining epochs (up to max_steps), evaluating and checkpointing after each.
  void fit(const Callbacks& callbacks = {});
  EvalResult evaluate();
  Task& task() { return task_; }
  int64_t epoch() const { return epoch_; }  // completed epochs
  int64_t step() const { return step_; }    // completed steps
  Device device() const { return device_; }
  // Why a present GPU was not chosen (for the first line), or empty.
  const std::string& device_note() const { return device_note_; }
  // Settings changed on the way (a batch larger than the data set), one line each.
  const std::vector<std::string>& notes() const { return notes_; }
  // The loop's settings as the run uses them (after a checkpoint's).
  const TrainerOptions& options() const { return task_.options(); }
  std::string checkpoint_path() const;
  // Whether checkpoint_path() holds this run's model: saved by it, or the one it resumed from
  // (a file there from another run does not count).
  bool has_checkpoint() const { return saved_step_ >= 0; }
  void save_checkpoint();

 private:
  void resume(const io::SafetensorsFile& f, const std::string& path);
  void train_step(const Callbacks& cb);
  const char* where() const { return options().command.c_str(); }

  Task& task_;
  Device device_;
  std::string device_note_;
  std::vector<std::string> notes_;
  std::unique_ptr<MixedPrecision> amp_;
  std::unique_ptr<nn::parallel::DistributedDataParallel> ddp_;  // with more than one process
  int64_t epoch_ = 0, step_ = 0, batch_in_epoch_ = 0;
  int64_t saved_step_ = -1;  // the step of the last checkpoint written (or resumed from)
};

// The index of `step` of this process among the run's (step, process) pairs: step * world_size +
// rank. Each training step draws its random numbers from counters found from it, and the
// masked-LM task its masking counters, so a resumed run, and each process, draws as the
// uninterrupted run did.
uint64_t step_in_run(int64_t step);

// The evaluation of `task` restored from the checkpoint at `path` (errors name kiln eval): set
// the task's own options (its data) first; `device` empty: the best device present.
EvalResult evaluate_checkpoint(Task& task, const std::string& path, const std::string& device, bool verify = true);

// epochs * batches_per_epoch, the steps a task's learning-rate schedule spans; an error naming
// `where` when it passes int64 (--epochs 9223372036854775807).
int64_t total_steps(int64_t epochs, int64_t batches_per_epoch, const char* where);

}  // namespace kiln::train
