// The image-classification trainer behind `kiln train` and `kiln eval`: data, model, SGD with a
// one-cycle schedule, per-epoch evaluation, and exact checkpoint/resume.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "kiln/data.h"
#include "kiln/io.h"
#include "kiln/models.h"
#include "kiln/optim.h"
#include "tools/kiln/mixed_precision.h"

namespace kiln::train {

struct TrainOptions {
  std::string model = "small_cnn";
  int64_t epochs = 3;
  int64_t batch_size = 128;
  double lr = 0.1;  // the one-cycle schedule's peak
  double momentum = 0.9;
  double weight_decay = 5e-4;
  std::string device;  // empty: the best device present
  std::string data = "/usr/share/datasets/fashion-mnist";
  uint64_t seed = 0;
  std::string checkpoint_dir = "checkpoints";
  bool resume = false;
  std::string resume_from;       // the checkpoint file to resume from (default: checkpoint_dir's)
  int64_t checkpoint_every = 0;  // also save every N steps (0: at the end of each epoch only)
  int64_t workers = 2;           // data-loading threads
  int64_t max_steps = -1;        // stop after this many steps in total (a checkpoint is saved there)
  bool verify_checkpoint = true;  // check the checksum of the checkpoint resumed from
  std::string amp;                // --amp: "", "bf16" or "fp16" (autocast, and a GradScaler for fp16)
  std::string command = "kiln train";  // names the command in errors
};

struct StepInfo {
  int64_t epoch, batch, batches, step;
  double loss;
  int64_t samples;
};

struct EvalResult {
  double loss = 0, accuracy = 0;
  int64_t samples = 0;
};

// Called after every step and after every epoch's evaluation.
struct Callbacks {
  std::function<void(const StepInfo&)> on_step;
  std::function<void(int64_t epoch, const EvalResult&)> on_epoch;
};

class Trainer {
 public:
  // Builds everything; with options.resume, restores the last checkpoint in checkpoint_dir.
  explicit Trainer(TrainOptions options);
  ~Trainer();
  // Trains the remaining epochs, evaluating and checkpointing after each.
  void fit(const Callbacks& callbacks = {});
  EvalResult evaluate();
  const TrainOptions& options() const { return options_; }
  int64_t epoch() const { return epoch_; }  // completed epochs
  int64_t step() const { return step_; }    // completed steps
  Device device() const { return device_; }
  // Why a present GPU was not chosen (for the first line), or empty.
  const std::string& device_note() const { return device_note_; }
  // Settings changed on the way (a batch larger than the data set), one line each.
  const std::vector<std::string>& notes() const { return notes_; }
  std::string checkpoint_path() const;
  void save_checkpoint();

 private:
  void resume(const io::SafetensorsFile& f, const std::string& path);
  const char* where() const { return options_.command.c_str(); }
  std::string resume_path() const { return options_.resume_from.empty() ? checkpoint_path() : options_.resume_from; }
  Tensor prepare(const Tensor& images) const;

  TrainOptions options_;
  Device device_;
  std::string device_note_;
  std::vector<std::string> notes_;
  std::shared_ptr<data::DataLoader> train_loader_, test_loader_;
  nn::AnyModule model_;
  std::unique_ptr<optim::SGD> optimizer_;
  std::unique_ptr<MixedPrecision> amp_;
  std::unique_ptr<optim::OneCycleLR> scheduler_;
  int64_t epoch_ = 0, step_ = 0, batch_in_epoch_ = 0;
  int64_t saved_step_ = -1;  // the step of the last checkpoint written
};

// Evaluates a checkpoint written by Trainer on the test split in `data`.
EvalResult evaluate_checkpoint(const std::string& path, const std::string& data, const std::string& device,
                               bool verify = true);

}  // namespace kiln::train
