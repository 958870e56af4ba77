// kiln::text MLM data: documents packed into [CLS] ... [SEP] sequences, a train/held-out split,
// and the masked-language-model batcher (BERT's 15% with 80/10/10).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/tensor.h"
#include "kiln/text/bert_tokenizer.h"

namespace kiln::text {

using TokenSequences = std::vector<std::vector<int64_t>>;

// Packs documents' token ids (no special tokens) into sequences of at most max_length:
// [CLS] doc [SEP] doc [SEP] ..., whole documents while they fit; a document longer than
// max_length - 2 is cut into pieces that each fill a sequence. Empty documents are skipped.
// kiln::Error "[pack_sequences] ..." if max_length < 3.
TokenSequences pack_sequences(const TokenSequences& documents, int64_t max_length, int64_t cls_token_id,
                              int64_t sep_token_id);

struct MlmDataOptions {
  int64_t max_length = 128;
  // The share of documents (not sequences) held out, so no document is in both parts.
  double held_out_fraction = 0.05;
  uint64_t seed = 0;  // which documents are held out
};

struct MlmData {
  TokenSequences train;
  TokenSequences held_out;
  int64_t documents = 0;
  int64_t train_tokens = 0;     // all tokens of `train`, specials included
  int64_t held_out_tokens = 0;
};

// Tokenises the documents (on all OpenMP threads), splits them deterministically by `seed`
// and packs each part. The training part is never empty: if every document drew "held out",
// the last held-out sequence trains instead. If the held-out part would be empty while the
// training part has two or more sequences (say, one long document), its last sequence is held
// out instead.
// kiln::Error "[prepare_mlm_data] ..." for no documents, no tokens at all, or a fraction
// outside [0, 1).
MlmData prepare_mlm_data(const BertTokenizer& tokenizer, const std::vector<std::string>& documents,
                         const MlmDataOptions& options = {});

// One MLM batch, all int64 [B, S] on the CPU: labels hold the original id where a token is to
// be predicted and -100 (cross_entropy's ignore_index) elsewhere; attention_mask is 1 for
// tokens and 0 for padding; token_type_ids are 0.
struct MlmBatch {
  Tensor input_ids;
  Tensor attention_mask;
  Tensor token_type_ids;
  Tensor labels;
  int64_t num_predicted = 0;  // labels != -100
  int64_t num_tokens = 0;     // attention_mask == 1
};

// Field names as Hugging Face's DataCollatorForLanguageModeling.
struct MlmBatcherOptions {
  double mlm_probability = 0.15;      // each non-special token is chosen with this probability
  double mask_replace_prob = 0.8;     // a chosen token becomes [MASK] ...
  double random_replace_prob = 0.1;   // ... or a random non-special token; else it is kept
  int64_t max_length = 128;           // longer sequences are an error
  bool pad_to_max_length = false;     // false: pad to the batch's longest sequence
  uint64_t seed = 0;
};

// Pads and masks batches. Randomness is a Philox stream of its own (seed, offset), not the
// global generator: the same seed and the same calls give the same batches on any machine.
// Each collate() uses B x S counters and advances the offset; for a held-out loss comparable
// between evaluations, set_offset(0) before each pass.
class MlmBatcher {
 public:
  // Special ids, the vocabulary size and the random-token candidates come from the tokenizer.
  MlmBatcher(const BertTokenizer& tokenizer, MlmBatcherOptions options = {});

  // kiln::Error "[MlmBatcher::collate] ..." for an empty batch, an empty or too long sequence,
  // or an id outside the vocabulary.
  MlmBatch collate(const TokenSequences& sequences);
  // The sequences data[i] for i in indices.
  MlmBatch collate(const TokenSequences& data, const std::vector<int64_t>& indices);

  uint64_t offset() const { return offset_; }
  void set_offset(uint64_t offset) { offset_ = offset; }
  const MlmBatcherOptions& options() const { return options_; }

 private:
  MlmBatch collate_ptrs(const std::vector<const std::vector<int64_t>*>& seqs);

  MlmBatcherOptions options_;
  int64_t vocab_size_ = 0;
  int64_t pad_id_ = 0, mask_id_ = 0;
  std::vector<bool> special_;         // by id: never chosen
  std::vector<int64_t> random_ids_;   // the non-special ids random replacement draws from
  uint64_t offset_ = 0;
};

// The batches of one epoch as indices into a dataset of n sequences: a permutation seeded by
// (seed, epoch) when shuffle is set (else 0..n-1), cut into batch_size pieces; the last, shorter
// one is dropped if drop_last.
std::vector<std::vector<int64_t>> epoch_batches(int64_t n, int64_t batch_size, bool shuffle, uint64_t seed,
                                                uint64_t epoch, bool drop_last = false);

}  // namespace kiln::text
