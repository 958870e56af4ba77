// The image-classification task: Fashion-MNIST (or any MNIST-format directory), a model by name,
// SGD with momentum under a one-cycle schedule, test loss and accuracy.
#include "kiln/train/image_classification.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "kiln/autograd.h"
#include "kiln/data/mnist.h"
#include "kiln/data/sampler.h"
#include "kiln/distributed.h"
#include "kiln/data/transforms.h"
#include "kiln/error.h"
#include "kiln/models/registry.h"
#include "kiln/nn/functional.h"
#include "kiln/ops.h"

namespace kiln::train {
namespace {

namespace F = nn::functional;
constexpr const char* kFormat = "kiln-train-checkpoint-1";
// Fashion-MNIST's pixel mean and standard deviation (of pixel / 255 over the training set).
constexpr double kMean = 0.2860, kStd = 0.3530;
constexpr int64_t kClasses = 10;

// Batches for a GPU are pinned (by the worker that makes them), so their copies are asynchronous.
// With several processes each loads its share: training shares padded to equal length (every
// process steps alike), test shares with each image once.
std::shared_ptr<data::DataLoader> make_loader(std::shared_ptr<const data::Dataset> base, bool train, int64_t batch,
                                              int64_t workers, uint64_t seed, Device device) {
  std::vector<data::Transform> tf{[](const Tensor& x, data::SampleGenerator& g) {
    return data::transforms::Normalize({kMean}, {kStd})(x, g);
  }};
  if (train)
    tf.insert(tf.begin(), [](const Tensor& x, data::SampleGenerator& g) {
      return data::transforms::RandomHorizontalFlip(0.5)(x, g);
    });
  auto ds = std::make_shared<const data::TransformDataset>(base, std::move(tf));
  std::shared_ptr<const data::Sampler> sampler;
  if (distributed::world_size() > 1)
    sampler = std::make_shared<data::DistributedSampler>(
        ds->size(), data::DistributedSamplerOptions{.shuffle = train, .seed = seed, .pad = train});
  return std::make_shared<data::DataLoader>(
      ds, data::DataLoaderOptions{.batch_size = batch, .shuffle = train && !sampler, .drop_last = false,
                                  .num_workers = workers, .prefetch = 2, .seed = seed, .pin_memory = device.is_cuda(),
                                  .sampler = sampler});
}

// Torchvision's ImageNet models take 3-channel images of at least 32x32: grey 28x28 images are
// padded to 32x32 and repeated over three channels.
Tensor model_input(const Tensor& images, const std::string& model, Device device) {
  Tensor x = images.to(device, /*non_blocking=*/true);  // a pinned batch is never written again
  if (model == "small_cnn") return x;
  const int64_t n = x.size(0);
  Tensor padded = zeros({n, 1, 32, 32}, TensorOptions(x.dtype()).device(device));
  padded.narrow(2, 2, 28).narrow(3, 2, 28).copy_(x);
  return padded.expand({n, 3, 32, 32}).contiguous(MemoryFormat::ChannelsLast);
}

}  // namespace

ImageClassification::ImageClassification(ImageClassificationOptions options) : options_(std::move(options)) {}

ImageClassification::~ImageClassification() = default;

std::string ImageClassification::checkpoint_format() const { return kFormat; }

void ImageClassification::check_options() {
  const char* where = options_.command.c_str();
  check_training_numbers(options_.epochs, options_.batch_size, options_.lr, options_.weight_decay, where);
  // The one-cycle schedule moves momentum between 0.85/0.95 of it and it: 1 or more diverges.
  KILN_CHECK(options_.momentum >= 0 && options_.momentum < 1, where, "--momentum must be in [0, 1), got ",
             options_.momentum);
}

void ImageClassification::load_settings(const CheckpointMeta& m) {
  options_.model = m.text("model");
  if (options_.data.empty()) options_.data = m.has("data") ? m.text("data") : ImageClassificationOptions{}.data;
  options_.epochs = m.integer("epochs");
  options_.batch_size = m.integer("batch_size");
  options_.lr = m.number("lr");
  options_.momentum = m.number("momentum");
  options_.weight_decay = m.number("weight_decay");
  options_.seed = m.unsigned_integer("seed");
}

void ImageClassification::save_metadata(std::map<std::string, std::string>& m) const {
  m["model"] = options_.model;
  m["epochs"] = std::to_string(options_.epochs);
  m["batch_size"] = std::to_string(options_.batch_size);
  m["lr"] = exact_number(options_.lr);
  m["momentum"] = exact_number(options_.momentum);
  m["weight_decay"] = exact_number(options_.weight_decay);
  m["seed"] = std::to_string(options_.seed);
  m["data"] = std::filesystem::absolute(options_.data).string();  // kiln eval from another directory finds it
  m["train_images"] = std::to_string(train_set_->size());
}

// The position continues in the same training set: a directory of another size is refused
// (one of the same size cannot be told apart).
void ImageClassification::load_state(const CheckpointMeta& m) {
  if (!m.has("train_images")) return;  // older checkpoints
  const int64_t saved = m.integer("train_images");
  KILN_CHECK(saved == train_set_->size(), options_.command.c_str(), "the checkpoint was written for ", saved,
             " training images, but ", options_.data, " has ", train_set_->size());
}

void ImageClassification::prepare(std::vector<std::string>& notes) {
  const auto& names = models::model_names();
  if (std::find(names.begin(), names.end(), options_.model) == names.end())
    models::create(options_.model, kClasses);  // the unknown-model error, before the data is read
  // kiln eval reads the test split alone (a directory may hold only the t10k files).
  if (!options_.evaluate_only) train_set_ = std::make_shared<const data::FashionMNIST>(options_.data, true);
  test_set_ = std::make_shared<const data::FashionMNIST>(options_.data, false);
  if (options_.evaluate_only) return;
  KILN_CHECK(train_set_->size() > 0, options_.command.c_str(), "the training split in ", options_.data,
             " has no images");
  if (options_.batch_size > train_set_->size()) {
    notes.push_back("--batch-size " + std::to_string(options_.batch_size) + " is more than the " +
                    std::to_string(train_set_->size()) + " training images; using " + std::to_string(train_set_->size()));
    options_.batch_size = train_set_->size();
  }
}

// One SGD step of a fresh model on two blank images, and its evaluation: the ops the job dispatches.
void ImageClassification::probe_step() {
  auto m = models::create(options_.model, kClasses);
  Tensor x = model_input(zeros({2, 1, 28, 28}), options_.model, Device::cpu());
  F::cross_entropy(m(x), zeros({2}, kInt64)).backward();
  optim::SGD(m->parameters(), {.lr = 0.1, .momentum = 0.9, .weight_decay = 5e-4}).step();
  NoGradGuard ng;
  m->eval();
  argmax(m(x), 1).eq(zeros({2}, kInt64)).sum();
}

void ImageClassification::build(Device device) {
  device_ = device;
  model_ = models::create(options_.model, kClasses);
  model_->to(MemoryFormat::ChannelsLast);  // the activations' layout, as PyTorch's channels-last recipe
  model_->to(device_);                     // (which keeps it: laid out once, on the host)
  test_loader_ = make_loader(test_set_, false, 1000, options_.workers, options_.seed, device_);
  if (options_.evaluate_only) return;
  train_loader_ = make_loader(train_set_, true, options_.batch_size, options_.workers, options_.seed, device_);
  optimizer_ = std::make_unique<optim::SGD>(
      model_->parameters(),
      optim::SGDOptions{.lr = options_.lr, .momentum = options_.momentum, .weight_decay = options_.weight_decay});
  scheduler_ = std::make_unique<optim::OneCycleLR>(
      *optimizer_, optim::OneCycleLROptions{.max_lr = options_.lr,
                                            .total_steps = total_steps(options_.epochs, train_loader_->size(), "ImageClassification"),
                                            .base_momentum = options_.momentum * (0.85 / 0.95),
                                            .max_momentum = options_.momentum});
}

Tensor ImageClassification::to_model_input(const Tensor& images) const {
  return model_input(images, options_.model, device_);
}

void ImageClassification::begin_epoch(int64_t epoch, int64_t first_batch) {
  train_loader_->set_epoch(static_cast<uint64_t>(epoch), first_batch);
  batches_ = train_loader_->begin();
  advance_ = false;
}

TrainingBatch ImageClassification::next_batch() {
  // The iterator moves on only now, so the workers make the next batch while this one trains.
  if (advance_) ++batches_;
  advance_ = true;
  const data::Batch& batch = *batches_;
  Tensor x = to_model_input(batch.data);
  Tensor y = batch.target.to(device_, /*non_blocking=*/true);
  return {[this, x, y] { return F::cross_entropy(model_(x), y); }, batch.data.size(0)};
}

void ImageClassification::end_epoch() { batches_ = data::DataLoader::Iterator(); }  // stops the workers

EvalResult ImageClassification::evaluate() {
  EvalResult r;
  double loss_sum = 0;
  int64_t correct = 0;
  for (data::Batch& batch : *test_loader_) {
    Tensor logits = model_(to_model_input(batch.data));
    Tensor y = batch.target.to(device_, /*non_blocking=*/true);
    loss_sum += F::cross_entropy(logits, y, {.reduction = Reduction::Sum}).item<double>();
    correct += argmax(logits, 1).eq(y).sum().item<int64_t>();
    r.samples += batch.data.size(0);
  }
  if (r.samples > 0) {
    r.loss = loss_sum / static_cast<double>(r.samples);
    r.accuracy = static_cast<double>(correct) / static_cast<double>(r.samples);
  }
  return r;
}

EvalResult evaluate_checkpoint(const std::string& path, const std::string& data, const std::string& device,
                               bool verify) {
  ImageClassificationOptions o;
  o.data = data;
  ImageClassification task(o);
  return evaluate_checkpoint(task, path, device, verify);
}

}  // namespace kiln::train
