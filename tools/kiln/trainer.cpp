// The trainer: Fashion-MNIST (or any MNIST-format directory), a model by name, SGD with
// momentum under a one-cycle schedule, evaluation per epoch, and checkpoints that resume exactly.
#include "tools/kiln/trainer.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <optional>

#include "kiln/io.h"
#include "kiln/kiln.h"
#include "kiln/nn/functional.h"
#include "kiln/random.h"
#include "tools/kiln/checkpoint_util.h"
#include "tools/kiln/device_choice.h"

namespace kiln::train {
namespace {

namespace F = nn::functional;
constexpr const char* kFormat = "kiln-train-checkpoint-1";
// Fashion-MNIST's pixel mean and standard deviation (of pixel / 255 over the training set).
constexpr double kMean = 0.2860, kStd = 0.3530;

// Batches for a GPU are pinned (by the worker that makes them), so their copies are asynchronous.
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
  return std::make_shared<data::DataLoader>(
      ds, data::DataLoaderOptions{.batch_size = batch, .shuffle = train, .drop_last = false,
                                  .num_workers = workers, .prefetch = 2, .seed = seed, .pin_memory = device.is_cuda()});
}

// Torchvision's ImageNet models take 3-channel images of at least 32x32: grey 28x28 images are
// padded to 32x32 and repeated over three channels.
Tensor to_model_input(const Tensor& images, const std::string& model, Device device) {
  Tensor x = images.to(device, /*non_blocking=*/true);  // a pinned batch is never written again
  if (model == "small_cnn") return x;
  const int64_t n = x.size(0);
  Tensor padded = zeros({n, 1, 32, 32}, TensorOptions(x.dtype()).device(device));
  padded.narrow(2, 2, 28).narrow(3, 2, 28).copy_(x);
  return padded.expand({n, 3, 32, 32}).contiguous(MemoryFormat::ChannelsLast);
}

// One SGD step of a fresh `model` on two blank images, on the CPU: the ops the job dispatches.
void probe_step(const std::string& model) {
  auto m = models::create(model, 10);
  Tensor x = to_model_input(zeros({2, 1, 28, 28}), model, Device::cpu());
  F::cross_entropy(m(x), zeros({2}, kInt64)).backward();
  optim::SGD(m->parameters(), {.lr = 0.1, .momentum = 0.9, .weight_decay = 5e-4}).step();
  NoGradGuard ng;
  m->eval();
  argmax(m(x), 1).eq(zeros({2}, kInt64)).sum();
}

}  // namespace

Trainer::Trainer(TrainOptions options) : options_(std::move(options)) {
  if (!options_.device.empty()) parse_device(options_.device, where());  // a bad --device before anything else
  KILN_CHECK(options_.epochs >= 1 && options_.batch_size >= 1, where(), "epochs and batch size must be positive");
  KILN_CHECK(std::isfinite(options_.lr) && options_.lr > 0, where(), "the learning rate must be positive, got ",
             options_.lr);
  const std::string ckpt_path = resume_path();
  std::optional<io::SafetensorsFile> ckpt;
  if (options_.resume) {
    // The checkpoint decides the run's settings, so the schedule and data order continue exactly.
    ckpt = io::load_checkpoint(ckpt_path, options_.verify_checkpoint);
    const CheckpointMeta m(*ckpt, ckpt_path, options_.command);
    m.check_format(kFormat);
    options_.model = m.text("model");
    options_.epochs = m.integer("epochs");
    options_.batch_size = m.integer("batch_size");
    options_.lr = m.number("lr");
    options_.momentum = m.number("momentum");
    options_.weight_decay = m.number("weight_decay");
    options_.seed = static_cast<uint64_t>(m.integer("seed"));
    options_.amp = ckpt->metadata.count("amp") ? m.text("amp") : "off";  // older checkpoints: float32
  }
  amp_ = std::make_unique<MixedPrecision>(options_.amp, where());
  const auto& names = models::model_names();
  if (std::find(names.begin(), names.end(), options_.model) == names.end())
    models::create(options_.model, 10);  // the unknown-model error, before the data is read
  auto train_set = std::make_shared<const data::FashionMNIST>(options_.data, true);
  auto test_set = std::make_shared<const data::FashionMNIST>(options_.data, false);
  if (options_.batch_size > train_set->size()) {
    notes_.push_back("--batch-size " + std::to_string(options_.batch_size) + " is more than the " +
                     std::to_string(train_set->size()) + " training images; using " + std::to_string(train_set->size()));
    options_.batch_size = train_set->size();
  }
  const DeviceChoice choice = choose_device(options_.device, [&] { probe_step(options_.model); });
  device_ = choice.device;
  device_note_ = choice.note;
  manual_seed(options_.seed);
  model_ = models::create(options_.model, 10);
  model_->to(device_);
  train_loader_ = make_loader(train_set, true, options_.batch_size, options_.workers, options_.seed, device_);
  test_loader_ = make_loader(test_set, false, 1000, options_.workers, options_.seed, device_);
  optimizer_ = std::make_unique<optim::SGD>(
      model_->parameters(),
      optim::SGDOptions{.lr = options_.lr, .momentum = options_.momentum, .weight_decay = options_.weight_decay});
  scheduler_ = std::make_unique<optim::OneCycleLR>(
      *optimizer_, optim::OneCycleLROptions{.max_lr = options_.lr, .total_steps = options_.epochs * train_loader_->size()});
  if (ckpt) resume(*ckpt, ckpt_path);
}

Trainer::~Trainer() = default;

