// MLM data preparation: tokenise documents, split them train/held-out, pack into sequences.
#include <algorithm>
#include <cmath>

#include "core/philox.h"
#include "kiln/error.h"
#include "kiln/text/mlm.h"

namespace kiln::text {

TokenSequences pack_sequences(const TokenSequences& documents, int64_t max_length, int64_t cls_token_id,
                              int64_t sep_token_id) {
  KILN_CHECK(max_length >= 3, "pack_sequences", "max_length must be at least 3 ([CLS] x [SEP]), got ", max_length);
  const size_t cap = static_cast<size_t>(max_length);
  TokenSequences out;
  std::vector<int64_t> current;
  auto flush = [&] {
    if (current.size() > 1) out.push_back(std::move(current));
    current.clear();
  };
  for (const std::vector<int64_t>& doc : documents) {
    if (doc.empty()) continue;
    if (!current.empty() && current.size() + doc.size() + 1 > cap) flush();
    if (doc.size() + 2 > cap) {  // too long for one sequence: pieces of cap - 2
      flush();
      for (size_t start = 0; start < doc.size(); start += cap - 2) {
        size_t end = std::min(doc.size(), start + cap - 2);
        current.push_back(cls_token_id);
        current.insert(current.end(), doc.begin() + static_cast<std::ptrdiff_t>(start),
                       doc.begin() + static_cast<std::ptrdiff_t>(end));
        current.push_back(sep_token_id);
        flush();
      }
      continue;
    }
    if (current.empty()) current.push_back(cls_token_id);
    current.insert(current.end(), doc.begin(), doc.end());
    current.push_back(sep_token_id);
  }
  flush();
  return out;
}

MlmData prepare_mlm_data(const BertTokenizer& tokenizer, const std::vector<std::string>& documents,
                         const MlmDataOptions& options) {
  const char* where = "prepare_mlm_data";
  KILN_CHECK(!documents.empty(), where, "no documents");
  KILN_CHECK(options.held_out_fraction >= 0 && options.held_out_fraction < 1, where,
             "held_out_fraction must be in [0, 1), got ", options.held_out_fraction);
  const int64_t n = static_cast<int64_t>(documents.size());
  TokenSequences ids(documents.size());
  // The tokenizer is read-only, so documents tokenise in parallel.
#pragma omp parallel for schedule(dynamic, 64)
  for (int64_t i = 0; i < n; ++i) ids[static_cast<size_t>(i)] = tokenizer.encode(documents[static_cast<size_t>(i)], false);
  int64_t total = 0;
  for (const auto& d : ids) total += static_cast<int64_t>(d.size());
  KILN_CHECK(total > 0, where, "the ", n, " documents give no tokens");

  // A document is held out when its Philox draw falls below the fraction: a per-document
  // decision, so adding documents does not move the others.
  TokenSequences train_docs, held_docs;
  for (int64_t i = 0; i < n; ++i) {
    double u = philox::uniform01(philox::philox(options.seed ^ 0x243F6A8885A308D3ULL, static_cast<uint64_t>(i)).v[0]);
    (u < options.held_out_fraction ? held_docs : train_docs).push_back(std::move(ids[static_cast<size_t>(i)]));
  }
  MlmData data;
  data.documents = n;
  data.train = pack_sequences(train_docs, options.max_length, tokenizer.cls_token_id(), tokenizer.sep_token_id());
  data.held_out = pack_sequences(held_docs, options.max_length, tokenizer.cls_token_id(), tokenizer.sep_token_id());
  // Neither part empty where there is enough for both: training first (a few short documents
  // could all draw "held out").
  if (data.train.empty()) {
    data.train.push_back(std::move(data.held_out.back()));
    data.held_out.pop_back();
  }
  if (options.held_out_fraction > 0 && data.held_out.empty() && data.train.size() >= 2) {
    data.held_out.push_back(std::move(data.train.back()));
    data.train.pop_back();
  }
  for (const auto& s : data.train) data.train_tokens += static_cast<int64_t>(s.size());
  for (const auto& s : data.held_out) data.held_out_tokens += static_cast<int64_t>(s.size());
  return data;
}

}  // namespace kiln::text
