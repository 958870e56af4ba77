// kiln::text::train_wordpiece: learns a WordPiece vocabulary from a corpus, BPE-style on word counts.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kiln/text/vocab.h"

namespace kiln::text {

struct WordPieceTrainerOptions {
  // The size to stop at (the vocabulary can be larger only if the specials and the alphabet
  // alone exceed it: every character seen is always kept).
  int64_t vocab_size = 30000;
  // A merge whose pair occurs fewer times than this (weighted by word counts) is not learnt.
  int64_t min_frequency = 0;
  // First in the vocabulary, in this order: [PAD] = 0, [UNK] = 1, [CLS] = 2, [SEP] = 3, [MASK] = 4.
  std::vector<std::string> special_tokens = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};
  // Keep only the this-many most frequent characters (0: all characters seen).
  int64_t limit_alphabet = 0;
  std::string continuing_subword_prefix = "##";
  // A longer word (in code points, after normalisation) adds its characters to the alphabet
  // but takes no part in merges: BertTokenizer with the same limit reads it as [UNK] anyway.
  int64_t max_input_chars_per_word = 100;
  // The normalisation the tokenizer will use (BertTokenizerOptions' meanings).
  bool do_lower_case = true;
  std::optional<bool> strip_accents = std::nullopt;
  bool tokenize_chinese_chars = true;
};

// The vocabulary: the special tokens; every character of the alphabet (sorted by code point),
// then each with the continuation prefix ("##x"), so any word over the alphabet has a
// segmentation; then merged pieces in the order learnt. Training is Hugging Face's
// WordPieceTrainer's: texts are normalised and pre-tokenised as BertTokenizer does, words are
// counted, and the most frequent adjacent pair of pieces (summed over words, weighted by
// their counts) is merged repeatedly; a merged piece is the first piece followed by the second
// without its prefix. Ties go to the pair of earlier ids, so the result is deterministic.
// One deliberate difference: Hugging Face's trainer also merges pairs inside words longer than
// max_input_chars_per_word, which costs the word's length at every merge and learns pieces
// from words its tokenizer reads as [UNK]; here such words count only for the alphabet, so
// training stays linear in the corpus size. Without such words the merges are the same. A
// second difference: every alphabet character gets its "##x" here, where Hugging Face's adds
// only those seen inside words, so at one vocab_size this vocabulary holds a few merges fewer
// and its ids after the alphabet differ from Hugging Face's.
// Errors "[train_wordpiece] ...": no words in the corpus, a repeated or empty special token,
// vocab_size < 1, max_input_chars_per_word < 1, negative min_frequency or limit_alphabet.
Vocab train_wordpiece(const std::vector<std::string>& texts, const WordPieceTrainerOptions& options = {});

}  // namespace kiln::text
