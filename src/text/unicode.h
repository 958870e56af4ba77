// UTF-8 decoding and encoding, and the per-code-point lookups of BERT's text normalisation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace kiln::text::unicode {

struct ClassRange {
  char32_t first, last;
  uint8_t cls;
};
struct CodeRange {
  char32_t first, last;
};
struct MapEntry {
  char32_t cp;
  uint16_t offset;
  uint8_t length;
};

// The generated tables (src/text/unicode_tables.cpp and unicode_lower_tables.cpp, by
// scripts/gen_unicode_tables.py).
extern const ClassRange kClassRanges[];
extern const size_t kClassRangesSize;
extern const CodeRange kCjkRanges[];
extern const size_t kCjkRangesSize;
extern const CodeRange kStripDropRanges[];
extern const size_t kStripDropRangesSize;
extern const MapEntry kStripMap[];
extern const size_t kStripMapSize;
extern const char32_t kStripPool[];
extern const MapEntry kLowerMap[];
extern const size_t kLowerMapSize;
extern const char32_t kLowerPool[];

enum class CharClass : uint8_t { Other = 0, Removed = 1, Whitespace = 2, Punctuation = 3 };

// What clean_text and the pre-tokenizer make of a code point beyond ASCII (a table search).
CharClass char_class_non_ascii(char32_t cp);
// What clean_text and the pre-tokenizer make of a code point. Inline for ASCII, without a
// search: the normaliser and the pre-tokenizer ask for every character of the corpus.
inline CharClass char_class(char32_t cp) {
  if (cp >= 0x80) return char_class_non_ascii(cp);
  if (cp == ' ' || cp == '\t' || cp == '\n' || cp == '\r') return CharClass::Whitespace;
  if (cp < 0x20 || cp == 0x7F) return CharClass::Removed;
  if ((cp >= 0x21 && cp <= 0x2F) || (cp >= 0x3A && cp <= 0x40) || (cp >= 0x5B && cp <= 0x60) || (cp >= 0x7B && cp <= 0x7E))
    return CharClass::Punctuation;
  return CharClass::Other;
}
// Whether tokenize_chinese_chars surrounds the code point with spaces.
bool is_cjk(char32_t cp);
// Appends NFD(cp) without its non-spacing marks (strip_accents).
void append_stripped(char32_t cp, std::u32string& out);
// Appends the per-character lower-case mapping of cp (one or more code points).
void append_lower(char32_t cp, std::u32string& out);

// Decodes UTF-8. Every maximal invalid subsequence (a stray continuation byte, a truncated
// sequence, an overlong form, a surrogate, a value past U+10FFFF) becomes one U+FFFD, as
// Python's bytes.decode("utf-8", "replace") does; `invalid` (if given) counts them.
std::u32string decode_utf8(std::string_view bytes, size_t* invalid = nullptr);
// Appends the UTF-8 encoding of cp (cp must be a scalar value).
void append_utf8(char32_t cp, std::string& out);
std::string encode_utf8(std::u32string_view text);
// decode_utf8's count of invalid subsequences, and its result as UTF-8, without the decoded copy.
size_t count_invalid_utf8(std::string_view bytes);
std::string replace_invalid_utf8(std::string_view bytes);
// Whether `bytes` is entirely valid UTF-8.
bool is_valid_utf8(std::string_view bytes);

// Unicode's White_Space property, as Rust's char::is_whitespace (U+0009-U+000D, U+0020, U+0085,
// U+00A0, U+1680, U+2000-U+200A, U+2028, U+2029, U+202F, U+205F, U+3000).
bool is_white_space(char32_t cp);
// `text` (valid UTF-8) without its trailing White_Space, as Rust's str::trim_end.
std::string_view trim_end_white_space(std::string_view text);

}  // namespace kiln::text::unicode
