// kiln::text corpora: reading documents from text files and directories (Debian's fortunes included).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kiln::text {

// Reads the documents of a corpus at `path`:
//  - a file: UTF-8 text. Documents are separated by lines holding only "%" (the fortune
//    format) if the file has any; else by blank lines if it has any; else one per line.
//    Documents are trimmed of surrounding whitespace; empty ones are dropped.
//  - a directory: every regular file directly in it, in name order, read as above; skipped:
//    hidden files, strfile indices ("x.dat" beside "x"), and links or names that resolve to a
//    file already read (fortunes' "x.u8" -> "x"), so nothing is read twice.
// The corpus is untrusted input. kiln::Error "[read_corpus] <path>: ..." for a missing path, an
// unreadable file, a binary file (a NUL byte, or more than 1% of its bytes in invalid UTF-8
// sequences), or no documents at all. A few invalid bytes in a text file read as U+FFFD.
std::vector<std::string> read_corpus(const std::string& path);

// The documents of one file's contents (the format rules above); `name` is for error messages.
std::vector<std::string> split_documents(const std::string& contents, const std::string& name);

// The corpus `kiln train` uses when given none: Debian's fortunes, if installed, else "".
std::string default_corpus_path();

}  // namespace kiln::text
