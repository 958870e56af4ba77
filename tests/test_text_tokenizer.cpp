// BertTokenizer against Hugging Face's ids (tests/fixtures/text/, made by make_tokenizer_fixture.py),
// plus vocabulary errors and invalid UTF-8.
#include <filesystem>
#include <fstream>

#include "io/json.h"
#include "kiln/text.h"
#include "test_util.h"
#include "text/bert_normalizer.h"
#include "text/read_file.h"
#include "text/unicode.h"

namespace kiln::text {
namespace {

using io::json::Value;
const std::string kDir = std::string(KILN_SOURCE_DIR) + "/tests/fixtures/text/";

// The key is a view, not a std::string: g++ 14 takes a reference returned from a call with a
// temporary string argument for a dangling one.
const Value& member(const Value& v, std::string_view key) {
  for (const auto& m : v.members)
    if (m.key == key) return m.value;
  throw std::runtime_error("fixture has no member " + std::string(key));
}

std::vector<int64_t> ints(const Value& v) {
  std::vector<int64_t> out;
  for (const Value& x : v.items) out.push_back(x.integer);
  return out;
}

std::vector<std::string> strings(const Value& v) {
  std::vector<std::string> out;
  for (const Value& x : v.items) out.push_back(x.text);
  return out;
}

const Value& fixture() {
  static const Value v = io::json::parse(detail::read_file(kDir + "bert_tokenizer.json", "test"), "test", "");
  return v;
}

BertTokenizerOptions options_of(const Value& cfg) {
  BertTokenizerOptions o;
  o.do_lower_case = member(cfg, "do_lower_case").boolean;
  const Value& strip = member(cfg, "strip_accents");
  if (strip.kind == Value::Kind::Bool) o.strip_accents = strip.boolean;
  o.tokenize_chinese_chars = member(cfg, "tokenize_chinese_chars").boolean;
  return o;
}

TEST(TextTokenizer, MatchesHuggingFaceOnEveryFixtureString) {
  const Value& fx = fixture();
  std::vector<std::string> texts = strings(member(fx, "strings"));
  ASSERT_GE(texts.size(), 60u);
  ASSERT_EQ(member(fx, "configs").items.size(), 5u);
  for (const Value& cfg : member(fx, "configs").items) {
    std::string name = member(cfg, "name").text;
    BertTokenizer tok = BertTokenizer::from_file(kDir + member(cfg, "vocab").text, options_of(cfg));
    const Value& tokens = member(cfg, "tokens");
    const Value& ids = member(cfg, "ids");
    const Value& dec = member(cfg, "decode");
    const Value& dec_skip = member(cfg, "decode_skip");
    ASSERT_EQ(tokens.items.size(), texts.size());
    for (size_t i = 0; i < texts.size(); ++i) {
      std::string what = name + " string " + std::to_string(i) + " \"" + texts[i].substr(0, 40) + "\"";
      EXPECT_EQ(tok.tokenize(texts[i]), strings(tokens.items[i])) << what;
      std::vector<int64_t> want = ints(ids.items[i]);
      EXPECT_EQ(tok.encode(texts[i]), want) << what;
      EXPECT_EQ(tok.decode(want), dec.items[i].text) << what;
      EXPECT_EQ(tok.decode(want, /*skip_special_tokens=*/true), dec_skip.items[i].text) << what;
    }
  }
}

// The generated tables against tokenizers' normaliser and pre-tokenizer on ~12,000 code points.
TEST(TextTokenizer, UnicodeSweepMatchesHuggingFaceNormalizer) {
  Value fx = io::json::parse(detail::read_file(kDir + "unicode_sweep.json", "test"), "test", "");
  std::vector<std::string> texts = strings(member(fx, "texts"));
  ASSERT_GT(texts.size(), 700u);
  for (const Value& cfg : member(fx, "configs").items) {
    bool lower = member(cfg, "lowercase").boolean;
    detail::NormalizerOptions opts{lower, member(cfg, "strip_accents").boolean, true};
    const Value& words = member(cfg, "words");
    ASSERT_EQ(words.items.size(), texts.size());
    int failures = 0;
    for (size_t i = 0; i < texts.size() && failures < 10; ++i) {
      std::u32string norm;
      detail::normalize(texts[i], opts, norm);
      std::vector<std::string> got;
      detail::for_each_word(norm, [&](std::u32string_view w) { got.push_back(unicode::encode_utf8(w)); });
      std::vector<std::string> want = strings(words.items[i]);
      if (got != want) {
        ++failures;
        ADD_FAILURE() << "lowercase " << lower << " run " << i << " starting at U+" << std::hex
                      << static_cast<uint32_t>(unicode::decode_utf8(texts[i])[0]);
      }
    }
  }
}

TEST(TextTokenizer, TruncationAndPairsMatchHuggingFace) {
  for (const Value& cfg : member(fixture(), "configs").items) {
    BertTokenizer tok = BertTokenizer::from_file(kDir + member(cfg, "vocab").text, options_of(cfg));
    for (const Value& t : member(cfg, "truncate").items) {
      int64_t n = member(t, "max_length").integer;
      EXPECT_EQ(tok.encode(member(t, "text").text, true, n), ints(member(t, "ids"))) << member(t, "text").text << " " << n;
    }
    for (const Value& p : member(cfg, "pairs").items) {
      const Value& ml = member(p, "max_length");
      std::optional<int64_t> n;
      if (ml.kind == Value::Kind::Number) n = ml.integer;
      Encoding e = tok.encode_pair(member(p, "a").text, member(p, "b").text, true, n);
      std::string what = member(p, "a").text + " | " + member(p, "b").text;
      EXPECT_EQ(e.input_ids, ints(member(p, "ids"))) << what;
      EXPECT_EQ(e.token_type_ids, ints(member(p, "token_type_ids"))) << what;
      EXPECT_EQ(e.attention_mask, std::vector<int64_t>(e.input_ids.size(), 1)) << what;
    }
  }
}

TEST(TextTokenizer, SpecialTokenIdsAndLookups) {
  BertTokenizer tok = BertTokenizer::from_file(kDir + "vocab_uncased.txt");
  // The trainer put the specials first, in this order.
  EXPECT_EQ(tok.pad_token_id(), 0);
  EXPECT_EQ(tok.unk_token_id(), 1);
  EXPECT_EQ(tok.cls_token_id(), 2);
  EXPECT_EQ(tok.sep_token_id(), 3);
  EXPECT_EQ(tok.mask_token_id(), 4);
  EXPECT_TRUE(tok.is_special(4));
  EXPECT_FALSE(tok.is_special(5));
  EXPECT_GT(tok.vocab_size(), 2000);
  std::vector<std::string> toks = tok.tokenize("the fortune cookie");
  std::vector<int64_t> ids = tok.convert_tokens_to_ids(toks);
  EXPECT_EQ(tok.convert_ids_to_tokens(ids), toks);
  EXPECT_EQ(tok.token_to_id("no-such-token-here"), tok.unk_token_id());
  test::expect_error([&] { tok.id_to_token(tok.vocab_size()); }, "[BertTokenizer::id_to_token] id");
  test::expect_error([&] { tok.decode({2, -1}); }, "[BertTokenizer::decode] id -1");
  // max_length without truncation: a clear error; too small for the specials: an error.
  test::expect_error([&] { tok.encode("a b c d", true, 4, false); }, "exceeds max_length 4");
  test::expect_error([&] { tok.encode("a", true, 1); }, "leaves no room");
  test::expect_error([&] { tok.encode_pair("a", "b", true, 2); }, "leaves no room");
  EXPECT_EQ(tok.encode("a b c", false, 2), tok.encode("a b", false));
  EXPECT_EQ(tok.encode("a b", true, 4, false).size(), 4u);
}

TEST(TextTokenizer, InvalidUtf8IsReplacedAndDropped) {
  BertTokenizer tok = BertTokenizer::from_file(kDir + "vocab_uncased.txt");
  // Stray continuation bytes, a truncated sequence, an overlong '/', a surrogate, past U+10FFFF:
  // each reads as U+FFFD, which clean_text removes, so these equal the text without them.
  EXPECT_EQ(tok.tokenize("hel\x80lo wo\xe2\x82rld"), tok.tokenize("hello world"));
  EXPECT_EQ(tok.tokenize("a\xc0\xaf" "b \xed\xa0\x80x \xf4\x90\x80\x80y \xff\xfe"), tok.tokenize("ab x y "));
  EXPECT_EQ(tok.tokenize("caf\xc3"), tok.tokenize("caf"));  // truncated at the end
  EXPECT_TRUE(tok.tokenize(std::string("\x80\x80\x80\xff", 4)).empty());
}

TEST(TextTokenizer, Utf8DecoderReplacesMaximalInvalidSubsequences) {
  size_t bad = 0;
  // As Python's bytes.decode("utf-8", "replace"): "\xe2\x82" is one U+FFFD, "\xc0\xaf" two.
  EXPECT_EQ(unicode::decode_utf8("a\xe2\x82z", &bad), std::u32string(U"a\uFFFDz"));
  EXPECT_EQ(bad, 1u);
  EXPECT_EQ(unicode::decode_utf8("\xc0\xaf", &bad), std::u32string(U"\uFFFD\uFFFD"));
  EXPECT_EQ(bad, 2u);
  EXPECT_EQ(unicode::decode_utf8("\xf0\x9f\x98\x80\xc3\xa9", &bad), std::u32string(U"\U0001F600\u00E9"));
  EXPECT_EQ(bad, 0u);
  std::u32string all;
  for (char32_t cp = 1; cp < 0x110000; cp += 97)
    if (cp < 0xD800 || cp > 0xDFFF) all.push_back(cp);
  EXPECT_EQ(unicode::decode_utf8(unicode::encode_utf8(all), &bad), all);
  EXPECT_EQ(bad, 0u);
  // The count and the replaced text without a decoded copy (a corpus's check) agree with it.
  for (const std::string s : {"a\xe2\x82z", "\xc0\xaf", "caf\xc3", "\xed\xa0\x80x\xf4\x90\x80\x80y\xff", "ok \xc3\xa9"}) {
    const std::u32string decoded = unicode::decode_utf8(s, &bad);
    EXPECT_EQ(unicode::count_invalid_utf8(s), bad) << s;
    EXPECT_EQ(unicode::replace_invalid_utf8(s), unicode::encode_utf8(decoded)) << s;
  }
}

class TextVocabFile : public test::TempDirTest {};

TEST_F(TextVocabFile, BadFilesGiveClearErrors) {
  test::expect_error([&] { BertTokenizer::from_file(dir_ + "/missing.txt"); }, "[Vocab::from_file]");
  test::expect_error([&] { BertTokenizer::from_file(dir_ + "/missing.txt"); }, "does not exist");
  test::expect_error([&] { BertTokenizer::from_file(dir_); }, "is a directory");
  test::expect_error([&] { BertTokenizer::from_file(write("empty.txt", "")); }, "is empty");
  test::expect_error([&] { BertTokenizer::from_file(write("dup.txt", "[PAD]\n[UNK]\nab\n[CLS]\nab\n")); },
                     "token \"ab\" appears twice, on lines 3 and 5");
  {  // a long token is cut at a character's start: the message stays UTF-8
    std::string long_token = "a";
    for (int i = 0; i < 40; ++i) long_token += "\xc3\xa9";
    try {
      BertTokenizer::from_file(write("long.txt", "[PAD]\n" + long_token + "\n" + long_token + "\n"));
      ADD_FAILURE() << "a duplicated token was accepted";
    } catch (const Error& e) {
      EXPECT_TRUE(unicode::is_valid_utf8(e.what())) << e.what();
      EXPECT_NE(std::string(e.what()).find("a\xc3\xa9\xc3\xa9"), std::string::npos) << e.what();
    }
  }
  test::expect_error([&] { BertTokenizer::from_file(write("bin.txt", std::string("ab\0cd\n", 6))); }, "NUL byte");
  test::expect_error([&] { BertTokenizer::from_file(write("utf.txt", "[PAD]\nab\xff\n")); }, ":2: is not valid UTF-8");
  std::string no_mask = write("nomask.txt", "[PAD]\n[UNK]\n[CLS]\n[SEP]\nhello\n");
  test::expect_error([&] { BertTokenizer::from_file(no_mask); }, "[BertTokenizer::from_file] " + no_mask);
  test::expect_error([&] { BertTokenizer::from_file(no_mask); }, "has no mask_token \"[MASK]\"");
  test::expect_error([&] { BertTokenizer(Vocab({"[PAD]", "[CLS]"})); }, "has no unk_token");
  test::expect_error([&] { Vocab({"a", "b", "a"}); }, "[Vocab] duplicate token \"a\" at ids 0 and 2");
}

TEST_F(TextVocabFile, CrlfBlankLinesAndSaveRoundTrip) {
  // "\r\n" line ends are accepted; a blank line is an unused id (ids of later lines keep their place).
  Vocab v = Vocab::from_file(write("crlf.txt", "[PAD]\r\n[UNK]\r\n\r\n[CLS]\n[SEP]\n[MASK]\nhello"));
  EXPECT_EQ(v.size(), 7);
  EXPECT_EQ(v.find("[CLS]"), 3);
  EXPECT_EQ(v.find("hello"), 6);
  EXPECT_EQ(v.find(""), -1);
  BertTokenizer tok(v);
  EXPECT_EQ(tok.encode("Hello"), (std::vector<int64_t>{3, 6, 4}));
  std::string out = dir_ + "/saved.txt";
  v.save(out);
  Vocab back = Vocab::from_file(out);
  EXPECT_EQ(back.tokens(), v.tokens());
}

// Hugging Face's tokenizer (tokenizers' WordPiece::read_file) drops each line's trailing White_Space
// (Rust's trim_end); Kiln kept it, so "hello " never matched "hello". The expected ids are what
// transformers 5.25's BertTokenizer(vocab=...) gives for this file.
TEST_F(TextVocabFile, TrailingWhiteSpaceIsDroppedAsHuggingFaceDoes) {
  const std::string file = write("ws.txt",
                                 "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n"
                                 "hello \nworld\r\nfoo\xc2\xa0\n##s\t\n"   // U+0020, "\r", U+00A0, "\t"
                                 "bar\xe2\x80\x83\xe3\x80\x80\nbaz\x0b\x0c\nqux\xc2\x85\n"  // U+2003 U+3000, VT FF, U+0085
                                 "zap\xe1\xa0\x8e\nzip\xe2\x80\x8b\n");  // U+180E, U+200B: not White_Space, kept
  Vocab v = Vocab::from_file(file);
  EXPECT_EQ(v.tokens(), (std::vector<std::string>{"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "hello", "world",
                                                  "foo", "##s", "bar", "baz", "qux", "zap\xe1\xa0\x8e",
                                                  "zip\xe2\x80\x8b"}));
  BertTokenizer tok(v);
  EXPECT_EQ(tok.tokenize("hello world foo foos bar baz qux zap zip"),
            (std::vector<std::string>{"hello", "world", "foo", "foo", "##s", "bar", "baz", "qux", "[UNK]", "[UNK]"}));
  EXPECT_EQ(tok.encode("foos", false), (std::vector<int64_t>{7, 8}));
  // Lines that differ only in trailing white space are one token: still a duplicate (documented).
  test::expect_error([&] { Vocab::from_file(write("dup_ws.txt", "[PAD]\nab\nab \t\n")); },
                     "token \"ab\" appears twice, on lines 2 and 3");
  // A line of white space alone is a blank line: an unused id.
  EXPECT_EQ(Vocab::from_file(write("blank_ws.txt", "a\n \t\nb\n")).tokens(), (std::vector<std::string>{"a", "", "b"}));
}

// save wrote tokens that from_file then refused ("b" twice once "b\r" lost its "\r", a NUL byte,
// invalid UTF-8) or read as another token ("b\r" as "b").
TEST_F(TextVocabFile, SaveRefusesTokensTheFileCannotHold) {
  const std::string out = dir_ + "/out.txt";
  auto refused = [&](std::vector<std::string> tokens, const std::string& needle) {
    Vocab v(std::move(tokens));
    test::expect_error([&] { v.save(out); }, "[Vocab::save] " + out + ": token 1 ");
    test::expect_error([&] { v.save(out); }, needle);
    EXPECT_FALSE(std::filesystem::exists(out));
  };
  refused({"a", "b\r", "b"}, "\"b\\x0d\" ends with white space");
  refused({"a", "b "}, "ends with white space");
  refused({"a", "b\xc2\xa0"}, "ends with white space");
  refused({"a", std::string("x\0y", 3)}, "contains a NUL byte");
  refused({"a", "\xff"}, "is not valid UTF-8");
  refused({"a", "b\nc"}, "contains a newline");
  test::expect_error([&] { Vocab().save(out); }, "the vocabulary is empty");  // from_file refuses an empty file
  // White space inside a token, and blank placeholders, round-trip.
  Vocab ok({"a", "b c", "", "\xe4\xb8\xad\xe6\x96\x87", "zap\xe1\xa0\x8e"});
  ok.save(out);
  EXPECT_EQ(Vocab::from_file(out).tokens(), ok.tokens());
}

}  // namespace
}  // namespace kiln::text
