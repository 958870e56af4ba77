// MlmBatcher: padding, attention masks and BERT's 80/10/10 masking from a Philox stream; epoch order.
#include <algorithm>
#include <numeric>

#include "core/philox.h"
#include "kiln/error.h"
#include "kiln/text/mlm.h"

namespace kiln::text {

namespace {
constexpr int64_t kIgnoreIndex = -100;
// The masking stream's Philox key is the seed with these bits flipped (see batch()).
constexpr uint64_t kMaskingStream = 0x9E3779B97F4A7C15ULL;
}

MlmBatcher::MlmBatcher(const BertTokenizer& tokenizer, MlmBatcherOptions options)
    : options_(options), vocab_size_(tokenizer.vocab_size()), pad_id_(tokenizer.pad_token_id()),
      mask_id_(tokenizer.mask_token_id()) {
  const char* where = "MlmBatcher";
  auto prob = [&](double p, const char* name) {
    KILN_CHECK(p >= 0 && p <= 1, where, name, " must be in [0, 1], got ", p);
  };
  prob(options_.mlm_probability, "mlm_probability");
  prob(options_.mask_replace_prob, "mask_replace_prob");
  prob(options_.random_replace_prob, "random_replace_prob");
  KILN_CHECK(options_.mask_replace_prob + options_.random_replace_prob <= 1 + 1e-12, where,
             "mask_replace_prob + random_replace_prob must be at most 1, got ", options_.mask_replace_prob, " + ",
             options_.random_replace_prob);
  KILN_CHECK(options_.max_length >= 1, where, "max_length must be positive, got ", options_.max_length);
  special_.assign(static_cast<size_t>(vocab_size_), false);
  for (int64_t id : {tokenizer.pad_token_id(), tokenizer.unk_token_id(), tokenizer.cls_token_id(),
                     tokenizer.sep_token_id(), tokenizer.mask_token_id()})
    special_[static_cast<size_t>(id)] = true;
  for (int64_t id = 0; id < vocab_size_; ++id)
    if (!special_[static_cast<size_t>(id)] && !tokenizer.vocab().tokens()[static_cast<size_t>(id)].empty())
      random_ids_.push_back(id);
  KILN_CHECK(!random_ids_.empty() || options_.random_replace_prob == 0, where,
             "the vocabulary has no non-special tokens to draw random replacements from");
}

MlmBatch MlmBatcher::collate(const TokenSequences& sequences) {
  std::vector<const std::vector<int64_t>*> ptrs;
  for (const auto& s : sequences) ptrs.push_back(&s);
  return collate_ptrs(ptrs);
}

MlmBatch MlmBatcher::collate(const TokenSequences& data, const std::vector<int64_t>& indices) {
  std::vector<const std::vector<int64_t>*> ptrs;
  for (int64_t i : indices) {
    KILN_CHECK(i >= 0 && i < static_cast<int64_t>(data.size()), "MlmBatcher::collate", "index ", i,
               " is outside the ", data.size(), " sequences");
    ptrs.push_back(&data[static_cast<size_t>(i)]);
  }
  return collate_ptrs(ptrs);
}

MlmBatch MlmBatcher::collate_ptrs(const std::vector<const std::vector<int64_t>*>& seqs) {
  const char* where = "MlmBatcher::collate";
  KILN_CHECK(!seqs.empty(), where, "empty batch");
  int64_t longest = 0;
  for (size_t b = 0; b < seqs.size(); ++b) {
    int64_t len = static_cast<int64_t>(seqs[b]->size());
    KILN_CHECK(len > 0, where, "sequence ", b, " is empty");
    KILN_CHECK(len <= options_.max_length, where, "sequence ", b, " has ", len, " tokens, more than max_length ",
               options_.max_length);
    longest = std::max(longest, len);
  }
  const int64_t B = static_cast<int64_t>(seqs.size());
  const int64_t S = options_.pad_to_max_length ? options_.max_length : longest;
  const size_t total = static_cast<size_t>(B * S);
  std::vector<int64_t> input(total, pad_id_), attention(total, 0), types(total, 0), labels(total, kIgnoreIndex);
  MlmBatch batch;
  // Thresholds on 32-bit words: u < p  <=>  w < p * 2^32 (exact for the probabilities' 2^-32 grid).
  auto threshold = [](double p) { return static_cast<uint64_t>(p * 4294967296.0); };
  const uint64_t t_select = threshold(options_.mlm_probability);
  const uint64_t t_mask = threshold(options_.mask_replace_prob);
  const uint64_t t_random = threshold(options_.mask_replace_prob + options_.random_replace_prob);
  for (int64_t b = 0; b < B; ++b) {
    const std::vector<int64_t>& seq = *seqs[static_cast<size_t>(b)];
    for (size_t s = 0; s < seq.size(); ++s) {
      int64_t id = seq[s];
      KILN_CHECK(id >= 0 && id < vocab_size_, where, "sequence ", b, " position ", s, ": id ", id,
                 " is outside the vocabulary of ", vocab_size_, " tokens");
      size_t at = static_cast<size_t>(b * S) + s;
      input[at] = id;
      attention[at] = 1;
      ++batch.num_tokens;
      if (special_[static_cast<size_t>(id)]) continue;
      // One Philox counter per batch position: word 0 chooses, word 1 picks mask/random/keep,
      // words 2-3 the random token. A key of its own: with the seed itself it would repeat the
      // global generator's stream, which manual_seed(seed) starts at the same counters, so the
      // first batch's choices would be the first weights' initial values.
      philox::U32x4 r = philox::philox(options_.seed ^ kMaskingStream, offset_ + at);
      if (r.v[0] >= t_select) continue;
      labels[at] = id;
      ++batch.num_predicted;
      if (r.v[1] < t_mask) {
        input[at] = mask_id_;
      } else if (r.v[1] < t_random) {
        const uint64_t w = philox::word64(r, 1);
        input[at] = random_ids_[static_cast<size_t>(w % random_ids_.size())];
      }
    }
  }
  offset_ += total;
  Shape shape{B, S};
  batch.input_ids = tensor(input, shape);
  batch.attention_mask = tensor(attention, shape);
  batch.token_type_ids = tensor(types, shape);
  batch.labels = tensor(labels, shape);
  return batch;
}

std::vector<std::vector<int64_t>> epoch_batches(int64_t n, int64_t batch_size, bool shuffle, uint64_t seed,
                                                uint64_t epoch, bool drop_last) {
  KILN_CHECK(n >= 0, "epoch_batches", "n must be >= 0, got ", n);
  KILN_CHECK(batch_size >= 1, "epoch_batches", "batch_size must be positive, got ", batch_size);
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t{0});
  if (shuffle) {  // Fisher-Yates; a key of its own so it does not repeat the masking stream
    const uint64_t key = seed ^ 0x5DEECE66DULL;
    for (int64_t i = n - 1; i > 0; --i) {
      philox::U32x4 r = philox::philox(key, (epoch << 40) + static_cast<uint64_t>(i));
      const uint64_t w = philox::word64(r, 0);
      std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(w % static_cast<uint64_t>(i + 1))]);
    }
  }
  std::vector<std::vector<int64_t>> batches;
  for (int64_t start = 0; start < n; start += batch_size) {
    int64_t end = std::min(n, start + batch_size);
    if (drop_last && end - start < batch_size) break;
    batches.emplace_back(order.begin() + start, order.begin() + end);
  }
  return batches;
}

}  // namespace kiln::text
