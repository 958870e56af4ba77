// BertTokenizer: special tokens, normalisation, pre-tokenisation and WordPiece, as Hugging Face's.
#include "kiln/text/bert_tokenizer.h"

#include <algorithm>

#include "kiln/error.h"
#include "text/bert_normalizer.h"

namespace kiln::text {

namespace {

int64_t special_id(const Vocab& vocab, const std::string& token, const char* what) {
  KILN_CHECK(!token.empty(), "BertTokenizer", what, " is empty");
  int64_t id = vocab.find(token);
  KILN_CHECK(id >= 0, "BertTokenizer", "vocabulary (", vocab.size(), " tokens) has no ", what, " \"", token, "\"");
  return id;
}

// tokenizers' WordPiece decoder clean-up, applied to each token as it does.
std::string cleanup(std::string s) {
  static const std::pair<const char*, const char*> kRules[] = {
      {" .", "."},   {" ?", "?"},   {" !", "!"},   {" ,", ","},         {" ' ", "'"},  {" n't", "n't"},
      {" 'm", "'m"}, {" do not", " don't"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
  for (auto [from, to] : kRules) {
    std::string_view f(from);
    for (size_t pos = s.find(f); pos != std::string::npos; pos = s.find(f, pos + std::string_view(to).size()))
      s.replace(pos, f.size(), to);
  }
  return s;
}

}  // namespace

BertTokenizer::BertTokenizer(Vocab vocab, BertTokenizerOptions options)
    : vocab_(std::move(vocab)), options_(std::move(options)) {
  KILN_CHECK(options_.max_input_chars_per_word > 0, "BertTokenizer", "max_input_chars_per_word must be positive, got ",
             options_.max_input_chars_per_word);
  strip_accents_ = options_.strip_accents.value_or(options_.do_lower_case);
  unk_id_ = special_id(vocab_, options_.unk_token, "unk_token");
  sep_id_ = special_id(vocab_, options_.sep_token, "sep_token");
  pad_id_ = special_id(vocab_, options_.pad_token, "pad_token");
  cls_id_ = special_id(vocab_, options_.cls_token, "cls_token");
  mask_id_ = special_id(vocab_, options_.mask_token, "mask_token");
}

BertTokenizer BertTokenizer::from_file(const std::string& vocab_path, BertTokenizerOptions options) {
  Vocab vocab = Vocab::from_file(vocab_path);
  // Names the file: "[BertTokenizer::from_file] <path>: vocabulary ... has no unk_token".
  return kiln::detail::naming("BertTokenizer::from_file", vocab_path,
                        [&] { return BertTokenizer(std::move(vocab), std::move(options)); });
}

bool BertTokenizer::is_special(int64_t id) const {
  return id == pad_id_ || id == unk_id_ || id == cls_id_ || id == sep_id_ || id == mask_id_;
}

void BertTokenizer::wordpiece(std::u32string_view word, std::vector<int64_t>& out) const {
  if (word.empty()) return;
  if (static_cast<int64_t>(word.size()) > options_.max_input_chars_per_word) {
    out.push_back(unk_id_);
    return;
  }
  // offsets[i]: where code point i starts in the UTF-8 form, so candidates are byte ranges.
  std::string utf8;
  std::vector<size_t> offsets;
  offsets.reserve(word.size() + 1);
  for (char32_t cp : word) {
    offsets.push_back(utf8.size());
    unicode::append_utf8(cp, utf8);
  }
  offsets.push_back(utf8.size());
  size_t first = out.size();
  std::string candidate;
  for (size_t start = 0; start < word.size();) {
    int64_t id = -1;
    size_t end = word.size();
    for (; end > start; --end) {
      std::string_view piece(utf8.data() + offsets[start], offsets[end] - offsets[start]);
      if (start == 0) {
        id = vocab_.find(piece);
      } else {
        candidate.assign("##");
        candidate.append(piece);
        id = vocab_.find(candidate);
      }
      if (id >= 0) break;
    }
    if (id < 0) {  // no segmentation: the whole word is unknown
      out.resize(first);
      out.push_back(unk_id_);
      return;
    }
    out.push_back(id);
    start = end;
  }
}

void BertTokenizer::tokenize_ids(std::string_view text, std::vector<int64_t>& out) const {
  const std::string* specials[] = {&options_.unk_token, &options_.sep_token, &options_.pad_token, &options_.cls_token,
                                   &options_.mask_token};
  const int64_t special_ids[] = {unk_id_, sep_id_, pad_id_, cls_id_, mask_id_};
  constexpr size_t kSpecials = 5;
  // next[k]: where special k next occurs at or after `pos` (npos: nowhere), found lazily so a
  // text with many special tokens is scanned once per token kind.
  size_t next[kSpecials];
  std::fill(next, next + kSpecials, size_t{0});
  bool stale[kSpecials];
  std::fill(stale, stale + kSpecials, true);
  detail::NormalizerOptions norm{options_.do_lower_case, strip_accents_, options_.tokenize_chinese_chars};
  std::u32string normalized;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t best = std::string_view::npos, best_k = 0;
    for (size_t k = 0; k < kSpecials; ++k) {
      if (stale[k] || (next[k] != std::string_view::npos && next[k] < pos)) {
        next[k] = text.find(*specials[k], pos);
        stale[k] = false;
      }
      // Leftmost match wins; at the same place, the longest.
      if (next[k] < best || (next[k] == best && best != std::string_view::npos &&
                             specials[k]->size() > specials[best_k]->size())) {
        best = next[k];
        best_k = k;
      }
    }
    size_t end = best == std::string_view::npos ? text.size() : best;
    normalized.clear();
    detail::normalize(text.substr(pos, end - pos), norm, normalized);
    detail::for_each_word(normalized, [&](std::u32string_view w) { wordpiece(w, out); });
    if (best == std::string_view::npos) break;
    out.push_back(special_ids[best_k]);
    pos = best + specials[best_k]->size();
  }
}

std::vector<std::string> BertTokenizer::tokenize(std::string_view text) const {
  std::vector<int64_t> ids;
  tokenize_ids(text, ids);
  return convert_ids_to_tokens(ids);
}

std::vector<int64_t> BertTokenizer::encode(std::string_view text, bool add_special_tokens,
                                           std::optional<int64_t> max_length, bool truncation) const {
  std::vector<int64_t> ids;
  if (add_special_tokens) ids.push_back(cls_id_);
  tokenize_ids(text, ids);
  if (max_length) {
    int64_t n_special = add_special_tokens ? 2 : 0;
    KILN_CHECK(*max_length >= n_special, "BertTokenizer::encode", "max_length ", *max_length,
               " leaves no room for the ", n_special, " special tokens");
    int64_t total = static_cast<int64_t>(ids.size()) + (add_special_tokens ? 1 : 0);
    KILN_CHECK(truncation || total <= *max_length, "BertTokenizer::encode", "the text gives ", total,
               " tokens, which exceeds max_length ", *max_length, " (truncation is off)");
    if (total > *max_length) ids.resize(static_cast<size_t>(*max_length - (add_special_tokens ? 1 : 0)));
  }
  if (add_special_tokens) ids.push_back(sep_id_);
  return ids;
}

Encoding BertTokenizer::encode_pair(std::string_view a, std::string_view b, bool add_special_tokens,
                                    std::optional<int64_t> max_length, bool truncation) const {
  std::vector<int64_t> ia, ib;
  tokenize_ids(a, ia);
  tokenize_ids(b, ib);
  if (max_length) {
    int64_t n_special = add_special_tokens ? 3 : 0;
    KILN_CHECK(*max_length >= n_special, "BertTokenizer::encode_pair", "max_length ", *max_length,
               " leaves no room for the ", n_special, " special tokens");
    size_t budget = static_cast<size_t>(*max_length - n_special);
    size_t total = ia.size() + ib.size();
    KILN_CHECK(truncation || total <= budget, "BertTokenizer::encode_pair", "the texts give ", total + n_special,
               " tokens, which exceeds max_length ", *max_length, " (truncation is off)");
    if (total > budget) {
      // tokenizers' longest_first: keep the shorter whole if it fits in half, else split the
      // budget evenly (the odd token to the longer one).
      size_t n1 = ia.size(), n2 = ib.size();
      bool swap = n1 > n2;
      if (swap) std::swap(n1, n2);
      n2 = n1 > budget ? n1 : std::max(n1, budget - n1);
      if (n1 + n2 > budget) {
        n1 = budget / 2;
        n2 = n1 + budget % 2;
      }
      if (swap) std::swap(n1, n2);
      ia.resize(std::min(ia.size(), n1));
      ib.resize(std::min(ib.size(), n2));
    }
  }
  Encoding enc;
  if (add_special_tokens) enc.input_ids.push_back(cls_id_);
  enc.input_ids.insert(enc.input_ids.end(), ia.begin(), ia.end());
  if (add_special_tokens) enc.input_ids.push_back(sep_id_);
  size_t first_len = enc.input_ids.size();
  enc.input_ids.insert(enc.input_ids.end(), ib.begin(), ib.end());
  if (add_special_tokens) enc.input_ids.push_back(sep_id_);
  enc.token_type_ids.assign(enc.input_ids.size(), 1);
  std::fill(enc.token_type_ids.begin(), enc.token_type_ids.begin() + static_cast<std::ptrdiff_t>(first_len), 0);
  enc.attention_mask.assign(enc.input_ids.size(), 1);
  return enc;
}

int64_t BertTokenizer::token_to_id(std::string_view token) const {
  int64_t id = vocab_.find(token);
  return id < 0 ? unk_id_ : id;
}

std::vector<int64_t> BertTokenizer::convert_tokens_to_ids(const std::vector<std::string>& tokens) const {
  std::vector<int64_t> ids;
  ids.reserve(tokens.size());
  for (const std::string& t : tokens) ids.push_back(token_to_id(t));
  return ids;
}

const std::string& BertTokenizer::id_to_token(int64_t id) const {
  KILN_CHECK(id >= 0 && id < vocab_.size(), "BertTokenizer::id_to_token", "id ", id, " is outside the vocabulary of ",
             vocab_.size(), " tokens");
  return vocab_.tokens()[static_cast<size_t>(id)];
}

std::vector<std::string> BertTokenizer::convert_ids_to_tokens(const std::vector<int64_t>& ids) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int64_t id : ids) tokens.push_back(id_to_token(id));
  return tokens;
}

std::string BertTokenizer::decode(const std::vector<int64_t>& ids, bool skip_special_tokens) const {
  std::string out;
  bool first = true;
  for (int64_t id : ids) {
    KILN_CHECK(id >= 0 && id < vocab_.size(), "BertTokenizer::decode", "id ", id, " is outside the vocabulary of ",
               vocab_.size(), " tokens");
    if (skip_special_tokens && is_special(id)) continue;
    const std::string& token = vocab_.tokens()[static_cast<size_t>(id)];
    std::string piece;
    if (first) {
      piece = token;
    } else if (token.rfind("##", 0) == 0) {
      piece = token.substr(2);
    } else {
      piece = " " + token;
    }
    first = false;
    out += cleanup(std::move(piece));
  }
  return out;
}

}  // namespace kiln::text
