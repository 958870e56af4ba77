// The masked-LM task: corpus -> WordPiece vocabulary -> packed sequences -> BERT pre-training with
// AdamW (no decay for biases and LayerNorm), linear warm-up and decay, clipping, held-out loss.
#include "kiln/train/masked_lm.h"

#include <cmath>
#include <filesystem>
#include <sstream>

#include "kiln/autograd.h"
#include "kiln/data/sampler.h"
#include "kiln/distributed.h"
#include "kiln/error.h"
#include "kiln/io.h"
#include "kiln/nn/utils.h"
#include "kiln/ops.h"
#include "kiln/text/corpus.h"
#include "kiln/text/wordpiece_trainer.h"

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

}  // namespace

bool is_bert_model(const std::string& model) { return model.rfind("bert-", 0) == 0; }

MaskedLM::MaskedLM(MaskedLMOptions options) : options_(std::move(options)) {}

MaskedLM::~MaskedLM() = default;

std::string MaskedLM::checkpoint_format() const { return kFormat; }

void MaskedLM::load_settings(const CheckpointMeta& m) {
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
  options_.seed = m.unsigned_integer("seed");
  vocab_tokens_ = split_lines(m.text("vocab"));
}

void MaskedLM::save_metadata(std::map<std::string, std::string>& m) const {
  const auto& o = options_;
  m["model"] = o.model;
  m["data"] = std::filesystem::absolute(o.data).string();  // kiln eval from another directory finds it
  m["train_sequences"] = std::to_string(data_.train.size());
  m["seq_len"] = std::to_string(o.seq_len);
  m["epochs"] = std::to_string(o.epochs);
  m["batch_size"] = std::to_string(o.batch_size);
  m["lr"] = exact_number(o.lr);
  m["weight_decay"] = exact_number(o.weight_decay);
  m["warmup"] = exact_number(o.warmup);
  m["clip"] = exact_number(o.clip);
  m["eval_every"] = std::to_string(o.eval_every);
  m["seed"] = std::to_string(o.seed);
  m["vocab"] = join_lines(tokenizer_->vocab().tokens());
}

// The position continues in the same training set: a corpus that packs into another number of
// sequences is refused, as the image task refuses another data set (its schedule and batches
// would change under the run).
void MaskedLM::load_state(const CheckpointMeta& m) {
  if (!m.has("train_sequences")) return;  // older checkpoints
  const int64_t saved = m.integer("train_sequences");
  KILN_CHECK(saved == static_cast<int64_t>(data_.train.size()), options_.command.c_str(), "the checkpoint was written for ",
             saved, " training sequences, but ", options_.data, " packs into ", data_.train.size());
}

void MaskedLM::checkpoint_saved(const std::string& checkpoint_dir) {
  tokenizer_->vocab().save((std::filesystem::path(checkpoint_dir) / "vocab.txt").string());
}

