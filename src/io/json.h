// A small strict JSON reader and string writer for file headers (safetensors), written for
// untrusted input: bounded nesting and size, exact grammar, UTF-8 checked, duplicate keys rejected.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::io::json {

struct Member;

struct Value {
  enum class Kind { Null, Bool, Number, String, Array, Object };
  Kind kind = Kind::Null;
  bool boolean = false;
  // Numbers: `text` is the number as written; `is_integer` when it has no fraction or exponent
  // and fits in int64, and then `integer` holds it.
  bool is_integer = false;
  int64_t integer = 0;
  std::string text;  // the decoded string, or the number's spelling
  std::vector<Value> items;
  std::vector<Member> members;  // in file order; keys are unique

  const char* kind_name() const;
  // The value as it would appear in an error message (strings quoted, long text cut short).
  std::string describe() const;
};

// An object's member. (A struct rather than std::pair: a vector may hold an incomplete type,
// a pair may not.)
struct Member {
  std::string key;
  Value value;
};

// Nesting deeper than this is an error (keeps the recursive reader's stack bounded).
inline constexpr int kMaxDepth = 64;

// Bounds on what a document may make the reader build, each checked as the reader reaches it,
// so that a hostile document fails before it costs more than the bounds allow. A tree takes
// some 100 bytes per value, far more than the value's text (`0,` is two bytes): a caller
// that knows its schema passes tighter bounds than these defaults.
struct ParseLimits {
  // Values are nested at most this many levels deep, the root being level 1 (so 3 allows
  // {"a": [1]} but not {"a": [[1]]}). At most kMaxDepth.
  int max_depth = kMaxDepth;
  // Items in any one array.
  size_t max_array_items = SIZE_MAX;
  // An estimate of the memory the tree takes (its values, members and their strings).
  size_t max_tree_bytes = SIZE_MAX;
};

// Parses exactly one JSON value, with optional whitespace around it. On bad input, or input
// past `limits`, throws kiln::Error "[where] <prefix>invalid JSON header at byte N: <reason>".
Value parse(std::string_view text, const char* where, const std::string& prefix, const ParseLimits& limits = {});

// True if `s` is well-formed UTF-8 (no overlong forms, surrogates or code points past U+10FFFF).
bool is_valid_utf8(std::string_view s);

// Appends `s` as a JSON string literal, escaped as serde_json (and so the safetensors
// library) does: \" \\ \b \f \n \r \t, other control bytes as \u00xx, everything else raw.
void append_string(std::string& out, std::string_view s);

}  // namespace kiln::io::json
