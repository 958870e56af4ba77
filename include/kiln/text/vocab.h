// kiln::text::Vocab: a WordPiece vocabulary (vocab.txt, one token per line, the line number is the id).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace kiln::text {

class Vocab {
 public:
  Vocab() = default;
  // Tokens in id order. A repeated token is a kiln::Error ("[Vocab] duplicate token ..."); empty
  // strings are allowed as unused placeholder ids (as blank lines in a vocab.txt are).
  explicit Vocab(std::vector<std::string> tokens);

  // Reads a vocab.txt as Hugging Face's load_vocab does (one token per line, "\n" separated),
  // except that a "\r" before the "\n" is dropped too. The file is untrusted: a missing or
  // unreadable file, an empty file, invalid UTF-8, a NUL byte or a duplicate token is a
  // kiln::Error "[Vocab::from_file] <path>: ...".
  static Vocab from_file(const std::string& path);

  // Writes one token per line, atomically (a temporary file renamed over `path`).
  void save(const std::string& path) const;

  int64_t size() const { return static_cast<int64_t>(tokens_.size()); }
  bool contains(std::string_view token) const { return find(token) >= 0; }
  // The id of `token`, or -1.
  int64_t find(std::string_view token) const;
  // The token with id `id`; kiln::Error if id is outside [0, size()).
  const std::string& token(int64_t id) const;
  const std::vector<std::string>& tokens() const { return tokens_; }

 private:
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::vector<std::string> tokens_;
  std::unordered_map<std::string, int64_t, Hash, std::equal_to<>> ids_;
};

}  // namespace kiln::text
