// The masked-language-model trainer behind `kiln train --model bert-*`: a text corpus, a WordPiece
// vocabulary (given or learnt), BERT with AdamW under linear warm-up and decay, held-out loss and
// perplexity, and checkpoints that resume exactly.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "kiln/io.h"
#include "kiln/models/bert.h"
#include "kiln/optim.h"
#include "kiln/text.h"
#include "tools/kiln/mixed_precision.h"

namespace kiln::train {

struct MlmTrainOptions {
  std::string model = "bert-mini";  // bert-tiny, bert-mini, bert-small, bert-base
  std::string data;                 // a file or directory; empty: Debian's fortunes
  std::string vocab;                // a vocab.txt; empty: learn one of vocab_size from the corpus
  int64_t vocab_size = 8000;
  int64_t seq_len = 128;
  int64_t epochs = 3;
  int64_t batch_size = 32;
  double lr = 1e-3;  // the peak, after warm-up
  double weight_decay = 0.01;
  double warmup = 0.06;  // the share of all steps spent warming up
  double clip = 1.0;     // gradient clipping by global norm (0: none)
  int64_t eval_every = 100;  // held-out evaluation every N steps (0: once per epoch)
  std::string device;
  uint64_t seed = 0;
  std::string checkpoint_dir = "checkpoints";
  bool resume = false;
  std::string resume_from;
  int64_t max_steps = -1;  // stop after this many steps in total (a checkpoint is saved there)
  bool verify_checkpoint = true;  // check the checksum of the checkpoint resumed from
  std::string amp;                // --amp: "", "bf16" or "fp16" (autocast, and a GradScaler for fp16)
  std::string command = "kiln train";  // names the command in errors
};

struct MlmStepInfo {
  int64_t epoch, batch, batches, step;
  double loss, lr;
  int64_t tokens;  // tokens (not padding) in the batch
};

struct MlmEvalResult {
  double loss = 0, perplexity = 0;
  int64_t predicted = 0;  // masked tokens scored
};

struct MlmCallbacks {
  std::function<void(const MlmStepInfo&)> on_step;
  // After each held-out evaluation (step 0: the untrained model).
  std::function<void(int64_t step, const MlmEvalResult&)> on_eval;
};

class MlmTrainer {
 public:
  explicit MlmTrainer(MlmTrainOptions options);
  ~MlmTrainer();
  void fit(const MlmCallbacks& callbacks = {});
  // Mean cross-entropy over the held-out sequences' masked tokens; the same masks every time.
  MlmEvalResult evaluate();
  const MlmTrainOptions& options() const { return options_; }
  Device device() const { return device_; }
  // Why a present GPU was not chosen (for the first line), or empty.
  const std::string& device_note() const { return device_note_; }
  // Settings changed on the way (a batch larger than the data set), one line each.
  const std::vector<std::string>& notes() const { return notes_; }
  int64_t step() const { return step_; }
  int64_t epoch() const { return epoch_; }
  const text::MlmData& data() const { return data_; }
  const text::BertTokenizer& tokenizer() const { return *tokenizer_; }
  models::BertForMaskedLM& model() { return model_; }
  std::string checkpoint_path() const;
  void save_checkpoint();

 private:
  void resume(const io::SafetensorsFile& f, const std::string& path);
  // The mean loss over the batch's masked positions (the decoder runs on those rows only).
  Tensor mlm_loss(const text::MlmBatch& batch);

  MlmTrainOptions options_;
  Device device_;
  std::string device_note_;
  std::vector<std::string> notes_;
  std::unique_ptr<text::BertTokenizer> tokenizer_;
  text::MlmData data_;
  std::unique_ptr<text::MlmBatcher> batcher_;
  models::BertForMaskedLM model_{nullptr};
  std::unique_ptr<optim::AdamW> optimizer_;
  std::unique_ptr<MixedPrecision> amp_;
  std::unique_ptr<optim::LambdaLR> scheduler_;
  int64_t epoch_ = 0, step_ = 0, batch_in_epoch_ = 0, batches_per_epoch_ = 0;
};

// Whether `kiln train --model` names a BERT (the MLM trainer) rather than an image model.
bool is_bert_model(const std::string& model);

// Held-out loss and perplexity of a checkpoint written by MlmTrainer, on the corpus `data`
// (empty: the checkpoint's own).
MlmEvalResult evaluate_mlm_checkpoint(const std::string& path, const std::string& data, const std::string& device,
                                      bool verify = true);
// Whether a checkpoint file was written by MlmTrainer (else by the image trainer).
bool is_mlm_checkpoint(const std::string& path);

}  // namespace kiln::train