void MaskedLM::prepare(std::vector<std::string>& notes) {
  const char* where = options_.command.c_str();
  const auto& o = options_;
  check_training_numbers(o.epochs, o.batch_size, o.lr, o.weight_decay, where);
  KILN_CHECK(o.warmup >= 0 && o.warmup <= 1, where, "--warmup is a share of the steps in [0, 1], got ", o.warmup);
  KILN_CHECK(std::isfinite(o.clip) && o.clip >= 0, where, "--clip must be >= 0, got ", o.clip);
  config_ = models::BertConfig::preset(o.model);
  KILN_CHECK(o.seq_len >= 3 && o.seq_len <= config_.max_position_embeddings, where, "--seq-len ", o.seq_len,
             " does not fit ", o.model, " (3 to max_position_embeddings = ", config_.max_position_embeddings, ")");
  if (options_.data.empty()) {
    options_.data = text::default_corpus_path();
    KILN_CHECK(!options_.data.empty(), where,
               "no --data corpus given, and Debian's fortunes (the default) is not installed: "
               "apt-get install fortunes, or pass --data FILE");
  }

  const std::vector<std::string> docs = text::read_corpus(options_.data);
  text::Vocab vocab;
  if (!vocab_tokens_.empty()) vocab = text::Vocab(vocab_tokens_);
  else if (!o.vocab.empty()) vocab = text::Vocab::from_file(o.vocab);
  else {
    vocab = text::train_wordpiece(docs, {.vocab_size = o.vocab_size});
    const int64_t got = vocab.size();
    if (got != o.vocab_size)
      notes.push_back("--vocab-size " + std::to_string(o.vocab_size) + ": the vocabulary trained on the corpus has " +
                      std::to_string(got) + " tokens (" +
                      (got > o.vocab_size ? "its characters and the special tokens alone need that many"
                                          : "the corpus has no more word pieces") + ")");
  }
  tokenizer_ = std::make_unique<text::BertTokenizer>(std::move(vocab));
  data_ = text::prepare_mlm_data(*tokenizer_, docs, {.max_length = o.seq_len, .held_out_fraction = kHeldOut, .seed = o.seed});
  KILN_CHECK(!data_.train.empty() && !data_.held_out.empty(), where, "corpus ", options_.data,
             " is too small: it packs into ", data_.train.size(), " training and ", data_.held_out.size(),
             " held-out sequences of ", o.seq_len, " tokens");
  const int64_t sequences = static_cast<int64_t>(data_.train.size());
  if (options_.batch_size > sequences) {
    notes.push_back("--batch-size " + std::to_string(options_.batch_size) + " is more than the " +
                    std::to_string(sequences) + " training sequences; using " + std::to_string(sequences));
    options_.batch_size = sequences;
  }
  batcher_ = std::make_unique<text::MlmBatcher>(*tokenizer_, text::MlmBatcherOptions{.max_length = o.seq_len, .seed = o.seed});
  config_.vocab_size = tokenizer_->vocab_size();
  config_.pad_token_id = tokenizer_->pad_token_id();
}

// One AdamW step of a one-layer model of the job's kind on a blank batch, and the held-out
// evaluation's ops: the ops the job dispatches.
void MaskedLM::probe_step() {
  models::BertConfig cfg = config_;
  cfg.num_hidden_layers = 1;
  auto m = models::bert_for_masked_lm(cfg);
  Tensor ids = zeros({2, 8}, kInt64), labels = full({2, 8}, 1, kInt64), mask = ones({2, 8}, kInt64);
  m->masked_lm_loss(ids, labels, mask).backward();
  if (options_.clip > 0) nn::utils::clip_grad_norm_(m->parameters(), options_.clip);
  optim::AdamW(m->parameters(), {.lr = 1e-3}).step();
  NoGradGuard ng;
  m->eval();
  m->masked_lm_loss(ids, labels, mask).item<double>();
}

void MaskedLM::build(Device device) {
  const auto& o = options_;
  device_ = device;
  model_ = models::bert_for_masked_lm(config_);
  model_->bert->encoder->gradient_checkpointing = o.gradient_checkpointing;
  model_->to(device_);
  parameters_ = model_->parameters();

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
  const int64_t share = distributed::world_size() > 1 ? data::DistributedSampler(n).size() : n;
  batches_per_epoch_ = (share + o.batch_size - 1) / o.batch_size;
  const int64_t total = total_steps(o.epochs, batches_per_epoch_, "MaskedLM");
  scheduler_ = optim::linear_schedule_with_warmup(*optimizer_, static_cast<int64_t>(o.warmup * static_cast<double>(total)), total);
}

