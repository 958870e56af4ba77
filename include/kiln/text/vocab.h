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

  // Reads a vocab.txt as Hugging Face's tokenizer does (tokenizers' WordPiece::read_file, behind
  // transformers 5's BertTokenizer): one token per line, "\n" separated, each line without its
  // trailing Unicode White_Space (Rust's trim_end: "\r", spaces, tabs, U+00A0, U+3000, ...).
  // The file is untrusted: a missing or unreadable file, anything but a regular file, an empty
  // file, invalid UTF-8 or a NUL byte is a kiln::Error "[Vocab::from_file] <path>: ...". So is a
  // token on two lines (lines that differ only in trailing white space are the same token):
  // Hugging Face gives such a token the later line's id and leaves the earlier id unused, which
  // is rarely what the file's author meant, so Kiln refuses the file rather than guess.
  static Vocab from_file(const std::string& path);

  // Writes one token per line, atomically (a temporary file renamed over `path`). A token that
  // from_file would read back differently or refuse (one with a newline, a NUL byte, trailing
  // white space such as "\r", or invalid UTF-8) is a kiln::Error "[Vocab::save] <path>: token
  // <id> ..." and nothing is written.
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
