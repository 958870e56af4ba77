// Vocab: reading, checking and atomically writing a vocab.txt.
#include "kiln/text/vocab.h"

#include <algorithm>

#include "kiln/error.h"
#include "kiln/io.h"
#include "text/read_file.h"
#include "text/unicode.h"

namespace kiln::text {

namespace {

std::string quoted(std::string_view s) {
  std::string out = "\"";
  const bool utf8 = unicode::is_valid_utf8(s);  // else every byte past ASCII is shown as \xNN too
  // At most 60 bytes, cut at a character's start (the message stays UTF-8).
  size_t shown = std::min<size_t>(s.size(), 60);
  while (utf8 && shown < s.size() && shown > 0 && (static_cast<unsigned char>(s[shown]) & 0xC0) == 0x80) --shown;
  for (unsigned char c : s.substr(0, shown)) {
    if (c < 0x20 || c == 0x7F || (c >= 0x80 && !utf8)) {
      const char* hex = "0123456789abcdef";
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + (shown < s.size() ? "...\"" : "\"");
}

}  // namespace

Vocab::Vocab(std::vector<std::string> tokens) : tokens_(std::move(tokens)) {
  ids_.reserve(tokens_.size());
  for (size_t i = 0; i < tokens_.size(); ++i) {
    if (tokens_[i].empty()) continue;
    auto [it, inserted] = ids_.emplace(tokens_[i], static_cast<int64_t>(i));
    KILN_CHECK(inserted, "Vocab", "duplicate token ", quoted(tokens_[i]), " at ids ", it->second, " and ", i);
  }
}

Vocab Vocab::from_file(const std::string& path) {
  const char* where = "Vocab::from_file";
  // 32 MiB: ample for any WordPiece vocab (BERT's 30,522 tokens are 226 KiB; a million tokens
  // about 10 MiB), and each line becomes a string, so a 1 GiB file of newlines would be ~32 GiB.
  std::string data = detail::read_file(path, where, size_t{32} << 20);
  KILN_CHECK(!data.empty(), where, path, ": is empty");
  std::vector<std::string> tokens;
  size_t start = 0;
  while (start < data.size()) {
    size_t end = data.find('\n', start);
    if (end == std::string::npos) end = data.size();
    std::string_view line(data.data() + start, end - start);
    size_t line_no = tokens.size() + 1;
    KILN_CHECK(line.find('\0') == std::string_view::npos, where, path, ":", line_no,
               ": has a NUL byte (a binary file, not a vocab.txt?)");
    KILN_CHECK(unicode::is_valid_utf8(line), where, path, ":", line_no, ": is not valid UTF-8: ", quoted(line));
    // As tokenizers' WordPiece::read_file (Rust's trim_end): "\r", spaces, tabs, U+00A0, ...
    tokens.emplace_back(unicode::trim_end_white_space(line));
    start = end + 1;
  }
  KILN_CHECK(!tokens.empty(), where, path, ": has no tokens");
  // Report duplicates with this function's name and the line numbers.
  std::unordered_map<std::string_view, size_t> first;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i].empty()) continue;
    auto [it, inserted] = first.emplace(tokens[i], i);
    KILN_CHECK(inserted, where, path, ": token ", quoted(tokens[i]), " appears twice, on lines ", it->second + 1,
               " and ", i + 1);
  }
  return Vocab(std::move(tokens));
}

void Vocab::save(const std::string& path) const {
  const char* where = "Vocab::save";
  // Only what from_file reads back as the same token, so the file reloads as this vocabulary.
  KILN_CHECK(!tokens_.empty(), where, path, ": the vocabulary is empty (Vocab::from_file refuses an empty file)");
  for (size_t i = 0; i < tokens_.size(); ++i) {
    const std::string& t = tokens_[i];
    auto refuse = [&](const char* why) { KILN_FAIL(where, path, ": token ", i, " ", quoted(t), " ", why); };
    if (t.find('\n') != std::string::npos) refuse("contains a newline, which a vocab.txt cannot hold");
    if (t.find('\0') != std::string::npos) refuse("contains a NUL byte, which Vocab::from_file refuses");
    if (!unicode::is_valid_utf8(t)) refuse("is not valid UTF-8, which Vocab::from_file refuses");
    if (unicode::trim_end_white_space(t).size() != t.size())
      refuse("ends with white space, which Vocab::from_file (as Hugging Face) would drop");
  }
  io::write_file_atomically(
      path,
      [&](io::AtomicFile& f) {
        std::string data;
        for (const std::string& t : tokens_) {
          data += t;
          data += '\n';
        }
        f.write(data.data(), data.size());
      },
      where);
}

int64_t Vocab::find(std::string_view token) const {
  auto it = ids_.find(token);
  return it == ids_.end() ? -1 : it->second;
}

const std::string& Vocab::token(int64_t id) const {
  KILN_CHECK(id >= 0 && id < size(), "Vocab::token", "id ", id, " is outside the vocabulary of ", size(), " tokens");
  return tokens_[static_cast<size_t>(id)];
}

}  // namespace kiln::text