std::string Trainer::checkpoint_path() const { return (std::filesystem::path(options_.checkpoint_dir) / "last.safetensors").string(); }

void Trainer::save_checkpoint() {
  check_checkpoint_dir(options_.checkpoint_dir, where());
  std::map<std::string, Tensor> t = prefixed(model_->state_dict(), "model.");
  for (auto& [k, v] : prefixed(optimizer_->state_dict(), "optimizer.")) t[k] = v;
  for (auto& [k, v] : prefixed(scheduler_->state_dict(), "scheduler.")) t[k] = v;
  for (auto& [k, v] : amp_->state_dict()) t[k] = v;
  const GeneratorState rng = get_rng_state();
  std::map<std::string, std::string> m{{"format", kFormat},
                                       {"model", options_.model},
                                       {"epochs", std::to_string(options_.epochs)},
                                       {"batch_size", std::to_string(options_.batch_size)},
                                       {"lr", exact_number(options_.lr)},
                                       {"momentum", exact_number(options_.momentum)},
                                       {"weight_decay", exact_number(options_.weight_decay)},
                                       {"seed", std::to_string(options_.seed)},
                                       {"amp", amp_->mode()},
                                       {"epoch", std::to_string(epoch_)},
                                       {"batch", std::to_string(batch_in_epoch_)},
                                       {"step", std::to_string(step_)},
                                       {"rng_seed", std::to_string(rng.seed)},
                                       {"rng_offset", std::to_string(rng.offset)}};
  io::save_checkpoint(checkpoint_path(), t, m);
  saved_step_ = step_;
}

void Trainer::resume(const io::SafetensorsFile& f, const std::string& path) {
  const CheckpointMeta m(f, path, options_.command);
  model_->load_state_dict(with_prefix(f.tensors, "model."));
  optimizer_->load_state_dict(with_prefix(f.tensors, "optimizer."));
  scheduler_->load_state_dict(with_prefix(f.tensors, "scheduler."));
  amp_->load_state_dict(f.tensors);
  epoch_ = m.integer("epoch");
  batch_in_epoch_ = m.integer("batch");
  step_ = m.integer("step");
  saved_step_ = step_;
  KILN_CHECK(epoch_ >= 0 && epoch_ <= options_.epochs && batch_in_epoch_ >= 0 &&
                 batch_in_epoch_ < train_loader_->size() && step_ == epoch_ * train_loader_->size() + batch_in_epoch_,
             where(), "checkpoint ", path, " has an inconsistent position (epoch ", epoch_, ", batch ",
             batch_in_epoch_, ", step ", step_, ") for ", train_loader_->size(), " batches per epoch");
  set_rng_state({static_cast<uint64_t>(m.integer("rng_seed")), static_cast<uint64_t>(m.integer("rng_offset"))});
}

void Trainer::fit(const Callbacks& cb) {
  check_checkpoint_dir(options_.checkpoint_dir, where());  // before any training time is spent
  const int64_t batches = train_loader_->size();
  // Stopping at --max-steps saves where it stopped, so the checkpoint named exists and resumes.
  auto stop = [&] {
    if (options_.max_steps < 0 || step_ < options_.max_steps) return false;
    if (saved_step_ != step_) save_checkpoint();
    return true;
  };
  while (epoch_ < options_.epochs) {
    if (stop()) return;
    model_->train();
    train_loader_->set_epoch(static_cast<uint64_t>(epoch_), batch_in_epoch_);
    for (data::Batch& batch : *train_loader_) {
      if (stop()) return;
      Tensor x = to_model_input(batch.data, options_.model, device_);
      Tensor y = batch.target.to(device_, /*non_blocking=*/true);
      Tensor loss = amp_->forward([&] { return F::cross_entropy(model_(x), y); });
      optimizer_->zero_grad();
      amp_->backward_and_step(loss, *optimizer_);
      scheduler_->step();
      ++step_;
      batch_in_epoch_ = batch.index + 1;
      if (cb.on_step) cb.on_step({epoch_, batch.index, batches, step_, loss.item<double>(), batch.data.size(0)});
      if (batch_in_epoch_ < batches && options_.checkpoint_every > 0 && step_ % options_.checkpoint_every == 0)
        save_checkpoint();
    }
    ++epoch_;
    batch_in_epoch_ = 0;
    EvalResult r = evaluate();
    save_checkpoint();
    if (cb.on_epoch) cb.on_epoch(epoch_, r);
  }
}

EvalResult Trainer::evaluate() {
  NoGradGuard ng;
  const bool was_training = model_->is_training();
  model_->eval();
  EvalResult r;
  double loss_sum = 0;
  int64_t correct = 0;
  for (data::Batch& batch : *test_loader_) {
    Tensor logits = model_(to_model_input(batch.data, options_.model, device_));
    Tensor y = batch.target.to(device_, /*non_blocking=*/true);
    loss_sum += F::cross_entropy(logits, y, {.reduction = Reduction::Sum}).item<double>();
    correct += argmax(logits, 1).eq(y).sum().item<int64_t>();
    r.samples += batch.data.size(0);
  }
  model_->train(was_training);
  if (r.samples > 0) {
    r.loss = loss_sum / static_cast<double>(r.samples);
    r.accuracy = static_cast<double>(correct) / static_cast<double>(r.samples);
  }
  return r;
}

EvalResult evaluate_checkpoint(const std::string& path, const std::string& data, const std::string& device,
                               bool verify) {
  return evaluate_restored<Trainer>(path, data, device, verify);
}

}  // namespace kiln::train