void MaskedLM::begin_epoch(int64_t epoch, int64_t first_batch) {
  const int64_t n = static_cast<int64_t>(data_.train.size());
  if (distributed::world_size() > 1) {
    // This process's share of the epoch (padded so every process has as many batches), in batches.
    const std::vector<int64_t> mine =
        data::DistributedSampler(n, {.seed = options_.seed}).indices(static_cast<uint64_t>(epoch));
    epoch_batches_.clear();
    for (size_t i = 0; i < mine.size(); i += static_cast<size_t>(options_.batch_size))
      epoch_batches_.emplace_back(mine.begin() + static_cast<std::ptrdiff_t>(i),
                                  mine.begin() + static_cast<std::ptrdiff_t>(std::min(mine.size(), i + static_cast<size_t>(options_.batch_size))));
  } else {
    epoch_batches_ = text::epoch_batches(n, options_.batch_size, true, options_.seed, static_cast<uint64_t>(epoch));
  }
  epoch_ = epoch;
  next_batch_ = first_batch;
}

TrainingBatch MaskedLM::next_batch() {
  // The masking counters follow the batch's step_in_run, not a running offset that each batch's
  // longest sequence advanced: every process has its own, and a resumed run masks as the
  // uninterrupted one did.
  batcher_->set_offset(step_in_run(epoch_ * batches_per_epoch_ + next_batch_) *
                       static_cast<uint64_t>(options_.batch_size * options_.seq_len));
  text::MlmBatch batch = batcher_->collate(data_.train, epoch_batches_.at(static_cast<size_t>(next_batch_++)));
  TrainingBatch b{.loss = nullptr, .samples = batch.num_tokens};
  if (batch.num_predicted > 0)  // none is possible only for very short sequences
    b.loss = [this, batch] { return mlm_loss(batch); };
  return b;
}

// The total norm stays a tensor: nothing in a training step waits for the GPU.
void MaskedLM::before_optimizer_step() {
  if (options_.clip <= 0) return;
  std::vector<Tensor> grads;
  for (const Tensor& p : parameters_) grads.push_back(p.grad());
  nn::utils::clip_grads_with_norm_(parameters_, options_.clip, nn::utils::get_total_norm(grads));
}

// The labels stay on the host: the loss finds the labelled positions there (on the device they
// would be read back, waiting for the GPU).
Tensor MaskedLM::mlm_loss(const text::MlmBatch& batch) {
  return model_->masked_lm_loss(batch.input_ids.to(device_), batch.labels, batch.attention_mask.to(device_));
}

EvalResult MaskedLM::evaluate() {
  // Its own masks, the same every evaluation, so successive losses compare.
  text::MlmBatcher batcher(*tokenizer_, {.max_length = options_.seq_len, .seed = options_.seed + 1});
  EvalResult r;
  double sum = 0;
  const int64_t n = static_cast<int64_t>(data_.held_out.size());
  const auto batches = text::epoch_batches(n, kEvalBatch, false, 0, 0);
  // With several processes each scores every world_size-th batch (the Trainer adds the sums up).
  for (size_t i = static_cast<size_t>(distributed::rank()); i < batches.size();
       i += static_cast<size_t>(distributed::world_size())) {
    text::MlmBatch b = batcher.collate(data_.held_out, batches[i]);
    if (b.num_predicted == 0) continue;
    sum += mlm_loss(b).item<double>() * static_cast<double>(b.num_predicted);
    r.samples += b.num_predicted;
  }
  if (r.samples > 0) {
    r.loss = sum / static_cast<double>(r.samples);
    r.perplexity = std::exp(r.loss);
  }
  return r;
}

bool is_mlm_checkpoint(const std::string& path) {
  const auto m = io::load_safetensors_metadata(path);
  auto it = m.find("format");
  return it != m.end() && it->second == kFormat;
}

EvalResult evaluate_mlm_checkpoint(const std::string& path, const std::string& data, const std::string& device,
                                   bool verify) {
  MaskedLMOptions o;
  o.data = data;
  MaskedLM task(o);
  return evaluate_checkpoint(task, path, device, verify);
}

}  // namespace kiln::train
