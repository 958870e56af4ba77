// MLM data: packing, the train/held-out split, and the batcher's masking statistics.
#include <set>

#include "kiln/text.h"
#include "test_util.h"

namespace kiln::text {
namespace {

const std::string kVocab = std::string(KILN_SOURCE_DIR) + "/tests/fixtures/text/vocab_uncased.txt";

TEST(TextMlm, PackKeepsDocumentsWholeAndCutsLongOnes) {
  const int64_t C = 2, S = 3;
  TokenSequences docs = {{10, 11}, {}, {12, 13, 14}, {20, 21, 22, 23, 24, 25, 26, 27, 28}, {30}};
  TokenSequences packed = pack_sequences(docs, 8, C, S);
  TokenSequences want = {{C, 10, 11, S, 12, 13, 14, S},
                         {C, 20, 21, 22, 23, 24, 25, S},
                         {C, 26, 27, 28, S},
                         {C, 30, S}};
  EXPECT_EQ(packed, want);
  test::expect_error([&] { pack_sequences(docs, 2, C, S); }, "[pack_sequences] max_length must be at least 3");
}

TEST(TextMlm, PrepareSplitsByDocumentDeterministically) {
  BertTokenizer tok = BertTokenizer::from_file(kVocab);
  std::vector<std::string> docs;
  for (int i = 0; i < 400; ++i) docs.push_back("fortune number " + std::to_string(i) + " says you will be hungry again.");
  MlmData a = prepare_mlm_data(tok, docs, {.max_length = 64, .held_out_fraction = 0.1, .seed = 7});
  MlmData b = prepare_mlm_data(tok, docs, {.max_length = 64, .held_out_fraction = 0.1, .seed = 7});
  MlmData c = prepare_mlm_data(tok, docs, {.max_length = 64, .held_out_fraction = 0.1, .seed = 8});
  EXPECT_EQ(a.train, b.train);
  EXPECT_EQ(a.held_out, b.held_out);
  EXPECT_NE(a.held_out, c.held_out);
  EXPECT_EQ(a.documents, 400);
  ASSERT_FALSE(a.held_out.empty());
  double share = static_cast<double>(a.held_out_tokens) / static_cast<double>(a.train_tokens + a.held_out_tokens);
  EXPECT_GT(share, 0.04);
  EXPECT_LT(share, 0.2);
  int64_t count = 0;
  for (const TokenSequences* part : {&a.train, &a.held_out})
    for (const auto& s : *part) {
      EXPECT_LE(s.size(), 64u);
      EXPECT_EQ(s.front(), tok.cls_token_id());
      EXPECT_EQ(s.back(), tok.sep_token_id());
      count += static_cast<int64_t>(s.size());
    }
  EXPECT_EQ(count, a.train_tokens + a.held_out_tokens);
  // One long document still gives a held-out sequence.
  MlmData one = prepare_mlm_data(tok, {std::string(2000, 'a') + " " + std::string(3000, 'b') + " the the the the"},
                                 {.max_length = 3});
  EXPECT_EQ(one.held_out.size(), 1u);
  // A document that draws "held out" alone still trains (seed 1 holds "hello world" out at 0.5).
  for (uint64_t seed = 0; seed < 8; ++seed) {
    MlmData small = prepare_mlm_data(tok, {"hello world"}, {.max_length = 16, .held_out_fraction = 0.5, .seed = seed});
    EXPECT_EQ(small.train.size(), 1u) << seed;
    EXPECT_TRUE(small.held_out.empty()) << seed;
  }
  test::expect_error([&] { prepare_mlm_data(tok, {}); }, "[prepare_mlm_data] no documents");
  test::expect_error([&] { prepare_mlm_data(tok, {" ", "\x01"}); }, "give no tokens");
}

class TextPreparation : public test::TempDirTest {};

TEST_F(TextPreparation, FiftyMegabyteCorpusOfOneWordIsOneUnknownToken) {
  // A corpus with no spaces at all: every stage must stay linear in its length (the WordPiece
  // trainer was quadratic in it: 34 s for 400 kB, days for this).
  const std::string pattern = "abcdefghijklmnopqrstuvwxyz0123456789ABC\u0416";  // Ж, two bytes
  std::string word;
  word.reserve((50u << 20) + pattern.size());
  while (word.size() < (50u << 20)) word += pattern;
  std::vector<std::string> docs = read_corpus(write("one_word.txt", word));
  ASSERT_EQ(docs.size(), 1u);
  EXPECT_EQ(docs[0].size(), word.size());
  word = std::string();

  // The word is too long to merge: the specials and the alphabet (lower-cased), each also
  // with "##", in code point order.
  Vocab vocab = train_wordpiece(docs, {.vocab_size = 8000});
  std::vector<std::string> alphabet;
  for (char c = '0'; c <= '9'; ++c) alphabet.emplace_back(1, c);
  for (char c = 'a'; c <= 'z'; ++c) alphabet.emplace_back(1, c);
  alphabet.emplace_back("\u0436");  // ж
  std::vector<std::string> want = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};
  for (const std::string& c : alphabet) want.push_back(c);
  for (const std::string& c : alphabet) want.push_back("##" + c);
  EXPECT_EQ(vocab.tokens(), want);

