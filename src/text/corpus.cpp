// read_corpus: text files and directories of them, split into documents, binary files refused.
#include "kiln/text/corpus.h"

#include <algorithm>
#include <filesystem>
#include <set>

#include "kiln/error.h"
#include "text/read_file.h"
#include "text/unicode.h"

namespace kiln::text {

namespace fs = std::filesystem;

namespace {

constexpr const char* kWhere = "read_corpus";

std::string_view trim(std::string_view s) {
  auto space = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\f' || c == '\v'; };
  while (!s.empty() && space(s.front())) s.remove_prefix(1);
  while (!s.empty() && space(s.back())) s.remove_suffix(1);
  return s;
}

std::vector<std::string_view> lines_of(std::string_view s) {
  std::vector<std::string_view> lines;
  size_t start = 0;
  while (start < s.size()) {
    size_t end = s.find('\n', start);
    if (end == std::string_view::npos) end = s.size();
    std::string_view line = s.substr(start, end - start);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    lines.push_back(line);
    start = end + 1;
  }
  return lines;
}

// Checks that `data` is text; decodes invalid sequences to U+FFFD where they are rare.
std::string checked_text(const std::string& data, const std::string& name) {
  size_t nul = data.find('\0');
  KILN_CHECK(nul == std::string::npos, kWhere, name, ": has a NUL byte at offset ", nul,
             " (a binary file, not UTF-8 text)");
  // Counted without a decoded copy (four bytes a character): a corpus may be gigabytes.
  const size_t invalid = unicode::count_invalid_utf8(data);
  if (invalid == 0) return data;
  KILN_CHECK(invalid * 100 <= data.size(), kWhere, name, ": ", invalid, " invalid UTF-8 sequences in ", data.size(),
             " bytes (a binary file, or not UTF-8 text)");
  return unicode::replace_invalid_utf8(data);
}

}  // namespace

std::vector<std::string> split_documents(const std::string& contents, const std::string& name) {
  std::string text = checked_text(contents, name);
  std::vector<std::string_view> lines = lines_of(text);
  bool fortune = std::any_of(lines.begin(), lines.end(), [](std::string_view l) { return l == "%"; });
  bool blank = !fortune && std::any_of(lines.begin(), lines.end(), [](std::string_view l) { return trim(l).empty(); });
  std::vector<std::string> docs;
  std::string current;
  auto flush = [&] {
    std::string_view t = trim(current);
    if (!t.empty()) docs.emplace_back(t);
    current.clear();
  };
  for (std::string_view line : lines) {
    if (fortune ? line == "%" : blank ? trim(line).empty() : true) {
      if (!fortune && !blank) current.assign(line);
      flush();
    } else {
      current.append(line);
      current.push_back('\n');
    }
  }
  flush();
  return docs;
}

std::vector<std::string> read_corpus(const std::string& path) {
  std::error_code ec;
  fs::file_status st = fs::status(path, ec);
  KILN_CHECK(!ec && fs::exists(st), kWhere, path, ": does not exist");
  std::vector<std::string> docs;
  if (!fs::is_directory(st)) {
    docs = split_documents(detail::read_file(path, kWhere), path);
  } else {
    std::vector<fs::path> files;
    for (fs::directory_iterator it(path, ec), end; !ec && it != end; it.increment(ec)) files.push_back(it->path());
    KILN_CHECK(!ec, kWhere, path, ": cannot list the directory: ", ec.message());
    std::sort(files.begin(), files.end());
    std::set<fs::path> names(files.begin(), files.end());
    std::set<fs::path> read;  // canonical paths already read
    // Real files first, so a link is skipped in favour of the file it names.
    // (error_code forms: a failed lstat is an unreadable entry, skipped below, not an exception.)
    std::stable_partition(files.begin(), files.end(), [](const fs::path& p) {
      std::error_code link_ec;
      return !fs::is_symlink(p, link_ec);
    });
    for (const fs::path& f : files) {
      std::string base = f.filename().string();
      if (base.empty() || base[0] == '.') continue;
      if (f.extension() == ".dat" && names.count(f.parent_path() / f.stem())) continue;  // strfile index
      if (!fs::is_regular_file(f, ec)) continue;  // subdirectories, dangling links, devices
      fs::path canon = fs::canonical(f, ec);
      if (ec || !read.insert(canon).second) continue;
      std::vector<std::string> part = split_documents(detail::read_file(f.string(), kWhere), f.string());
      docs.insert(docs.end(), std::make_move_iterator(part.begin()), std::make_move_iterator(part.end()));
    }
  }
  KILN_CHECK(!docs.empty(), kWhere, path, ": has no documents (an empty corpus)");
  return docs;
}

std::string default_corpus_path() {
  const char* fortunes = "/usr/share/games/fortunes";
  std::error_code ec;
  return fs::is_directory(fortunes, ec) ? fortunes : "";
}

}  // namespace kiln::text
