// train_wordpiece: word counts, the alphabet, then BPE merges with a lazily updated max-heap.
#include "kiln/text/wordpiece_trainer.h"

#include <algorithm>
#include <array>
#include <map>
#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "kiln/error.h"
#include "text/bert_normalizer.h"

namespace kiln::text {

namespace {

using PairKey = uint64_t;
PairKey key(uint32_t a, uint32_t b) { return (static_cast<uint64_t>(a) << 32) | b; }

struct Word {
  std::vector<uint32_t> pieces;
  int64_t count;
};

struct HeapEntry {
  int64_t count;
  PairKey pair;
  // The max-heap's top: the highest count, then the smallest pair (earlier ids).
  bool operator<(const HeapEntry& o) const { return count != o.count ? count < o.count : pair > o.pair; }
};

// Adds `sign` x word count for each adjacent pair of `pieces` into `delta`.
void count_pairs(const std::vector<uint32_t>& pieces, int64_t weight, std::unordered_map<PairKey, int64_t>& delta) {
  for (size_t i = 0; i + 1 < pieces.size(); ++i) delta[key(pieces[i], pieces[i + 1])] += weight;
}

// Replaces each non-overlapping occurrence of (a, b), left to right, with `merged`.
bool merge_word(std::vector<uint32_t>& pieces, uint32_t a, uint32_t b, uint32_t merged) {
  size_t out = 0;
  bool changed = false;
  for (size_t i = 0; i < pieces.size(); ++i) {
    if (i + 1 < pieces.size() && pieces[i] == a && pieces[i + 1] == b) {
      pieces[out++] = merged;
      ++i;
      changed = true;
    } else {
      pieces[out++] = pieces[i];
    }
  }
  pieces.resize(out);
  return changed;
}

}  // namespace

Vocab train_wordpiece(const std::vector<std::string>& texts, const WordPieceTrainerOptions& options) {
  const char* where = "train_wordpiece";
  KILN_CHECK(options.vocab_size >= 1, where, "vocab_size must be positive, got ", options.vocab_size);
  KILN_CHECK(options.min_frequency >= 0, where, "min_frequency must be >= 0, got ", options.min_frequency);
  KILN_CHECK(options.limit_alphabet >= 0, where, "limit_alphabet must be >= 0, got ", options.limit_alphabet);
  KILN_CHECK(options.max_input_chars_per_word > 0, where, "max_input_chars_per_word must be positive, got ",
             options.max_input_chars_per_word);

  // 1. Word counts, after BertTokenizer's normalisation and pre-tokenisation. Words too long
  //    for the tokenizer only count their characters (ASCII without a map lookup: such a
  //    word can be the whole corpus).
  detail::NormalizerOptions norm{options.do_lower_case, options.strip_accents.value_or(options.do_lower_case),
                                 options.tokenize_chinese_chars};
  const size_t max_chars = static_cast<size_t>(options.max_input_chars_per_word);
  std::unordered_map<std::u32string, int64_t> word_counts;
  std::array<int64_t, 128> long_ascii{};
  std::map<char32_t, int64_t> char_counts;
  bool any_long = false;
  std::u32string normalized;
  for (const std::string& text : texts) {
    normalized.clear();
    detail::normalize(text, norm, normalized);
    detail::for_each_word(normalized, [&](std::u32string_view w) {
      if (w.size() <= max_chars) {
        ++word_counts[std::u32string(w)];
        return;
      }
      any_long = true;
      for (char32_t ch : w) {
        if (ch < 128) ++long_ascii[ch];
        else ++char_counts[ch];
      }
    });
  }
  KILN_CHECK(!word_counts.empty() || any_long, where, "the corpus (", texts.size(), " texts) has no words");
  // Sorted, so everything after depends only on the counts, not on hash order.
  std::vector<std::pair<std::u32string, int64_t>> sorted_words(word_counts.begin(), word_counts.end());
  word_counts.clear();
  std::sort(sorted_words.begin(), sorted_words.end());

  // 2. The vocabulary so far: specials, the alphabet, the alphabet with the prefix.
  std::vector<std::string> tokens;
  std::unordered_map<std::string, uint32_t> ids;
  auto add = [&](const std::string& t) -> uint32_t {
    auto [it, inserted] = ids.emplace(t, static_cast<uint32_t>(tokens.size()));
    if (inserted) tokens.push_back(t);
    return it->second;
  };
  for (const std::string& s : options.special_tokens) {
    KILN_CHECK(!s.empty(), where, "a special token is empty");
    KILN_CHECK(!ids.count(s), where, "special token \"", s, "\" is listed twice");
    add(s);
  }
  for (char32_t ch = 0; ch < 128; ++ch)
    if (long_ascii[ch] > 0) char_counts[ch] += long_ascii[ch];
  for (const auto& [w, c] : sorted_words)
    for (char32_t ch : w) char_counts[ch] += c;
  std::vector<char32_t> alphabet;
  for (const auto& [ch, c] : char_counts) alphabet.push_back(ch);
  if (options.limit_alphabet > 0 && static_cast<int64_t>(alphabet.size()) > options.limit_alphabet) {
    std::stable_sort(alphabet.begin(), alphabet.end(),
                     [&](char32_t x, char32_t y) { return char_counts[x] > char_counts[y]; });
    alphabet.resize(static_cast<size_t>(options.limit_alphabet));
    std::sort(alphabet.begin(), alphabet.end());
  }
  const std::string& prefix = options.continuing_subword_prefix;
  std::unordered_map<char32_t, uint32_t> first_id, cont_id;
  for (char32_t ch : alphabet) first_id[ch] = add(unicode::encode_utf8(std::u32string(1, ch)));
  for (char32_t ch : alphabet) cont_id[ch] = add(prefix + unicode::encode_utf8(std::u32string(1, ch)));

  // 3. Words as piece ids (a word with a character outside a limited alphabet is left out:
  //    it would be [UNK] whatever is merged).
  std::vector<Word> words;
  words.reserve(sorted_words.size());
  for (auto& [w, c] : sorted_words) {
    Word word{{}, c};
    bool ok = true;
    for (size_t i = 0; i < w.size() && ok; ++i) {
      auto& table = i == 0 ? first_id : cont_id;
      auto it = table.find(w[i]);
      if (it == table.end()) ok = false;
      else word.pieces.push_back(it->second);
    }
    if (ok) words.push_back(std::move(word));
  }
  sorted_words.clear();

  // 4. Pair counts, which words hold each pair, and the heap.
  std::unordered_map<PairKey, int64_t> pair_counts;
  std::unordered_map<PairKey, std::vector<uint32_t>> where_pair;
  for (size_t wi = 0; wi < words.size(); ++wi) {
    const auto& p = words[wi].pieces;
    for (size_t i = 0; i + 1 < p.size(); ++i) {
      PairKey k = key(p[i], p[i + 1]);
      pair_counts[k] += words[wi].count;
      auto& list = where_pair[k];
      if (list.empty() || list.back() != wi) list.push_back(static_cast<uint32_t>(wi));
    }
  }
  std::priority_queue<HeapEntry> heap;
  for (const auto& [k, c] : pair_counts) heap.push({c, k});

  // 5. Merge until the vocabulary is full or no pair is frequent enough.
  std::unordered_map<PairKey, int64_t> delta;
  while (static_cast<int64_t>(tokens.size()) < options.vocab_size && !heap.empty()) {
    HeapEntry top = heap.top();
    heap.pop();
    auto cit = pair_counts.find(top.pair);
    int64_t current = cit == pair_counts.end() ? 0 : cit->second;
    if (current != top.count) {  // stale: counts changed since it was pushed
      if (current > 0) heap.push({current, top.pair});
      continue;
    }
    if (current <= 0 || current < options.min_frequency) break;
    uint32_t a = static_cast<uint32_t>(top.pair >> 32), b = static_cast<uint32_t>(top.pair);
    std::string second = tokens[b];
    if (second.rfind(prefix, 0) == 0) second.erase(0, prefix.size());
    uint32_t merged = add(tokens[a] + second);
    // Update each word holding the pair: subtract its old pairs, merge, add its new pairs.
    std::vector<uint32_t> holders = std::move(where_pair[top.pair]);
    where_pair.erase(top.pair);
    delta.clear();
    for (uint32_t wi : holders) {
      Word& w = words[wi];
      std::vector<uint32_t> before = w.pieces;
      if (!merge_word(w.pieces, a, b, merged)) continue;
      count_pairs(before, -w.count, delta);
      count_pairs(w.pieces, w.count, delta);
      // This word's entries for a pair are pushed together, so checking the last one lists
      // it once per merge, not once per occurrence: a word listed n times would be merged
      // (and copied) n times by the pair's merge, quadratic in its length.
      for (size_t i = 0; i + 1 < w.pieces.size(); ++i) {
        if (w.pieces[i] != merged && w.pieces[i + 1] != merged) continue;
        auto& list = where_pair[key(w.pieces[i], w.pieces[i + 1])];
        if (list.empty() || list.back() != wi) list.push_back(wi);
      }
    }
    for (const auto& [k, d] : delta) {
      if (d == 0) continue;
      int64_t& c = pair_counts[k];
      c += d;
      if (d > 0) heap.push({c, k});
      if (c == 0) pair_counts.erase(k);
    }
  }
  return Vocab(std::move(tokens));
}

}  // namespace kiln::text