  BertTokenizer tok(vocab);
  const int64_t C = tok.cls_token_id(), U = tok.unk_token_id(), S = tok.sep_token_id();
  MlmData data = prepare_mlm_data(tok, docs, {.max_length = 128});
  EXPECT_EQ(data.documents, 1);
  EXPECT_EQ(data.train, (TokenSequences{{C, U, S}}));
  EXPECT_TRUE(data.held_out.empty());
  EXPECT_EQ(data.train_tokens, 3);
}

TokenSequences random_sequences(const BertTokenizer& tok, int n, int64_t max_len) {
  TokenSequences seqs;
  uint64_t state = 12345;
  for (int i = 0; i < n; ++i) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    int64_t len = 3 + static_cast<int64_t>((state >> 33) % static_cast<uint64_t>(max_len - 2));
    std::vector<int64_t> s{tok.cls_token_id()};
    for (int64_t j = 1; j + 1 < len; ++j) {
      state = state * 6364136223846793005ULL + 1442695040888963407ULL;
      s.push_back(5 + static_cast<int64_t>((state >> 33) % static_cast<uint64_t>(tok.vocab_size() - 5)));
    }
    s.push_back(tok.sep_token_id());
    seqs.push_back(s);
  }
  return seqs;
}

TEST(TextMlm, BatcherMasksFifteenPercentEightyTenTen) {
  BertTokenizer tok = BertTokenizer::from_file(kVocab);
  TokenSequences seqs = random_sequences(tok, 64, 128);
  MlmBatcher batcher(tok, {.seed = 3});
  int64_t eligible = 0, chosen = 0, masked = 0, randomised = 0, kept = 0;
  for (int round = 0; round < 40; ++round) {
    MlmBatch batch = batcher.collate(seqs);
    int64_t B = batch.input_ids.size(0), S = batch.input_ids.size(1);
    ASSERT_EQ(B, 64);
    EXPECT_EQ(batch.input_ids.dtype(), kInt64);
    EXPECT_EQ(batch.labels.shape(), batch.input_ids.shape());
    std::vector<int64_t> in = batch.input_ids.to_vector<int64_t>(), lab = batch.labels.to_vector<int64_t>(),
                         att = batch.attention_mask.to_vector<int64_t>(), tt = batch.token_type_ids.to_vector<int64_t>();
    int64_t longest = 0, predicted = 0;
    for (int64_t b = 0; b < B; ++b) {
      const auto& s = seqs[static_cast<size_t>(b)];
      longest = std::max<int64_t>(longest, static_cast<int64_t>(s.size()));
      for (int64_t j = 0; j < S; ++j) {
        size_t at = static_cast<size_t>(b * S + j);
        EXPECT_EQ(tt[at], 0);
        if (j >= static_cast<int64_t>(s.size())) {  // padding: never chosen
          EXPECT_EQ(in[at], tok.pad_token_id());
          EXPECT_EQ(att[at], 0);
          EXPECT_EQ(lab[at], -100);
          continue;
        }
        EXPECT_EQ(att[at], 1);
        int64_t orig = s[static_cast<size_t>(j)];
        if (tok.is_special(orig)) {  // [CLS]/[SEP]: never chosen, never changed
          EXPECT_EQ(lab[at], -100);
          EXPECT_EQ(in[at], orig);
          continue;
        }
        ++eligible;
        if (lab[at] == -100) {
          EXPECT_EQ(in[at], orig);
          continue;
        }
        EXPECT_EQ(lab[at], orig);
        ++chosen;
        ++predicted;
        if (in[at] == tok.mask_token_id()) ++masked;
        else if (in[at] == orig) ++kept;
        else {
          ++randomised;
          EXPECT_FALSE(tok.is_special(in[at]));
        }
      }
    }
    EXPECT_EQ(S, longest);  // padded to the longest in the batch
    EXPECT_EQ(batch.num_predicted, predicted);
  }
  ASSERT_GT(eligible, 100000);
  double p = static_cast<double>(chosen) / static_cast<double>(eligible);
  EXPECT_NEAR(p, 0.15, 0.005);
  // A random replacement equal to the original counts as kept: 1 / vocab of the 10%.
  EXPECT_NEAR(static_cast<double>(masked) / static_cast<double>(chosen), 0.8, 0.01);
  EXPECT_NEAR(static_cast<double>(randomised) / static_cast<double>(chosen), 0.1, 0.01);
  EXPECT_NEAR(static_cast<double>(kept) / static_cast<double>(chosen), 0.1, 0.01);
}

