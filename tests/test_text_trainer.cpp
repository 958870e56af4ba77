// The WordPiece trainer: specials first, every character present, deterministic, merges
// that cover the training text; and the corpus reader's formats and errors.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "kiln/text.h"
#include "test_util.h"
#include "text/unicode.h"

namespace kiln::text {
namespace {

const std::vector<std::string> kCorpus = {
    "The quick brown fox jumps over the lazy dog.",
    "A fortune cookie: you will be hungry again in one hour!",
    "Café crème, naïve résumé; 中文 text and émoji 😀.",
    "the the the then there these theses thesis",
    "Hungry hungry hippos: the hungriest of them all.",
};

TEST(TextTrainer, SpecialsFirstThenAlphabetThenMerges) {
  Vocab v = train_wordpiece(kCorpus, {.vocab_size = 120});
  const std::vector<std::string> specials = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};
  for (size_t i = 0; i < specials.size(); ++i) EXPECT_EQ(v.token(static_cast<int64_t>(i)), specials[i]);
  EXPECT_EQ(v.size(), 120);
  // With room for every merge, training stops when each word is one piece.
  Vocab full = train_wordpiece(kCorpus, {.vocab_size = 1000});
  EXPECT_LT(full.size(), 1000);
  for (std::string w : {"quick", "hungriest", "theses", "fortune"}) EXPECT_TRUE(full.contains(w)) << w;
  // Every character of the normalised corpus is a token, and so is its "##" form.
  for (std::string c : {"t", "h", "e", "q", ".", "!", ":", ";", "中", "文", "😀", "c", "a", "f", "n", "i", "v"}) {
    EXPECT_TRUE(v.contains(c)) << c;
    EXPECT_TRUE(v.contains("##" + c)) << c;
  }
  // Lower-cased with accents stripped (BERT uncased): no capitals, no "é".
  EXPECT_FALSE(v.contains("T"));
  EXPECT_FALSE(v.contains("é"));
  // The most frequent pairs were merged: "the" occurs 9 times.
  EXPECT_TRUE(v.contains("th"));
  EXPECT_TRUE(v.contains("the"));
  // Merged pieces come after the alphabet.
  EXPECT_GT(v.find("the"), v.find("##😀"));
}

TEST(TextTrainer, DeterministicAndCoversItsTrainingText) {
  std::vector<std::string> corpus = read_corpus(std::string(KILN_SOURCE_DIR) + "/README.md");
  WordPieceTrainerOptions opts{.vocab_size = 600, .min_frequency = 2};
  Vocab a = train_wordpiece(corpus, opts);
  Vocab b = train_wordpiece(corpus, opts);
  EXPECT_EQ(a.tokens(), b.tokens());
  BertTokenizer tok(a);
  int64_t pieces = 0, words = 0;
  for (const std::string& doc : corpus) {
    std::vector<int64_t> ids = tok.encode(doc, false);
    for (int64_t id : ids) EXPECT_NE(id, tok.unk_token_id()) << doc.substr(0, 80);
    pieces += static_cast<int64_t>(ids.size());
    words += static_cast<int64_t>(tok.tokenize(doc).size());
  }
  EXPECT_GT(pieces, 0);
  // Merges make whole words: far fewer pieces than characters.
  std::string all;
  for (const auto& d : corpus) all += d;
  EXPECT_LT(pieces * 2, static_cast<int64_t>(all.size()));
  // Cased training keeps capitals.
  Vocab cased = train_wordpiece(corpus, {.vocab_size = 300, .do_lower_case = false});
  EXPECT_TRUE(cased.contains("K"));
}

TEST(TextTrainer, MinFrequencyAndLimitsAndErrors) {
  // With min_frequency above every pair count, only specials and the alphabet remain.
  Vocab v = train_wordpiece({"abc abd"}, {.vocab_size = 100, .min_frequency = 3});
  // specials + {a, b, c, d} + {##a, ##b, ##c, ##d}
  EXPECT_EQ(v.size(), 5 + 4 + 4);
  Vocab merged = train_wordpiece({"abc abd"}, {.vocab_size = 100, .min_frequency = 2});
  EXPECT_EQ(merged.size(), 5 + 8 + 1);
  EXPECT_EQ(merged.token(13), "ab");
  // The alphabet is kept whole even past vocab_size.
  EXPECT_EQ(train_wordpiece({"abc abd"}, {.vocab_size = 6}).size(), 13);
  Vocab limited = train_wordpiece({"aaaa bbb cc d"}, {.vocab_size = 100, .limit_alphabet = 2});
  EXPECT_TRUE(limited.contains("a"));
  EXPECT_FALSE(limited.contains("d"));
  test::expect_error([] { train_wordpiece({"", "  \t", "\x01"}); }, "[train_wordpiece] the corpus (3 texts) has no words");
  test::expect_error([] { train_wordpiece({"a"}, {.vocab_size = 0}); }, "vocab_size must be positive");
  test::expect_error([] { train_wordpiece({"a"}, {.special_tokens = {"[PAD]", "[PAD]"}}); }, "listed twice");
}

TEST(TextTrainer, WordsTooLongForTheTokenizerGiveOnlyTheirCharacters) {
  // BertTokenizer reads a word of more than max_input_chars_per_word (100) characters as
  // [UNK], so the trainer learns no merges inside it: "ab" is learnt, nothing of x's.
  const std::string x101(101, 'x'), x100(100, 'x');
  Vocab v = train_wordpiece({"ab ab " + x101}, {.vocab_size = 100});
  EXPECT_EQ(v.size(), 5 + 6 + 1);
  EXPECT_EQ(v.token(11), "ab");
  EXPECT_TRUE(v.contains("x"));
  EXPECT_TRUE(v.contains("##x"));
  EXPECT_EQ(BertTokenizer(v).tokenize(x101), std::vector<std::string>{"[UNK]"});
  // At the limit, or with a larger one, the word is merged as any other.
  EXPECT_TRUE(train_wordpiece({"ab ab " + x101}, {.vocab_size = 100, .max_input_chars_per_word = 101}).contains("##xx"));
  Vocab at_limit = train_wordpiece({x100});
  EXPECT_TRUE(at_limit.contains("##xx"));
  for (const std::string& t : BertTokenizer(at_limit).tokenize(x100)) EXPECT_NE(t, "[UNK]");
  // A corpus of long words alone still has an alphabet.
  EXPECT_EQ(train_wordpiece({std::string(1000, 'y') + "Z"}).tokens(),
            (std::vector<std::string>{"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "y", "z", "##y", "##z"}));
  test::expect_error([] { train_wordpiece({"a"}, {.max_input_chars_per_word = 0}); },
                     "[train_wordpiece] max_input_chars_per_word must be positive, got 0");
}

class TextCorpus : public test::TempDirTest {};

TEST_F(TextCorpus, FormatsFortuneBlankLinesAndOnePerLine) {
  EXPECT_EQ(read_corpus(write("f", "one\nline two\n%\n\nthree\n%\n%\nfour\n")),
            (std::vector<std::string>{"one\nline two", "three", "four"}));
  EXPECT_EQ(read_corpus(write("b.txt", "para one\nstill one\n\n\n  para two  \r\n\nthree")),
            (std::vector<std::string>{"para one\nstill one", "para two", "three"}));
  EXPECT_EQ(read_corpus(write("l.txt", "a\r\nb\nc")), (std::vector<std::string>{"a", "b", "c"}));
  // A few invalid bytes in text read as U+FFFD.
  EXPECT_EQ(read_corpus(write("x.txt", "caf\xe9 is fine in a long enough line of text: one bad byte in more than a hundred bytes is still text.")).size(), 1u);
}

TEST_F(TextCorpus, DirectorySkipsIndicesLinksAndHiddenFiles) {
  std::filesystem::create_directories(dir_ + "/d/sub");
  std::string d = dir_ + "/d/";
  std::ofstream(d + "b") << "bee\n%\nbee two\n";
  std::ofstream(d + "a") << "ay\n%\n";
  std::ofstream(d + "a.dat", std::ios::binary) << std::string("\0\0\0\x02\x01\xff", 6);  // strfile index
  std::ofstream(d + ".hidden") << "no\n";
  std::ofstream(d + "sub/c") << "not read: subdirectories are skipped\n";
  std::filesystem::create_symlink("a", d + "a.u8");
  std::filesystem::create_symlink("zz", d + "dangling");
  EXPECT_EQ(read_corpus(d), (std::vector<std::string>{"ay", "bee", "bee two"}));
  // A binary file that is not an index is an error naming it.
  std::ofstream(d + "blob.bin", std::ios::binary) << std::string("ab\0cd", 5);
  test::expect_error([&] { read_corpus(d); }, "blob.bin: has a NUL byte at offset 2");
}

TEST_F(TextCorpus, ErrorsForMissingEmptyAndBinary) {
  test::expect_error([&] { read_corpus(dir_ + "/nope"); }, "[read_corpus] " + dir_ + "/nope: does not exist");
  test::expect_error([&] { read_corpus(write("empty.txt", "")); }, "has no documents (an empty corpus)");
  test::expect_error([&] { read_corpus(write("ws.txt", "\n\n  \n%\n")); }, "has no documents");
  std::filesystem::create_directories(dir_ + "/emptydir");
  test::expect_error([&] { read_corpus(dir_ + "/emptydir"); }, "has no documents");
  std::string junk;
  for (int i = 0; i < 1000; ++i) junk.push_back(static_cast<char>(0x80 + (i * 37) % 120));
  test::expect_error([&] { read_corpus(write("junk.txt", junk)); }, "invalid UTF-8 sequences in 1000 bytes");
  test::expect_error([&] { read_corpus(write("nul.txt", std::string("text\0", 5))); }, "NUL byte at offset 4");
}

// A FIFO blocked the open until a writer came (forever, for `kiln train --data fifo`), and
// /dev/zero was read up to the 4 GiB limit. Both are refused at once, as InputFile does.
// A pipe is read to its end (kiln train --data <(zcat corpus.gz)); a device is refused, not read
// until the size limit.
TEST_F(TextCorpus, PipesAreReadAndDevicesRefused) {
  const std::string fifo = dir_ + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::thread writer([&] {
    int fd = ::open(fifo.c_str(), O_WRONLY | O_CLOEXEC);  // waits for the reader
    if (fd < 0) return;
    const std::string text = "first document\n\nsecond document\n";
    (void)!::write(fd, text.data(), text.size());
    ::close(fd);
  });
  std::vector<std::string> docs;
  try {
    docs = read_corpus(fifo);
  } catch (const Error& e) {
    ADD_FAILURE() << e.what();
    int release = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);  // so the writer ends
    writer.join();
    if (release >= 0) ::close(release);
    return;
  }
  writer.join();
  EXPECT_EQ(docs, (std::vector<std::string>{"first document", "second document"}));
  test::expect_error([&] { Vocab::from_file("/dev/zero"); }, "[Vocab::from_file] /dev/zero: not a regular file or a pipe");
  test::expect_error([&] { read_corpus("/dev/null"); }, "[read_corpus] /dev/null: not a regular file or a pipe");
}

TEST(TextCorpusFortunes, ReadsEachFileOnce) {
  std::string path = default_corpus_path();
  if (path.empty()) GTEST_SKIP() << "Debian's fortunes package is not installed";
  std::vector<std::string> docs = read_corpus(path);
  EXPECT_GT(docs.size(), 1000u);
  std::set<std::string> unique(docs.begin(), docs.end());
  // Without the .u8 links being skipped every document would appear twice.
  EXPECT_GT(unique.size() * 10, docs.size() * 9);
}

}  // namespace
}  // namespace kiln::text
