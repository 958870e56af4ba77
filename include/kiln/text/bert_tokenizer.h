// kiln::text::BertTokenizer: BERT's basic tokenisation and WordPiece, id for id as Hugging Face's.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/text/vocab.h"

namespace kiln::text {

// Hugging Face's BertTokenizer arguments, with its defaults.
struct BertTokenizerOptions {
  bool do_lower_case = true;
  // Unset: follows do_lower_case (as the original BERT does).
  std::optional<bool> strip_accents = std::nullopt;
  bool tokenize_chinese_chars = true;
  // Longer words (in code points, after normalisation) become the unknown token.
  int64_t max_input_chars_per_word = 100;
  std::string unk_token = "[UNK]";
  std::string sep_token = "[SEP]";
  std::string pad_token = "[PAD]";
  std::string cls_token = "[CLS]";
  std::string mask_token = "[MASK]";
};

// One encoded sequence or pair: ids, segment ids (0 for the first text, 1 for the second) and
// an attention mask of ones (padding is the batcher's job).
struct Encoding {
  std::vector<int64_t> input_ids;
  std::vector<int64_t> token_type_ids;
  std::vector<int64_t> attention_mask;
};

// The pipeline of transformers' BertTokenizer (in transformers 5, the `tokenizers`-backed one):
//  1. the special tokens ([CLS], [SEP], [PAD], [MASK], [UNK], exact and case-sensitive) are cut
//     out of the raw text first and kept whole;
//  2. each remaining piece is normalised: U+0000, U+FFFD, control, format and private-use
//     characters dropped, whitespace made ' ', CJK ideographs surrounded by spaces, then
//     accents stripped (NFD, non-spacing marks dropped) and lower-cased where enabled;
//  3. split on whitespace, punctuation split into single-character words;
//  4. WordPiece: greedy longest-match-first with "##" continuations; a word with no full
//     segmentation, or longer than max_input_chars_per_word, becomes [UNK].
// Text is UTF-8. Invalid UTF-8 never throws: each invalid byte sequence is read as U+FFFD
// (as Python's errors="replace" does), which step 2 then drops.
class BertTokenizer {
 public:
  // The vocabulary must hold the five special tokens named in `options`; otherwise
  // kiln::Error "[BertTokenizer] vocabulary has no unk_token \"[UNK]\"".
  explicit BertTokenizer(Vocab vocab, BertTokenizerOptions options = {});
  // Vocab::from_file's errors, plus the special-token checks above (named BertTokenizer::from_file).
  static BertTokenizer from_file(const std::string& vocab_path, BertTokenizerOptions options = {});

  // Word pieces, without [CLS]/[SEP].
  std::vector<std::string> tokenize(std::string_view text) const;
  // Ids, by default as [CLS] ... [SEP]. With max_length: truncation cuts the text's tokens so
  // the whole fits (max_length must leave room for the special tokens); without truncation
  // a longer result is a kiln::Error "[BertTokenizer::encode] ... exceeds max_length".
  std::vector<int64_t> encode(std::string_view text, bool add_special_tokens = true,
                              std::optional<int64_t> max_length = std::nullopt, bool truncation = true) const;
  // [CLS] a [SEP] b [SEP] with token_type_ids 0 for "[CLS] a [SEP]" and 1 for "b [SEP]".
  // Truncation is Hugging Face's "longest_first". An empty b still gives its [SEP], as the
  // tokenizers library's pair encoding (transformers' tokenizer(a, "") takes "" as no pair).
  Encoding encode_pair(std::string_view a, std::string_view b, bool add_special_tokens = true,
                       std::optional<int64_t> max_length = std::nullopt, bool truncation = true) const;

  // Unknown tokens give unk_token_id().
  int64_t token_to_id(std::string_view token) const;
  std::vector<int64_t> convert_tokens_to_ids(const std::vector<std::string>& tokens) const;
  // kiln::Error for an id outside the vocabulary.
  const std::string& id_to_token(int64_t id) const;
  std::vector<std::string> convert_ids_to_tokens(const std::vector<int64_t>& ids) const;
  // Text from ids as Hugging Face's WordPiece decoder gives it ("##" pieces glued to the
  // previous one, spaces before punctuation such as " ." and " 's" cleaned up).
  std::string decode(const std::vector<int64_t>& ids, bool skip_special_tokens = false) const;

  int64_t vocab_size() const { return vocab_.size(); }
  const Vocab& vocab() const { return vocab_; }
  const BertTokenizerOptions& options() const { return options_; }
  int64_t pad_token_id() const { return pad_id_; }
  int64_t unk_token_id() const { return unk_id_; }
  int64_t cls_token_id() const { return cls_id_; }
  int64_t sep_token_id() const { return sep_id_; }
  int64_t mask_token_id() const { return mask_id_; }
  // Whether `id` is one of the five special tokens.
  bool is_special(int64_t id) const;

 private:
  void tokenize_ids(std::string_view text, std::vector<int64_t>& out) const;
  void wordpiece(std::u32string_view word, std::vector<int64_t>& out) const;

  Vocab vocab_;
  BertTokenizerOptions options_;
  bool strip_accents_ = true;
  int64_t pad_id_ = 0, unk_id_ = 0, cls_id_ = 0, sep_id_ = 0, mask_id_ = 0;
};

}  // namespace kiln::text
