// The MLM trainer: corpus -> WordPiece vocabulary -> packed sequences -> BERT pre-training with
// AdamW (no decay for biases and LayerNorm), linear warm-up and decay, clipping, held-out loss.
#include "tools/kiln/mlm_trainer.h"

#include <cmath>
#include <filesystem>
#include <sstream>

#include "kiln/io.h"
#include "kiln/kiln.h"
#include "kiln/nn/utils.h"
#include "kiln/random.h"
#include "tools/kiln/checkpoint_util.h"
#include "tools/kiln/device_choice.h"
#include "tools/kiln/trainer.h"

namespace kiln::train {
namespace {

constexpr const char* kFormat = "kiln-mlm-checkpoint-1";
constexpr int64_t kEvalBatch = 64;
constexpr double kHeldOut = 0.05;

std::string join_lines(const std::vector<std::string>& tokens) {
  std::string s;
  for (const auto& t : tokens) s += t + '\n';
  return s;
}

std::vector<std::string> split_lines(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// One AdamW step of a one-layer model of `cfg`'s kind on a blank batch, on the CPU, with the
// held-out evaluation's ops: the ops the job dispatches.
void probe_step(models::BertConfig cfg, double clip) {
  cfg.num_hidden_layers = 1;
  auto m = models::bert_for_masked_lm(cfg);
  Tensor ids = zeros({2, 8}, kInt64), labels = full({2, 8}, 1, kInt64), mask = ones({2, 8}, kInt64);
  m->masked_lm_loss(ids, labels, mask).backward();
  if (clip > 0) nn::utils::clip_grad_norm_(m->parameters(), clip);
  optim::AdamW(m->parameters(), {.lr = 1e-3}).step();
  NoGradGuard ng;
  m->eval();
  m->masked_lm_loss(ids, labels, mask).item<double>();
}

}  // namespace

bool is_bert_model(const std::string& model) { return model.rfind("bert-", 0) == 0; }

MlmTrainer::MlmTrainer(MlmTrainOptions options) : options_(std::move(options)) {
  const char* where = options_.command.c_str();
  if (!options_.device.empty()) parse_device(options_.device, where);  // a bad --device before anything else
  std::optional<io::SafetensorsFile> ckpt;
  const std::string ckpt_path = options_.resume_from.empty() ? checkpoint_path() : options_.resume_from;
  std::vector<std::string> vocab_tokens;
  if (options_.resume) {
    // The checkpoint decides the run's settings, so the schedule, masks and data order continue exactly.
    ckpt = io::load_checkpoint(ckpt_path, options_.verify_checkpoint);
    const CheckpointMeta m(*ckpt, ckpt_path, options_.command);
    m.check_format(kFormat);
    options_.model = m.text("model");
    if (options_.data.empty()) options_.data = m.text("data");
    options_.seq_len = m.integer("seq_len");
    options_.epochs = m.integer("epochs");
    options_.batch_size = m.integer("batch_size");
    options_.lr = m.number("lr");
    options_.weight_decay = m.number("weight_decay");
    options_.warmup = m.number("warmup");
    options_.clip = m.number("clip");
    options_.eval_every = m.integer("eval_every");
    options_.seed = static_cast<uint64_t>(m.integer("seed"));
    options_.amp = ckpt->metadata.count("amp") ? m.text("amp") : "off";  // older checkpoints: float32
    vocab_tokens = split_lines(m.text("vocab"));
  }
  amp_ = std::make_unique<MixedPrecision>(options_.amp, where);
  const auto& o = options_;
  KILN_CHECK(o.epochs >= 1 && o.batch_size >= 1, where, "epochs and batch size must be positive");
  KILN_CHECK(std::isfinite(o.lr) && o.lr > 0, where, "the learning rate must be positive, got ", o.lr);
  KILN_CHECK(o.warmup >= 0 && o.warmup <= 1, where, "--warmup is a share of the steps in [0, 1], got ", o.warmup);
  KILN_CHECK(std::isfinite(o.clip) && o.clip >= 0, where, "--clip must be >= 0, got ", o.clip);
  models::BertConfig cfg = models::BertConfig::preset(o.model);
  KILN_CHECK(o.seq_len >= 3 && o.seq_len <= cfg.max_position_embeddings, where, "--seq-len ", o.seq_len,
             " does not fit ", o.model, " (3 to max_position_embeddings = ", cfg.max_position_embeddings, ")");
  if (options_.data.empty()) {
    options_.data = text::default_corpus_path();
    KILN_CHECK(!options_.data.empty(), where,
               "no --data corpus given, and Debian's fortunes (the default) is not installed: "
               "apt-get install fortunes, or pass --data FILE");
  }

  const std::vector<std::string> docs = text::read_corpus(options_.data);
  text::Vocab vocab;
  if (!vocab_tokens.empty()) vocab = text::Vocab(vocab_tokens);
  else if (!o.vocab.empty()) vocab = text::Vocab::from_file(o.vocab);
  else vocab = text::train_wordpiece(docs, {.vocab_size = o.vocab_size});
  tokenizer_ = std::make_unique<text::BertTokenizer>(std::move(vocab));
  data_ = text::prepare_mlm_data(*tokenizer_, docs, {.max_length = o.seq_len, .held_out_fraction = kHeldOut, .seed = o.seed});
  KILN_CHECK(!data_.train.empty() && !data_.held_out.empty(), where, "corpus ", options_.data,
             " is too small: it packs into ", data_.train.size(), " training and ", data_.held_out.size(),
             " held-out sequences of ", o.seq_len, " tokens");
  const int64_t sequences = static_cast<int64_t>(data_.train.size());
  if (options_.batch_size > sequences) {
    notes_.push_back("--batch-size " + std::to_string(options_.batch_size) + " is more than the " +
                     std::to_string(sequences) + " training sequences; using " + std::to_string(sequences));
    options_.batch_size = sequences;
  }
  batcher_ = std::make_unique<text::MlmBatcher>(*tokenizer_, text::MlmBatcherOptions{.max_length = o.seq_len, .seed = o.seed});

  cfg.vocab_size = tokenizer_->vocab_size();
  cfg.pad_token_id = tokenizer_->pad_token_id();
  const DeviceChoice choice = choose_device(o.device, [&] { probe_step(cfg, o.clip); });
  device_ = choice.device;
  device_note_ = choice.note;
  manual_seed(o.seed);
  model_ = models::bert_for_masked_lm(cfg);
  model_->to(device_);

  // BERT's recipe: no weight decay for biases and LayerNorm parameters.
  std::vector<Tensor> decay, no_decay;
  for (const auto& [name, p] : model_->named_parameters()) {
    const bool exempt = name.find("LayerNorm") != std::string::npos || name.ends_with(".bias") ||
                        name == "cls.predictions.bias";
    (exempt ? no_decay : decay).push_back(p);
  }
  std::vector<optim::OptimizerParamGroup> groups{optim::OptimizerParamGroup(decay),
                                                 optim::OptimizerParamGroup(no_decay, {{"weight_decay", 0.0}})};
  optimizer_ = std::make_unique<optim::AdamW>(std::move(groups),
                                              optim::AdamWOptions{.lr = o.lr, .eps = 1e-6, .weight_decay = o.weight_decay});
  const int64_t n = static_cast<int64_t>(data_.train.size());
  batches_per_epoch_ = (n + o.batch_size - 1) / o.batch_size;
  const int64_t total = o.epochs * batches_per_epoch_;
  scheduler_ = optim::linear_schedule_with_warmup(*optimizer_, static_cast<int64_t>(o.warmup * static_cast<double>(total)), total);
  if (ckpt) resume(*ckpt, ckpt_path);
}

MlmTrainer::~MlmTrainer() = default;

std::string MlmTrainer::checkpoint_path() const {
  return (std::filesystem::path(options_.checkpoint_dir) / "last.safetensors").string();
}

void MlmTrainer::save_checkpoint() {
  check_checkpoint_dir(options_.checkpoint_dir, options_.command.c_str());
  std::map<std::string, Tensor> t = prefixed(model_->state_dict(), "model.");
  for (auto& [k, v] : prefixed(optimizer_->state_dict(), "optimizer.")) t[k] = v;
  for (auto& [k, v] : prefixed(scheduler_->state_dict(), "scheduler.")) t[k] = v;
  for (auto& [k, v] : amp_->state_dict()) t[k] = v;
  const GeneratorState rng = get_rng_state();
  const auto& o = options_;
  std::map<std::string, std::string> m{
      {"format", kFormat}, {"model", o.model}, {"data", o.data}, {"seq_len", std::to_string(o.seq_len)},
      {"epochs", std::to_string(o.epochs)}, {"batch_size", std::to_string(o.batch_size)}, {"lr", exact_number(o.lr)},
      {"weight_decay", exact_number(o.weight_decay)}, {"warmup", exact_number(o.warmup)},
      {"clip", exact_number(o.clip)}, {"eval_every", std::to_string(o.eval_every)}, {"seed", std::to_string(o.seed)},
      {"amp", amp_->mode()}, {"epoch", std::to_string(epoch_)}, {"batch", std::to_string(batch_in_epoch_)}, {"step", std::to_string(step_)},
      {"mask_offset", std::to_string(batcher_->offset())}, {"rng_seed", std::to_string(rng.seed)},
      {"rng_offset", std::to_string(rng.offset)}, {"vocab", join_lines(tokenizer_->vocab().tokens())}};
  io::save_checkpoint(checkpoint_path(), t, m);
  // The vocabulary beside it, for tools that read a plain vocab.txt (Hugging Face's included).
  tokenizer_->vocab().save((std::filesystem::path(options_.checkpoint_dir) / "vocab.txt").string());
}

void MlmTrainer::resume(const io::SafetensorsFile& f, const std::string& path) {
  const CheckpointMeta m(f, path, options_.command);
  model_->load_state_dict(with_prefix(f.tensors, "model."));
  optimizer_->load_state_dict(with_prefix(f.tensors, "optimizer."));
  scheduler_->load_state_dict(with_prefix(f.tensors, "scheduler."));
  amp_->load_state_dict(f.tensors);
  epoch_ = m.integer("epoch");
  batch_in_epoch_ = m.integer("batch");
  step_ = m.integer("step");
  KILN_CHECK(epoch_ >= 0 && epoch_ <= options_.epochs && batch_in_epoch_ >= 0 && batch_in_epoch_ < batches_per_epoch_ &&
                 step_ == epoch_ * batches_per_epoch_ + batch_in_epoch_,
             options_.command.c_str(), "checkpoint ", path, " has an inconsistent position (epoch ", epoch_, ", batch ",
             batch_in_epoch_, ", step ", step_, ") for ", batches_per_epoch_, " batches per epoch");
  batcher_->set_offset(static_cast<uint64_t>(m.integer("mask_offset")));
  set_rng_state({static_cast<uint64_t>(m.integer("rng_seed")), static_cast<uint64_t>(m.integer("rng_offset"))});
}

Tensor MlmTrainer::mlm_loss(const text::MlmBatch& batch) {
  return model_->masked_lm_loss(batch.input_ids.to(device_), batch.labels.to(device_), batch.attention_mask.to(device_));
}

MlmEvalResult MlmTrainer::evaluate() {
  NoGradGuard ng;
  const bool was_training = model_->is_training();
  model_->eval();
  // Its own masks, the same every evaluation, so successive losses compare.
  text::MlmBatcher batcher(*tokenizer_, {.max_length = options_.seq_len, .seed = options_.seed + 1});
  MlmEvalResult r;
  double sum = 0;
  const int64_t n = static_cast<int64_t>(data_.held_out.size());
  for (const auto& idx : text::epoch_batches(n, kEvalBatch, false, 0, 0)) {
    text::MlmBatch b = batcher.collate(data_.held_out, idx);
    if (b.num_predicted == 0) continue;
    sum += mlm_loss(b).item<double>() * static_cast<double>(b.num_predicted);
    r.predicted += b.num_predicted;
  }
  model_->train(was_training);
  if (r.predicted > 0) {
    r.loss = sum / static_cast<double>(r.predicted);
    r.perplexity = std::exp(r.loss);
  }
  return r;
}

void MlmTrainer::fit(const MlmCallbacks& cb) {
  const auto& o = options_;
  check_checkpoint_dir(o.checkpoint_dir, o.command.c_str());  // before any training time is spent
  const int64_t start_step = step_;
  const auto limit_hit = [&] { return o.max_steps >= 0 && step_ >= o.max_steps; };
  if (step_ == 0 && cb.on_eval) cb.on_eval(0, evaluate());
  std::vector<Tensor> params = model_->parameters();
  int64_t saved = start_step;
  while (epoch_ < o.epochs && !limit_hit()) {
    model_->train();
    const auto batches = text::epoch_batches(static_cast<int64_t>(data_.train.size()), o.batch_size, true, o.seed,
                                             static_cast<uint64_t>(epoch_));
    for (int64_t b = batch_in_epoch_; b < batches_per_epoch_ && !limit_hit(); ++b) {
      text::MlmBatch batch = batcher_->collate(data_.train, batches[static_cast<size_t>(b)]);
      double loss_value = 0;
      if (batch.num_predicted > 0) {  // possible only for very short sequences
        Tensor loss = amp_->forward([&] { return mlm_loss(batch); });
        optimizer_->zero_grad();
        amp_->backward_and_step(loss, *optimizer_, [&] {
          if (o.clip > 0) nn::utils::clip_grad_norm_(params, o.clip);
        });
        loss_value = loss.item<double>();
      }
      const double lr = optimizer_->param_groups()[0].get("lr");
      scheduler_->step();
      ++step_;
      batch_in_epoch_ = b + 1;
      if (cb.on_step) cb.on_step({epoch_, b, batches_per_epoch_, step_, loss_value, lr, batch.num_tokens});
      if (o.eval_every > 0 && step_ % o.eval_every == 0 && batch_in_epoch_ < batches_per_epoch_) {
        MlmEvalResult r = evaluate();
        if (cb.on_eval) cb.on_eval(step_, r);
        save_checkpoint();
        saved = step_;
      }
    }
    if (batch_in_epoch_ < batches_per_epoch_) break;  // stopped by max_steps
    ++epoch_;
    batch_in_epoch_ = 0;
    MlmEvalResult r = evaluate();
    save_checkpoint();
    saved = step_;
    if (cb.on_eval) cb.on_eval(step_, r);
  }
  // Stopped by --max-steps between saves: save there, so the checkpoint named exists and resumes.
  if (step_ != start_step && saved != step_) save_checkpoint();
}

bool is_mlm_checkpoint(const std::string& path) {
  const auto m = io::load_safetensors_metadata(path);
  auto it = m.find("format");
  return it != m.end() && it->second == kFormat;
}

MlmEvalResult evaluate_mlm_checkpoint(const std::string& path, const std::string& data, const std::string& device,
                                      bool verify) {
  return evaluate_restored<MlmTrainer>(path, data, device, verify);
}

}  // namespace kiln::train
