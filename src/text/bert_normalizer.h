// BERT's text normalisation and pre-tokenisation (as tokenizers' BertNormalizer and
// BertPreTokenizer), shared by the tokenizer and the WordPiece trainer.
#pragma once

#include <string>
#include <string_view>

#include "text/unicode.h"

namespace kiln::text::detail {

struct NormalizerOptions {
  bool lowercase = true;
  bool strip_accents = true;
  bool cjk = true;
};

// Decodes `utf8` (invalid sequences read as U+FFFD) and normalises it: drops U+0000, U+FFFD
// and control/format/private-use characters, makes whitespace ' ', surrounds CJK ideographs
// with spaces, strips accents, lower-cases. Appends to `out`.
void normalize(std::string_view utf8, const NormalizerOptions& options, std::u32string& out);

// Calls f(std::u32string_view word) for each word of normalised text: runs split at
// whitespace, and each punctuation character as a word of its own.
template <class F>
void for_each_word(std::u32string_view text, F&& f) {
  size_t start = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    unicode::CharClass c = unicode::char_class(text[i]);
    if (c == unicode::CharClass::Whitespace || c == unicode::CharClass::Punctuation) {
      if (i > start) f(text.substr(start, i - start));
      if (c == unicode::CharClass::Punctuation) f(text.substr(i, 1));
      start = i + 1;
    }
  }
  if (text.size() > start) f(text.substr(start));
}

}  // namespace kiln::text::detail
