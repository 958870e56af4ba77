// The trainer: Fashion-MNIST (or any MNIST-format directory), a model by name, SGD with
// momentum under a one-cycle schedule, evaluation per epoch, and checkpoints that resume exactly.
#include "tools/kiln/trainer.h"

#include <filesystem>

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

std::shared_ptr<data::DataLoader> make_loader(const std::string& root, bool train, int64_t batch, int64_t workers,
                                              uint64_t seed) {
  auto base = std::make_shared<const data::FashionMNIST>(root, train);
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
                                  .num_workers = workers, .prefetch = 2, .seed = seed});
}

// Torchvision's ImageNet models take 3-channel images of at least 32x32: grey 28x28 images are
// padded to 32x32 and repeated over three channels.
Tensor to_model_input(const Tensor& images, const std::string& model, Device device) {
  Tensor x = images.to(device);
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
  if (!options_.device.empty()) parse_device(options_.device);  // a bad --device before anything else
  KILN_CHECK(options_.epochs >= 1 && options_.batch_size >= 1, "kiln train", "epochs and batch size must be positive");
  KILN_CHECK(options_.lr > 0, "kiln train", "the learning rate must be positive, got ", options_.lr);
  const std::string ckpt = resume_path();
  if (options_.resume) {
    // The checkpoint decides the run's settings, so the schedule and data order continue exactly.
    auto f = io::load_checkpoint(ckpt);
    check_format(f, kFormat, ckpt);
    options_.model = meta(f, "model", ckpt);
    options_.epochs = meta_int(f, "epochs", ckpt);
    options_.batch_size = meta_int(f, "batch_size", ckpt);
    options_.lr = meta_double(f, "lr", ckpt);
    options_.momentum = meta_double(f, "momentum", ckpt);
    options_.weight_decay = meta_double(f, "weight_decay", ckpt);
    options_.seed = static_cast<uint64_t>(meta_int(f, "seed", ckpt));
  }
  const DeviceChoice choice = choose_device(options_.device, [&] { probe_step(options_.model); });
  device_ = choice.device;
  device_note_ = choice.note;
  manual_seed(options_.seed);
  model_ = models::create(options_.model, 10);
  model_->to(device_);
  train_loader_ = make_loader(options_.data, true, options_.batch_size, options_.workers, options_.seed);
  test_loader_ = make_loader(options_.data, false, 1000, options_.workers, options_.seed);
  optimizer_ = std::make_unique<optim::SGD>(
      model_->parameters(),
      optim::SGDOptions{.lr = options_.lr, .momentum = options_.momentum, .weight_decay = options_.weight_decay});
  scheduler_ = std::make_unique<optim::OneCycleLR>(
      *optimizer_, optim::OneCycleLROptions{.max_lr = options_.lr, .total_steps = options_.epochs * train_loader_->size()});
  if (options_.resume) resume();
}

Trainer::~Trainer() = default;

std::string Trainer::checkpoint_path() const { return (std::filesystem::path(options_.checkpoint_dir) / "last.safetensors").string(); }

void Trainer::save_checkpoint() {
  std::filesystem::create_directories(options_.checkpoint_dir);
  std::map<std::string, Tensor> t = prefixed(model_->state_dict(), "model.");
  for (auto& [k, v] : prefixed(optimizer_->state_dict(), "optimizer.")) t[k] = v;
  for (auto& [k, v] : prefixed(scheduler_->state_dict(), "scheduler.")) t[k] = v;
  const GeneratorState rng = get_rng_state();
  std::map<std::string, std::string> m{{"format", kFormat},
                                       {"model", options_.model},
                                       {"epochs", std::to_string(options_.epochs)},
                                       {"batch_size", std::to_string(options_.batch_size)},
                                       {"lr", std::to_string(options_.lr)},
                                       {"momentum", std::to_string(options_.momentum)},
                                       {"weight_decay", std::to_string(options_.weight_decay)},
                                       {"seed", std::to_string(options_.seed)},
                                       {"epoch", std::to_string(epoch_)},
                                       {"batch", std::to_string(batch_in_epoch_)},
                                       {"step", std::to_string(step_)},
                                       {"rng_seed", std::to_string(rng.seed)},
                                       {"rng_offset", std::to_string(rng.offset)}};
  io::save_checkpoint(checkpoint_path(), t, m);
}

void Trainer::resume() {
  const std::string path = resume_path();
  auto f = io::load_checkpoint(path);
  model_->load_state_dict(with_prefix(f.tensors, "model."));
  optimizer_->load_state_dict(with_prefix(f.tensors, "optimizer."));
  scheduler_->load_state_dict(with_prefix(f.tensors, "scheduler."));
  epoch_ = meta_int(f, "epoch", path);
  batch_in_epoch_ = meta_int(f, "batch", path);
  step_ = meta_int(f, "step", path);
  KILN_CHECK(epoch_ >= 0 && epoch_ <= options_.epochs && batch_in_epoch_ >= 0 &&
                 batch_in_epoch_ < train_loader_->size() && step_ == epoch_ * train_loader_->size() + batch_in_epoch_,
             "kiln train", "checkpoint ", path, " has an inconsistent position (epoch ", epoch_, ", batch ",
             batch_in_epoch_, ", step ", step_, ") for ", train_loader_->size(), " batches per epoch");
  set_rng_state({static_cast<uint64_t>(meta_int(f, "rng_seed", path)), static_cast<uint64_t>(meta_int(f, "rng_offset", path))});
}

void Trainer::fit(const Callbacks& cb) {
  const int64_t batches = train_loader_->size();
  while (epoch_ < options_.epochs) {
    if (options_.max_steps >= 0 && step_ >= options_.max_steps) return;
    model_->train();
    train_loader_->set_epoch(static_cast<uint64_t>(epoch_), batch_in_epoch_);
    for (data::Batch& batch : *train_loader_) {
      if (options_.max_steps >= 0 && step_ >= options_.max_steps) return;
      Tensor x = to_model_input(batch.data, options_.model, device_);
      Tensor y = batch.target.to(device_);
      Tensor loss = F::cross_entropy(model_(x), y);
      optimizer_->zero_grad();
      loss.backward();
      optimizer_->step();
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
    Tensor y = batch.target.to(device_);
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

EvalResult evaluate_checkpoint(const std::string& path, const std::string& data, const std::string& device) {
  return evaluate_restored<Trainer>(path, data, device);
}

}  // namespace kiln::train
