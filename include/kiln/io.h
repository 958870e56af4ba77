// kiln::io: safetensors files (Hugging Face's format), checkpoints, and atomic file writing.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <string>

#include "kiln/tensor.h"

namespace kiln::io {

// A safetensors file's tensors and its "__metadata__" (string to string) map.
struct SafetensorsFile {
  std::map<std::string, Tensor> tensors;
  std::map<std::string, std::string> metadata;
};

// Reads a safetensors file (memory-mapped; each tensor is copied into a new CPU tensor, so the
// file is closed on return). Dtypes: BOOL, U8, I32, I64, F16, BF16, F32, F64. The file is
// untrusted: any malformed header, layout or unsupported dtype is a kiln::Error
// "[load_safetensors] <path>: ...". The header is read within the schema's bounds, so a hostile
// one fails before it costs much memory: values nest at most 4 levels, an array holds at most
// kMaxDims items, and the parsed header may take at most 24 times its text (at least 256 MiB).
std::map<std::string, Tensor> load_safetensors(const std::string& path);
SafetensorsFile load_safetensors_file(const std::string& path);
// Only the "__metadata__" map (the whole layout is still checked; no tensor data is copied).
std::map<std::string, std::string> load_safetensors_metadata(const std::string& path);

// Writes tensors (any device, any strides; copied to contiguous CPU memory first) and
// metadata as a safetensors file, laid out as the Python library lays it out (data sorted by
// dtype size, then name; header padded with spaces to 8 bytes). The write is atomic: an
// error or a crash part-way leaves any previous file at `path` untouched.
void save_safetensors(const std::string& path, const std::map<std::string, Tensor>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// Checkpoints are safetensors files: one flat tensor map (module, optimizer, scheduler and RNG
// state under prefixed names) plus string metadata (step, epoch, ...). Errors name
// save_checkpoint / load_checkpoint. safetensors has no checksum, so save_checkpoint adds one to
// the metadata as "kiln_crc32" (other readers ignore it; the file stays a plain safetensors file):
// the CRC-32 (zlib's, as Python's zlib.crc32) of the header and then the data section. The header
// it covers is the one save_checkpoint writes, with this entry's value as "00000000": every
// metadata entry (so every resume setting), and every tensor's name, dtype, shape and offsets.
// load_checkpoint, when `verify` is set, rebuilds that header from what it read and checks the
// sum, so flipped bytes anywhere in what loads are a kiln::Error, not weights that train to
// nonsense or a changed setting. (JSON whitespace and the padding, which change nothing that
// loads, are not covered.) Checkpoints written before the header was covered carry
// "kiln_data_crc32", the CRC-32 of the data section alone, and are checked against it. A file
// with neither entry loads unchecked if another program wrote it, but not if it is a Kiln
// checkpoint (a "format" entry starting "kiln-", as the trainers write): one of those has lost
// its entry to damage. `verify = false` (--no-verify) skips every check.
void save_checkpoint(const std::string& path, const std::map<std::string, Tensor>& tensors,
                     const std::map<std::string, std::string>& metadata = {});
SafetensorsFile load_checkpoint(const std::string& path, bool verify = true);
inline constexpr const char* kChecksumKey = "kiln_crc32";
inline constexpr const char* kDataChecksumKey = "kiln_data_crc32";  // written by earlier versions

// A file written under a temporary name in the target's directory and renamed over the target
// by commit(), after its data and then the directory are flushed to disk (fsync). Destroying
// it without commit() removes the temporary: the target keeps its previous contents. Where
// `path` is a symbolic link, the target is the file it names (the link stays a link, as with
// Python's open(path, "w")). A file that is replaced keeps its permission bits (and its owner
// and group where the process may set them); a new one gets 0666 less the umask.
class AtomicFile {
 public:
  // `where` names the caller in error messages ("[where] <path>: ...").
  explicit AtomicFile(const std::string& path, const char* where = "AtomicFile");
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t nbytes);
  void commit();
  const std::string& path() const { return path_; }
  const std::string& temp_path() const { return temp_path_; }

 private:
  [[noreturn]] void fail(const std::string& what, int err);
  void discard() noexcept;

  std::string path_;
  std::string target_;  // path_ with symbolic links followed: what commit() replaces
  std::string temp_path_;
  const char* where_;
  int fd_ = -1;
  bool committed_ = false;
};

// Runs `writer` on an AtomicFile for `path` and commits it; if `writer` throws, the
// temporary is removed, the exception propagates and `path` is unchanged.
void write_file_atomically(const std::string& path, const std::function<void(AtomicFile&)>& writer,
                           const char* where = "write_file_atomically");

}  // namespace kiln::io
