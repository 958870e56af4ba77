// The training loop every task shares: setting up (a checkpoint's settings, the device, the
// seed), steps under mixed precision, evaluation, atomic checkpoints and their exact resume.
#include "kiln/train/trainer.h"

#include <cmath>
#include <filesystem>
#include <optional>

#include "kiln/autograd.h"
#include "kiln/cuda.h"
#include "kiln/distributed.h"
#include "kiln/error.h"
#include "kiln/io.h"
#include "kiln/random.h"
#include "kiln/train/device_choice.h"

namespace kiln::train {
namespace {

// end_epoch() on every way out of an epoch: a data loader's workers stop even when a step throws.
class EpochScope {
 public:
  EpochScope(Task& task, int64_t epoch, int64_t first_batch) : task_(task) { task_.begin_epoch(epoch, first_batch); }
  ~EpochScope() { task_.end_epoch(); }
  EpochScope(const EpochScope&) = delete;
  EpochScope& operator=(const EpochScope&) = delete;

 private:
  Task& task_;
};

// The key of the training steps' random numbers: seed ^ kStepStream.
constexpr uint64_t kStepStream = 0xD1B54A32D192ED03ULL;

}  // namespace

void check_training_numbers(int64_t epochs, int64_t batch_size, double lr, double weight_decay, const char* where) {
  KILN_CHECK(epochs >= 1, where, "--epochs must be at least 1, got ", epochs);
  KILN_CHECK(batch_size >= 1, where, "--batch-size must be at least 1, got ", batch_size);
  KILN_CHECK(std::isfinite(lr) && lr > 0, where, "--lr must be positive, got ", lr);
  KILN_CHECK(std::isfinite(weight_decay) && weight_decay >= 0, where, "--weight-decay must be >= 0, got ",
             weight_decay);
}

Trainer::Trainer(Task& task) : task_(task) {
  TrainerOptions& o = task_.options();
  if (!o.device.empty()) parse_device(o.device, where());  // a bad --device before anything else
  task_.check_options();
  const std::string ckpt_path = o.resume_from.empty() ? checkpoint_path() : o.resume_from;
  std::optional<io::SafetensorsFile> ckpt;
  if (o.resume) {
    // The checkpoint decides the run's settings, so the schedule and data order continue exactly.
    ckpt = io::load_checkpoint(ckpt_path, o.verify_checkpoint);
    const CheckpointMeta m(*ckpt, ckpt_path, o.command);
    m.check_format(task_.checkpoint_format());
    task_.load_settings(m);
    o.amp = m.has("amp") ? m.text("amp") : "off";  // older checkpoints: float32
    // The run's periodic saves go on (a resumed run saved at epoch ends only), unless set again.
    if (o.checkpoint_every == 0 && m.has("checkpoint_every")) o.checkpoint_every = m.integer("checkpoint_every");
  }
  amp_ = std::make_unique<MixedPrecision>(o.amp, where());
  task_.prepare(notes_);
  const DeviceChoice choice = choose_device(o.device, [&] { amp_->autocast([&] { task_.probe_step(); }); });
  device_ = choice.device;
  device_note_ = choice.note;
  const int world = distributed::world_size();
  if (world > 1 && device_.is_cuda() && cuda::device_count() > 0)  // each process its own GPU
    device_ = Device::cuda(distributed::local_rank() % cuda::device_count());
  // And that GPU current in this thread: work Kiln does on it then never touches another GPU
  // (restoring device 0 after each op would make a context there in every process).
  if (device_.is_cuda()) cuda::set_device(device_.index);
  manual_seed(o.seed);
  task_.build(device_);
  if (ckpt) resume(*ckpt, ckpt_path);
  // The loop keeps no gradient across steps: each .grad() may be its bucket's view (no copy).
  if (world > 1)
    ddp_ = std::make_unique<nn::parallel::DistributedDataParallel>(
        task_.module().shared_from_this(), nn::parallel::DistributedDataParallelOptions{.gradient_as_bucket_view = true});
}

Trainer::~Trainer() = default;

std::string Trainer::checkpoint_path() const {
  return (std::filesystem::path(options().checkpoint_dir) / "last.safetensors").string();
}

void Trainer::save_checkpoint() {
  saved_step_ = step_;
  if (distributed::rank() != 0) return;  // every process holds the same model: rank 0 writes it
  check_checkpoint_dir(options().checkpoint_dir, where());
  std::map<std::string, Tensor> t = prefixed(task_.module().state_dict(), "model.");
  for (auto& [k, v] : prefixed(task_.optimizer().state_dict(), "optimizer.")) t[k] = v;
  for (auto& [k, v] : prefixed(task_.scheduler().state_dict(), "scheduler.")) t[k] = v;
  for (auto& [k, v] : amp_->state_dict()) t[k] = v;
  std::map<std::string, std::string> m;
  task_.save_metadata(m);
  m["format"] = task_.checkpoint_format();
  m["amp"] = amp_->mode();
  m["checkpoint_every"] = std::to_string(options().checkpoint_every);
  m["epoch"] = std::to_string(epoch_);
  m["batch"] = std::to_string(batch_in_epoch_);
  m["step"] = std::to_string(step_);
  m["world_size"] = std::to_string(distributed::world_size());
  io::save_checkpoint(checkpoint_path(), t, m);
  task_.checkpoint_saved(options().checkpoint_dir);
}

void Trainer::resume(const io::SafetensorsFile& f, const std::string& path) {
  const CheckpointMeta m(f, path, options().command);
  // A missing or unexpected entry names the checkpoint: "[kiln train] checkpoint <path>: missing keys: ...".
  auto naming_it = [&](auto&& load) { detail::naming(where(), "checkpoint " + path, load); };
  naming_it([&] { task_.module().load_state_dict(with_prefix(f.tensors, "model.")); });
  // Evaluation needs the weights alone: not the position in the training data, which depends on
  // that data and on the number of processes the checkpoint was written by.
  if (options().evaluate_only) return;
  // The data each process saw depends on the number of processes: continuing exactly needs the same.
  const int64_t written_by = m.has("world_size") ? m.integer("world_size") : 1;
  KILN_CHECK(written_by == distributed::world_size(), where(), "checkpoint ", path, " was written by a job of ",
             written_by, " process(es); resume it with as many (this job has ", distributed::world_size(), ")");
  naming_it([&] {
    task_.optimizer().load_state_dict(with_prefix(f.tensors, "optimizer."));
    task_.scheduler().load_state_dict(with_prefix(f.tensors, "scheduler."));
    amp_->load_state_dict(f.tensors);
  });
  epoch_ = m.integer("epoch");
  batch_in_epoch_ = m.integer("batch");
  step_ = m.integer("step");
  saved_step_ = step_;
  task_.load_state(m);  // first: a task's own check (its data) says more than the position's
  const int64_t batches = task_.batches_per_epoch();
  KILN_CHECK(epoch_ >= 0 && epoch_ <= options().epochs && batch_in_epoch_ >= 0 && batch_in_epoch_ < batches &&
                 step_ == epoch_ * batches + batch_in_epoch_,
             where(), "checkpoint ", path, " has an inconsistent position (epoch ", epoch_, ", batch ",
             batch_in_epoch_, ", step ", step_, ") for ", batches, " batches per epoch");
}

void Trainer::train_step(const Callbacks& cb) {
  // Each step draws its random numbers (dropout) from 2^40 counters of its own, found from its
  // step_in_run: a resumed run, and each process of a data-parallel one, draws what the
  // uninterrupted run did, whatever the shapes of the batches before (a running offset, which
  // batches of other lengths move by other amounts, is only rank 0's in a checkpoint), and the
  // processes' dropout masks differ. A key of its own: the seed's stream made the initial weights.
  const uint64_t draw = step_in_run(step_);
  set_rng_state({options().seed ^ kStepStream ^ (draw >> 24), draw << 40});
  TrainingBatch batch = task_.next_batch();
  optim::Optimizer& optimizer = task_.optimizer();
  if (ddp_ && !batch.loss)
    // Every process must take part in every gradient average: a batch with nothing to learn
    // from contributes zero gradients (its process still steps, with the others' average).
    batch.loss = [this] {
      Tensor zero = zeros({}, TensorOptions().device(device_));
      for (const Tensor& p : task_.module().parameters())
        if (p.requires_grad()) zero = zero + p.sum() * 0.0;
      return zero;
    };
  Tensor loss;
  if (batch.loss) {
    loss = amp_->forward(ddp_ ? std::function<Tensor()>([&] { return ddp_->forward_with(batch.loss); }) : batch.loss);
    optimizer.zero_grad();
    amp_->backward_and_step(loss, optimizer, [&] { task_.before_optimizer_step(); });
  }
  const double lr = optimizer.param_groups()[0].get("lr");
  task_.scheduler().step();
  ++step_;
  const int64_t index = batch_in_epoch_++;
  if (cb.on_step)
    cb.on_step({epoch_, index, task_.batches_per_epoch(), step_, loss.defined() ? loss.detach() : Tensor(), lr,
                batch.samples});
}

void Trainer::fit(const Callbacks& cb) {
  const TrainerOptions& o = options();
  KILN_CHECK(!o.evaluate_only, where(), "this trainer was set up to evaluate only (TrainerOptions::evaluate_only)");
  if (distributed::rank() == 0) check_checkpoint_dir(o.checkpoint_dir, where());  // before any training time is spent
  const int64_t batches = task_.batches_per_epoch();
  const int64_t start_step = step_;
  const auto limit_hit = [&] { return o.max_steps >= 0 && step_ >= o.max_steps; };
  if (step_ == 0 && cb.on_eval) cb.on_eval(0, evaluate());
  while (epoch_ < o.epochs && !limit_hit()) {
    task_.module().train();
    {
      EpochScope scope(task_, epoch_, batch_in_epoch_);
      while (batch_in_epoch_ < batches && !limit_hit()) {
        train_step(cb);
        const bool mid_epoch = batch_in_epoch_ < batches;  // else the epoch's own evaluation follows
        if (mid_epoch && o.eval_every > 0 && step_ % o.eval_every == 0) {
          EvalResult r = evaluate();
          if (cb.on_eval) cb.on_eval(step_, r);
          save_checkpoint();
        } else if (mid_epoch && o.checkpoint_every > 0 && step_ % o.checkpoint_every == 0) {
          save_checkpoint();
        }
      }
    }
    if (batch_in_epoch_ < batches) break;  // stopped by max_steps
    ++epoch_;
    batch_in_epoch_ = 0;
    EvalResult r = evaluate();
    save_checkpoint();
    if (cb.on_eval) cb.on_eval(step_, r);
    if (cb.on_epoch) cb.on_epoch(epoch_, r);
  }
  // Stopped by max_steps between saves: save there, so the checkpoint named exists and resumes.
  const bool stepped = step_ != start_step || task_.checkpoints_untrained_model();
  if (limit_hit() && stepped && saved_step_ != step_) save_checkpoint();
}

EvalResult Trainer::evaluate() {
  NoGradGuard ng;
  nn::Module& model = task_.module();
  const bool was_training = model.is_training();
  model.eval();
  EvalResult r;
  amp_->autocast([&] { r = task_.evaluate(); });
  model.train(was_training);
  if (distributed::world_size() > 1) {
    // Each process measured its share: sums over all of them, then the means again.
    Tensor sums = tensor({r.loss * static_cast<double>(r.samples), r.accuracy * static_cast<double>(r.samples),
                          static_cast<double>(r.samples), r.perplexity > 0 ? 1.0 : 0.0},
                         kFloat64);
    distributed::all_reduce(sums);
    const std::vector<double> v = sums.to_vector<double>();
    r.samples = static_cast<int64_t>(std::llround(v[2]));
    r.loss = r.samples > 0 ? v[0] / v[2] : 0;
    r.accuracy = r.samples > 0 ? std::round(v[1]) / v[2] : 0;  // correct counts are whole
    r.perplexity = v[3] > 0 && r.samples > 0 ? std::exp(r.loss) : 0;  // a task that has perplexity
  }
  return r;
}

EvalResult evaluate_checkpoint(Task& task, const std::string& path, const std::string& device, bool verify) {
  KILN_CHECK(std::filesystem::is_regular_file(path), "kiln eval", "no checkpoint file at '", path, "'");
  TrainerOptions& o = task.options();
  o.command = "kiln eval";
  o.evaluate_only = true;
  o.resume = true;
  o.resume_from = path;
  o.verify_checkpoint = verify;
  o.device = device;
  return Trainer(task).evaluate();
}

uint64_t step_in_run(int64_t step) {
  return static_cast<uint64_t>(step) * static_cast<uint64_t>(distributed::world_size()) +
         static_cast<uint64_t>(distributed::rank());
}

int64_t total_steps(int64_t epochs, int64_t batches_per_epoch, const char* where) {
  int64_t total = 0;
  KILN_CHECK(!__builtin_mul_overflow(epochs, batches_per_epoch, &total), where, epochs, " epochs of ",
             batches_per_epoch, " batches are more steps than a schedule can count");
  return total;
}

}  // namespace kiln::train
