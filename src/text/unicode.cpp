// UTF-8 decoding/encoding and lookups into the generated Unicode tables.
#include "text/unicode.h"

#include <algorithm>

namespace kiln::text::unicode {

namespace {

template <class Range>
const Range* find_range(const Range* table, size_t n, char32_t cp) {
  // The first range whose last >= cp; a hit if it also starts at or before cp.
  const Range* it = std::lower_bound(table, table + n, cp, [](const Range& r, char32_t c) { return r.last < c; });
  return (it != table + n && it->first <= cp) ? it : nullptr;
}

const MapEntry* find_map(const MapEntry* table, size_t n, char32_t cp) {
  const MapEntry* it = std::lower_bound(table, table + n, cp, [](const MapEntry& e, char32_t c) { return e.cp < c; });
  return (it != table + n && it->cp == cp) ? it : nullptr;
}

// Hangul syllables decompose algorithmically (Unicode 3.12); no table needed.
constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr char32_t kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount, kSCount = 19 * kNCount;

}  // namespace

CharClass char_class_non_ascii(char32_t cp) {
  const ClassRange* r = find_range(kClassRanges, kClassRangesSize, cp);
  return r ? static_cast<CharClass>(r->cls) : CharClass::Other;
}

bool is_cjk(char32_t cp) { return cp >= 0x3400 && find_range(kCjkRanges, kCjkRangesSize, cp) != nullptr; }

void append_stripped(char32_t cp, std::u32string& out) {
  if (cp < 0xC0) {  // nothing below U+00C0 decomposes or is a mark
    out.push_back(cp);
    return;
  }
  if (cp >= kSBase && cp < kSBase + kSCount) {
    char32_t s = cp - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount) out.push_back(kTBase + s % kTCount);
    return;
  }
  if (find_range(kStripDropRanges, kStripDropRangesSize, cp)) return;
  if (const MapEntry* e = find_map(kStripMap, kStripMapSize, cp)) {
    out.append(kStripPool + e->offset, e->length);
    return;
  }
  out.push_back(cp);
}

void append_lower(char32_t cp, std::u32string& out) {
  if (cp < 0x80) {
    out.push_back(cp >= 'A' && cp <= 'Z' ? cp + 32 : cp);
    return;
  }
  if (const MapEntry* e = find_map(kLowerMap, kLowerMapSize, cp)) {
    out.append(kLowerPool + e->offset, e->length);
    return;
  }
  out.push_back(cp);
}

namespace {
// Calls sink(cp) for each code point of `bytes`, U+FFFD for each maximal invalid subsequence
// (the Unicode standard's table 3-7: no overlong forms, surrogates or values past U+10FFFF);
// returns how many of those there were.
template <class Sink>
size_t for_each_code_point(std::string_view bytes, Sink&& sink) {
  size_t bad = 0;
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  const size_t n = bytes.size();
  size_t i = 0;
  while (i < n) {
    unsigned char b = p[i];
    if (b < 0x80) {
      sink(static_cast<char32_t>(b));
      ++i;
      continue;
    }
    // Lead byte: sequence length and the allowed range of the second byte.
    int len = 0;
    unsigned char lo = 0x80, hi = 0xBF;
    char32_t cp = 0;
    if (b >= 0xC2 && b <= 0xDF) { len = 2; cp = b & 0x1F; }
    else if (b == 0xE0) { len = 3; lo = 0xA0; cp = b & 0x0F; }
    else if (b == 0xED) { len = 3; hi = 0x9F; cp = b & 0x0F; }
    else if (b >= 0xE1 && b <= 0xEF) { len = 3; cp = b & 0x0F; }
    else if (b == 0xF0) { len = 4; lo = 0x90; cp = b & 0x07; }
    else if (b == 0xF4) { len = 4; hi = 0x8F; cp = b & 0x07; }
    else if (b >= 0xF1 && b <= 0xF3) { len = 4; cp = b & 0x07; }
    size_t j = i + 1;
    bool ok = len != 0;  // not a continuation byte or an impossible lead byte
    for (int k = 1; ok && k < len; ++k, ++j) {
      unsigned char c = j < n ? p[j] : 0;
      unsigned char clo = k == 1 ? lo : 0x80, chi = k == 1 ? hi : 0xBF;
      if (j >= n || c < clo || c > chi) {
        ok = false;  // the invalid byte starts what follows
        break;
      }
      cp = (cp << 6) | (c & 0x3F);
    }
    if (!ok) {  // the maximal valid prefix [i, j) (at least one byte) becomes one replacement
      sink(char32_t{0xFFFD});
      ++bad;
      i = j;
      continue;
    }
    sink(cp);
    i = j;
  }
  return bad;
}
}  // namespace

std::u32string decode_utf8(std::string_view bytes, size_t* invalid) {
  std::u32string out;
  out.reserve(bytes.size());
  const size_t bad = for_each_code_point(bytes, [&](char32_t cp) { out.push_back(cp); });
  if (invalid) *invalid = bad;
  return out;
}

size_t count_invalid_utf8(std::string_view bytes) {
  return for_each_code_point(bytes, [](char32_t) {});
}

std::string replace_invalid_utf8(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  for_each_code_point(bytes, [&](char32_t cp) { append_utf8(cp, out); });
  return out;
}

void append_utf8(char32_t cp, std::string& out) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::string encode_utf8(std::u32string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char32_t cp : text) append_utf8(cp, out);
  return out;
}

bool is_valid_utf8(std::string_view bytes) { return count_invalid_utf8(bytes) == 0; }

bool is_white_space(char32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
         cp == 0x3000;
}

std::string_view trim_end_white_space(std::string_view text) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  size_t end = text.size();
  while (end > 0) {
    size_t start = end - 1;  // back over continuation bytes to the last character's first byte
    while (start > 0 && end - start < 4 && (p[start] & 0xC0) == 0x80) --start;
    char32_t cp = p[start];
    size_t n = end - start;
    if (n > 1) {
      cp &= 0xFF >> (n + 1);
      for (size_t k = start + 1; k < end; ++k) cp = (cp << 6) | (p[k] & 0x3F);
    }
    if (!is_white_space(cp)) break;
    end = start;
  }
  return text.substr(0, end);
}

}  // namespace kiln::text::unicode
