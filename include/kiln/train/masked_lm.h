// The masked-language-model task behind `kiln train --model bert-*`: a text corpus, a WordPiece
// vocabulary (given or learnt), BERT with AdamW under linear warm-up and decay, and held-out loss
// and perplexity.
//
//   train::MaskedLMOptions o;
//   o.model = "bert-tiny";
//   o.data = "corpus.txt";
//   train::MaskedLM task(o);
//   train::Trainer trainer(task);
//   trainer.fit({.on_eval = [](int64_t step, const train::EvalResult& r) { ... r.perplexity ... }});
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kiln/models/bert.h"
#include "kiln/optim/adam.h"
#include "kiln/optim/lr_scheduler.h"
#include "kiln/text/bert_tokenizer.h"
#include "kiln/text/mlm.h"
#include "kiln/train/trainer.h"

namespace kiln::train {

struct MaskedLMOptions : TrainerOptions {
  MaskedLMOptions() { eval_every = 100; }  // held-out evaluation every 100 steps
  std::string model = "bert-mini";  // bert-tiny, bert-mini, bert-small, bert-base
  std::string data;                 // a file or directory; empty: Debian's fortunes
  std::string vocab;                // a vocab.txt; empty: learn one of vocab_size from the corpus
  int64_t vocab_size = 8000;
  int64_t seq_len = 128;
  int64_t batch_size = 32;
  double lr = 1e-3;  // the peak, after warm-up
  double weight_decay = 0.01;
  double warmup = 0.06;  // the share of all steps spent warming up
  double clip = 1.0;     // gradient clipping by global norm (0: none)
  // BertConfig::gradient_checkpointing: a run's choice, not a setting of its checkpoint (a resumed
  // run takes it from its own options).
  bool gradient_checkpointing = false;
};

class MaskedLM : public Task {
 public:
  explicit MaskedLM(MaskedLMOptions options);
  ~MaskedLM() override;

  // The settings the run uses (a checkpoint's when resumed; a batch size capped to the data).
  MaskedLMOptions& options() override { return options_; }
  const MaskedLMOptions& options() const { return options_; }
  const text::MlmData& data() const { return data_; }
  const text::BertTokenizer& tokenizer() const { return *tokenizer_; }
  models::BertForMaskedLM& model() { return model_; }

  std::string checkpoint_format() const override;
  void load_settings(const CheckpointMeta& checkpoint) override;
  void prepare(std::vector<std::string>& notes) override;
  void probe_step() override;
  void build(Device device) override;
  nn::Module& module() override { return *model_; }
  optim::Optimizer& optimizer() override { return *optimizer_; }
  optim::LRScheduler& scheduler() override { return *scheduler_; }
  int64_t batches_per_epoch() const override { return batches_per_epoch_; }
  void begin_epoch(int64_t epoch, int64_t first_batch) override;
  TrainingBatch next_batch() override;
  void before_optimizer_step() override;
  // Mean cross-entropy over the held-out sequences' masked tokens; the same masks every time.
  EvalResult evaluate() override;
  void save_metadata(std::map<std::string, std::string>& metadata) const override;
  void load_state(const CheckpointMeta& checkpoint) override;
  // Writes vocab.txt beside the checkpoint, for tools that read a plain one (Hugging Face's included).
  void checkpoint_saved(const std::string& checkpoint_dir) override;

 private:
  // The mean loss over the batch's masked positions (the decoder runs on those rows only).
  Tensor mlm_loss(const text::MlmBatch& batch);

  MaskedLMOptions options_;
  std::vector<std::string> vocab_tokens_;  // a resumed checkpoint's vocabulary
  models::BertConfig config_;
  Device device_;
  std::unique_ptr<text::BertTokenizer> tokenizer_;
  text::MlmData data_;
  std::unique_ptr<text::MlmBatcher> batcher_;
  models::BertForMaskedLM model_{nullptr};
  std::vector<Tensor> parameters_;
  std::unique_ptr<optim::AdamW> optimizer_;
  std::unique_ptr<optim::LambdaLR> scheduler_;
  int64_t batches_per_epoch_ = 0;
  std::vector<std::vector<int64_t>> epoch_batches_;  // the epoch's batches of sequence indices
  int64_t epoch_ = 0;
  int64_t next_batch_ = 0;
};

// Whether `kiln train --model` names a BERT (the masked-LM task) rather than an image model.
bool is_bert_model(const std::string& model);

// Held-out loss and perplexity of a checkpoint written by a MaskedLM run, on the corpus `data`
// (empty: the checkpoint's own).
EvalResult evaluate_mlm_checkpoint(const std::string& path, const std::string& data, const std::string& device,
                                   bool verify = true);
// Whether a checkpoint file was written by a MaskedLM run (else by another task).
bool is_mlm_checkpoint(const std::string& path);

}  // namespace kiln::train
