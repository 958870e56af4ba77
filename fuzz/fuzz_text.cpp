// libFuzzer target for kiln::text's parsers of untrusted text: UTF-8 decoding, BERT's
// normalisation and WordPiece (encode, pairs, decode), and the corpus document splitter.
#include <cstddef>
#include <cstdint>
#include <string>

#include "kiln/error.h"
#include "kiln/text.h"

namespace {

const kiln::text::BertTokenizer& tokenizer(bool lower, bool strip, bool cjk) {
  static const kiln::text::Vocab vocab = [] {
    std::vector<std::string> t = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "##s", "a", "##a", "é", "中"};
    for (char c = '!'; c <= '~'; ++c) {
      if (c != 'a') t.emplace_back(1, c);
      if (c != 'a' && c != 's') t.push_back(std::string("##") + c);
    }
    return kiln::text::Vocab(t);
  }();
  static const kiln::text::BertTokenizer variants[8] = {
#define KILN_V(l, s, c) kiln::text::BertTokenizer(vocab, {.do_lower_case = l, .strip_accents = s, .tokenize_chinese_chars = c})
      KILN_V(false, false, false), KILN_V(false, false, true), KILN_V(false, true, false), KILN_V(false, true, true),
      KILN_V(true, false, false),  KILN_V(true, false, true),  KILN_V(true, true, false),  KILN_V(true, true, true)};
#undef KILN_V
  return variants[(lower ? 4 : 0) + (strip ? 2 : 0) + (cjk ? 1 : 0)];
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  uint8_t flags = data[0];
  std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  const auto& tok = tokenizer(flags & 1, flags & 2, flags & 4);
  std::vector<int64_t> ids = tok.encode(text);
  (void)tok.decode(ids, flags & 8);
  (void)tok.tokenize(text);
  size_t half = text.size() / 2;
  (void)tok.encode_pair(text.substr(0, half), text.substr(half), true, 3 + (flags >> 4));
  try {
    (void)kiln::text::split_documents(text, "fuzz");
  } catch (const kiln::Error&) {  // binary input is rejected, never a crash
  }
  return 0;
}