TEST(TextMlm, BatcherIsDeterministicForASeedAndPadsToMaxLength) {
  BertTokenizer tok = BertTokenizer::from_file(kVocab);
  TokenSequences seqs = random_sequences(tok, 8, 40);
  MlmBatcher a(tok, {.max_length = 40, .pad_to_max_length = true, .seed = 11});
  MlmBatcher b(tok, {.max_length = 40, .pad_to_max_length = true, .seed = 11});
  MlmBatcher c(tok, {.max_length = 40, .pad_to_max_length = true, .seed = 12});
  MlmBatch a1 = a.collate(seqs), a2 = a.collate(seqs), b1 = b.collate(seqs), c1 = c.collate(seqs);
  EXPECT_EQ(a1.input_ids.shape(), (Shape{8, 40}));
  EXPECT_EQ(a1.input_ids.to_vector<int64_t>(), b1.input_ids.to_vector<int64_t>());
  EXPECT_EQ(a1.labels.to_vector<int64_t>(), b1.labels.to_vector<int64_t>());
  EXPECT_NE(a1.labels.to_vector<int64_t>(), a2.labels.to_vector<int64_t>());  // the stream moves on
  EXPECT_NE(a1.labels.to_vector<int64_t>(), c1.labels.to_vector<int64_t>());
  a.set_offset(0);
  EXPECT_EQ(a.collate(seqs).labels.to_vector<int64_t>(), a1.labels.to_vector<int64_t>());
  // Indices select sequences.
  MlmBatcher d(tok, {.max_length = 40, .seed = 11});
  EXPECT_EQ(d.collate(seqs, {2, 5}).input_ids.size(0), 2);
}

TEST(TextMlm, BatcherErrors) {
  BertTokenizer tok = BertTokenizer::from_file(kVocab);
  MlmBatcher batcher(tok, {.max_length = 8});
  test::expect_error([&] { batcher.collate(TokenSequences{}); }, "[MlmBatcher::collate] empty batch");
  test::expect_error([&] { batcher.collate(TokenSequences{{2, 3}, {}}); }, "sequence 1 is empty");
  test::expect_error([&] { batcher.collate(TokenSequences{std::vector<int64_t>(9, 5)}); }, "more than max_length 8");
  test::expect_error([&] { batcher.collate(TokenSequences{{2, tok.vocab_size(), 3}}); }, "is outside the vocabulary");
  test::expect_error([&] { batcher.collate(TokenSequences{{2, 3}}, {1}); }, "index 1 is outside");
  test::expect_error([&] { MlmBatcher(tok, {.mlm_probability = 1.5}); }, "[MlmBatcher] mlm_probability");
  test::expect_error([&] { MlmBatcher(tok, {.mask_replace_prob = 0.8, .random_replace_prob = 0.3}); }, "at most 1");
}

TEST(TextMlm, EpochBatchesArePermutations) {
  auto e0 = epoch_batches(10, 4, true, 1, 0), e0b = epoch_batches(10, 4, true, 1, 0), e1 = epoch_batches(10, 4, true, 1, 1);
  EXPECT_EQ(e0, e0b);
  EXPECT_NE(e0, e1);
  ASSERT_EQ(e0.size(), 3u);
  EXPECT_EQ(e0[2].size(), 2u);
  std::set<int64_t> all;
  for (auto& b : e0) all.insert(b.begin(), b.end());
  EXPECT_EQ(all.size(), 10u);
  EXPECT_EQ(epoch_batches(10, 4, false, 0, 0, true), (std::vector<std::vector<int64_t>>{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  test::expect_error([] { epoch_batches(3, 0, false, 0, 0); }, "[epoch_batches] batch_size must be positive");
}

}  // namespace
}  // namespace kiln::text
