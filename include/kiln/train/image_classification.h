// The image-classification task behind `kiln train` and `kiln eval`: Fashion-MNIST (or any
// MNIST-format directory), a model by name, SGD with momentum under a one-cycle schedule, and
// test loss and accuracy per epoch.
//
//   train::ImageClassificationOptions o;
//   o.data = "/usr/share/datasets/fashion-mnist";
//   train::ImageClassification task(o);
//   train::Trainer trainer(task);
//   trainer.fit({.on_epoch = [](int64_t epoch, const train::EvalResult& r) { ... r.accuracy ... }});
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "kiln/data/dataloader.h"
#include "kiln/nn/container.h"
#include "kiln/optim/lr_scheduler.h"
#include "kiln/optim/sgd.h"
#include "kiln/train/trainer.h"

namespace kiln::train {

struct ImageClassificationOptions : TrainerOptions {
  std::string model = "small_cnn";  // a models::create name
  int64_t batch_size = 128;
  double lr = 0.1;  // the one-cycle schedule's peak
  // The top of the one-cycle schedule's momentum, which falls to momentum * (0.85 / 0.95) as the lr
  // peaks (PyTorch's OneCycleLR cycles 0.95 to 0.85); 0: no momentum.
  double momentum = 0.95;
  double weight_decay = 5e-4;
  std::string data = "/usr/share/datasets/fashion-mnist";  // empty when resuming: the checkpoint's
  int64_t workers = 2;  // data-loading threads
};

class ImageClassification : public Task {
 public:
  explicit ImageClassification(ImageClassificationOptions options);
  ~ImageClassification() override;

  // The settings the run uses (a checkpoint's when resumed; a batch size capped to the data).
  ImageClassificationOptions& options() override { return options_; }
  const ImageClassificationOptions& options() const { return options_; }
  nn::AnyModule& model() { return model_; }

  std::string checkpoint_format() const override;
  void check_options() override;
  void load_settings(const CheckpointMeta& checkpoint) override;
  void prepare(std::vector<std::string>& notes) override;
  void probe_step() override;
  void build(Device device) override;
  nn::Module& module() override { return *model_; }
  optim::Optimizer& optimizer() override { return *optimizer_; }
  optim::LRScheduler& scheduler() override { return *scheduler_; }
  int64_t batches_per_epoch() const override { return train_loader_->size(); }
  void begin_epoch(int64_t epoch, int64_t first_batch) override;
  TrainingBatch next_batch() override;
  void end_epoch() override;
  EvalResult evaluate() override;
  void save_metadata(std::map<std::string, std::string>& metadata) const override;
  void load_state(const CheckpointMeta& checkpoint) override;
  // Stopping at max_steps 0 saves the initial model, so kiln eval can score it.
  bool checkpoints_untrained_model() const override { return true; }

 private:
  Tensor to_model_input(const Tensor& images) const;

  ImageClassificationOptions options_;
  Device device_;
  std::shared_ptr<const data::Dataset> train_set_, test_set_;
  std::shared_ptr<data::DataLoader> train_loader_, test_loader_;
  data::DataLoader::Iterator batches_;  // at the epoch's latest training batch
  bool advance_ = false;                // whether next_batch() moves it on first
  nn::AnyModule model_;
  std::unique_ptr<optim::SGD> optimizer_;
  std::unique_ptr<optim::OneCycleLR> scheduler_;
};

// Evaluates a checkpoint written by an ImageClassification run on the test split in `data`
// (empty: the checkpoint's own data; the default directory for checkpoints that have none).
EvalResult evaluate_checkpoint(const std::string& path, const std::string& data, const std::string& device,
                               bool verify = true);

}  // namespace kiln::train
