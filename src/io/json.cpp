// The strict JSON reader and string escaping behind the safetensors header.
#include "io/json.h"

#include <algorithm>
#include <vector>

#include "kiln/error.h"

namespace kiln::io::json {

const char* Value::kind_name() const {
  switch (kind) {
    case Kind::Null: return "null";
    case Kind::Bool: return "a boolean";
    case Kind::Number: return "a number";
    case Kind::String: return "a string";
    case Kind::Array: return "an array";
    case Kind::Object: return "an object";
  }
  return "?";
}

std::string Value::describe() const {
  constexpr size_t kMax = 40;
  std::string s;
  switch (kind) {
    case Kind::Null: return "null";
    case Kind::Bool: return boolean ? "true" : "false";
    case Kind::Number: s = text; break;
    case Kind::String: s = "\"" + text + "\""; break;
    case Kind::Array: return "an array";
    case Kind::Object: return "an object";
  }
  if (s.size() <= kMax) return s;
  size_t cut = kMax;  // at a character's first byte: a cut inside one left half a character
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
  return s.substr(0, cut) + "...";
}

namespace {

// Length of the UTF-8 sequence starting at s[i], or 0 if it is malformed.
size_t utf8_sequence(std::string_view s, size_t i) {
  auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  unsigned char c = byte(i);
  if (c < 0x80) return 1;
  size_t n;
  uint32_t cp, min;
  if ((c & 0xe0) == 0xc0) { n = 2; cp = c & 0x1f; min = 0x80; }
  else if ((c & 0xf0) == 0xe0) { n = 3; cp = c & 0x0f; min = 0x800; }
  else if ((c & 0xf8) == 0xf0) { n = 4; cp = c & 0x07; min = 0x10000; }
  else return 0;
  if (s.size() - i < n) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((byte(i + k) & 0xc0) != 0x80) return 0;
    cp = (cp << 6) | (byte(i + k) & 0x3f);
  }
  if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
  return n;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xc0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xe0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else {
    out += static_cast<char>(0xf0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  }
}

class Reader {
 public:
  Reader(std::string_view text, const char* where, const std::string& prefix, const ParseLimits& limits)
      : s_(text), where_(where), prefix_(prefix), limits_(limits),
        max_depth_(std::min(std::max(limits.max_depth, 1), kMaxDepth)) {}

  Value document() {
    skip_space();
    charge(sizeof(Value));
    Value v = value(0);
    skip_space();
    if (pos_ != s_.size()) fail("unexpected text after the JSON value");
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& why) {
    KILN_FAIL(where_, prefix_, "invalid JSON header at byte ", pos_, ": ", why);
  }
  bool at_end() const { return pos_ >= s_.size(); }
  char peek() const { return at_end() ? '\0' : s_[pos_]; }
  void skip_space() {
    while (!at_end() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r')) ++pos_;
  }
  void expect(char c) {
    if (peek() != c || at_end()) fail(std::string("expected '") + c + "'");
    ++pos_;
  }
  void literal(std::string_view word) {
    if (s_.substr(pos_, word.size()) != word) fail("unexpected character");
    pos_ += word.size();
  }
  // Counts `bytes` more of the tree against limits_.max_tree_bytes.
  void charge(size_t bytes) {
    tree_bytes_ += bytes;
    if (tree_bytes_ > limits_.max_tree_bytes)
      fail("the document needs more than " + std::to_string(limits_.max_tree_bytes) + " bytes of memory to hold");
  }
  // What a string holds outside its own object (none while it fits the small-string buffer).
  static size_t heap_bytes(const std::string& s) {
    static const size_t inline_capacity = std::string().capacity();
    return s.capacity() > inline_capacity ? s.capacity() + 1 : 0;
  }

  Value value(int depth) {
    if (depth >= max_depth_) fail("nested deeper than " + std::to_string(max_depth_) + " levels");
    Value v;
    if (at_end()) fail("unexpected end of the header");
    char c = s_[pos_];
    if (c == '{') {
      object(v, depth);
    } else if (c == '[') {
      array(v, depth);
    } else if (c == '"') {
      v.kind = Value::Kind::String;
      v.text = string();
      charge(heap_bytes(v.text));
    } else if (c == 't' || c == 'f') {
      v.kind = Value::Kind::Bool;
      v.boolean = c == 't';
      literal(v.boolean ? "true" : "false");
    } else if (c == 'n') {
      literal("null");
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      number(v);
      charge(heap_bytes(v.text));
    } else {
      fail("unexpected character");
    }
    return v;
  }

  void object(Value& v, int depth) {
    v.kind = Value::Kind::Object;
    ++pos_;  // '{'
    skip_space();
    if (peek() == '}' && !at_end()) { ++pos_; return; }
    std::vector<size_t> key_pos;  // where each member's key starts, for the duplicate check
    for (;;) {
      skip_space();
      if (peek() != '"' || at_end()) fail("expected a string key");
      key_pos.push_back(pos_);
      std::string key = string();
      charge(sizeof(Member) + heap_bytes(key));
      skip_space();
      expect(':');
      skip_space();
      Value member = value(depth + 1);
      v.members.push_back(Member{std::move(key), std::move(member)});
      skip_space();
      if (peek() == ',' && !at_end()) { ++pos_; continue; }
      expect('}');
      break;
    }
    v.members.shrink_to_fit();
    check_unique_keys(v.members, key_pos);
  }

  // Keys are checked once the object is read, by sorting, rather than through a set of copies
  // of every key built alongside it: that set would double the memory a wide object takes.
  void check_unique_keys(const std::vector<Member>& members, const std::vector<size_t>& key_pos) {
    std::vector<size_t> order(members.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      int c = members[a].key.compare(members[b].key);
      return c != 0 ? c < 0 : a < b;
    });
    size_t first_dup = members.size();  // the earliest key in the file that repeats an earlier one
    for (size_t k = 1; k < order.size(); ++k)
      if (members[order[k]].key == members[order[k - 1]].key) first_dup = std::min(first_dup, order[k]);
    if (first_dup == members.size()) return;
    pos_ = key_pos[first_dup];
    fail("duplicate key \"" + members[first_dup].key + "\"");
  }

  void array(Value& v, int depth) {
    v.kind = Value::Kind::Array;
    ++pos_;  // '['
    skip_space();
    if (peek() == ']' && !at_end()) { ++pos_; return; }
    for (;;) {
      skip_space();
      if (v.items.size() >= limits_.max_array_items)
        fail("an array of more than " + std::to_string(limits_.max_array_items) + " items");
      charge(sizeof(Value));
      v.items.push_back(value(depth + 1));
      skip_space();
      if (peek() == ',' && !at_end()) { ++pos_; continue; }
      expect(']');
      break;
    }
    v.items.shrink_to_fit();
  }

  unsigned hex4() {
    if (s_.size() - pos_ < 4) fail("truncated \\u escape");
    unsigned u = 0;
    for (int k = 0; k < 4; ++k) {
      char h = s_[pos_++];
      u <<= 4;
      if (h >= '0' && h <= '9') u |= h - '0';
      else if (h >= 'a' && h <= 'f') u |= h - 'a' + 10;
      else if (h >= 'A' && h <= 'F') u |= h - 'A' + 10;
      else fail("bad hex digit in \\u escape");
    }
    return u;
  }

  std::string string() {
    ++pos_;  // opening quote
    std::string out;
    for (;;) {
      if (at_end()) fail("unterminated string");
      unsigned char c = static_cast<unsigned char>(s_[pos_]);
      if (c == '"') { ++pos_; return out; }
      if (c < 0x20) fail("control character in a string");
      if (c == '\\') {
        ++pos_;
        if (at_end()) fail("unterminated string");
        char e = s_[pos_++];
        switch (e) {
          case '"': out += '"'; break;
          case '\\': out += '\\'; break;
          case '/': out += '/'; break;
          case 'b': out += '\b'; break;
          case 'f': out += '\f'; break;
          case 'n': out += '\n'; break;
          case 'r': out += '\r'; break;
          case 't': out += '\t'; break;
          case 'u': {
            uint32_t cp = hex4();
            if (cp >= 0xdc00 && cp <= 0xdfff) fail("lone low surrogate in \\u escape");
            if (cp >= 0xd800 && cp <= 0xdbff) {
              if (s_.substr(pos_, 2) != "\\u") fail("lone high surrogate in \\u escape");
              pos_ += 2;
              uint32_t lo = hex4();
              if (lo < 0xdc00 || lo > 0xdfff) fail("bad low surrogate in \\u escape");
              cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
            }
            append_utf8(out, cp);
            break;
          }
          default: --pos_; fail("bad escape in a string");
        }
        continue;
      }
      size_t n = utf8_sequence(s_, pos_);
      if (n == 0) fail("invalid UTF-8 in a string");
      out.append(s_.substr(pos_, n));
      pos_ += n;
    }
  }

  void number(Value& v) {
    v.kind = Value::Kind::Number;
    size_t start = pos_;
    auto digits = [&] {
      size_t d = pos_;
      while (!at_end() && s_[pos_] >= '0' && s_[pos_] <= '9') ++pos_;
      return pos_ - d;
    };
    bool negative = peek() == '-' && !at_end();
    if (negative) ++pos_;
    size_t int_start = pos_;
    size_t n = digits();
    if (n == 0) fail("expected a digit");
    if (n > 1 && s_[int_start] == '0') { pos_ = int_start; fail("leading zero in a number"); }
    bool integral = true;
    if (peek() == '.' && !at_end()) {
      ++pos_;
      integral = false;
      if (digits() == 0) fail("expected a digit after '.'");
    }
    if ((peek() == 'e' || peek() == 'E') && !at_end()) {
      ++pos_;
      integral = false;
      if ((peek() == '+' || peek() == '-') && !at_end()) ++pos_;
      if (digits() == 0) fail("expected a digit in the exponent");
    }
    v.text = std::string(s_.substr(start, pos_ - start));
    if (!integral) return;
    // Accumulate negatively so INT64_MIN fits; overflow leaves is_integer false.
    int64_t acc = 0;
    for (size_t k = int_start; k < int_start + n; ++k) {
      int64_t d = s_[k] - '0';
      if (__builtin_mul_overflow(acc, 10, &acc) || __builtin_sub_overflow(acc, d, &acc)) return;
    }
    if (!negative) {
      if (acc == INT64_MIN) return;
      acc = -acc;
    }
    v.is_integer = true;
    v.integer = acc;
  }

  std::string_view s_;
  size_t pos_ = 0;
  const char* where_;
  const std::string& prefix_;
  const ParseLimits& limits_;
  const int max_depth_;
  size_t tree_bytes_ = 0;
};

}  // namespace

Value parse(std::string_view text, const char* where, const std::string& prefix, const ParseLimits& limits) {
  return Reader(text, where, prefix, limits).document();
}

bool is_valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    size_t n = utf8_sequence(s, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

void append_string(std::string& out, std::string_view s) {
  static const char* kHex = "0123456789abcdef";
  out += '"';
  for (char ch : s) {
    unsigned char c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          out += "\\u00";
          out += kHex[c >> 4];
          out += kHex[c & 15];
        } else {
          out += ch;
        }
    }
  }
  out += '"';
}

}  // namespace kiln::io::json
