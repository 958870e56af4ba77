// Helpers for the kiln::data suites: temporary directories, IDX images, gzip through zlib.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace kiln::test {

using Bytes = std::vector<uint8_t>;

// A fresh directory under the system's temporary directory, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    path_ = std::filesystem::temp_directory_path() /
            ("kiln_data_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  std::string str() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

inline void write_file(const std::string& path, const Bytes& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

inline void put_be32(Bytes& b, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<uint8_t>(v >> s));
}

// An IDX image: magic (0, 0, type code, rank), big-endian dims, then `payload` as given.
inline Bytes idx_bytes(uint8_t code, const std::vector<uint32_t>& dims, const Bytes& payload) {
  Bytes b{0, 0, code, static_cast<uint8_t>(dims.size())};
  for (uint32_t d : dims) put_be32(b, d);
  b.insert(b.end(), payload.begin(), payload.end());
  return b;
}

// `n` 28x28 grey images of 10 classes (class k: a bright row at 2k + 4) under MNIST's file names.
inline void write_mnist_like(const TempDir& dir, const std::string& split, uint32_t n) {
  Bytes images, labels;
  for (uint32_t i = 0; i < n; ++i) {
    const auto label = static_cast<uint8_t>(i % 10);
    labels.push_back(label);
    for (uint32_t r = 0; r < 28; ++r)
      for (uint32_t c = 0; c < 28; ++c)
        images.push_back(static_cast<uint8_t>(r == 2u * label + 4 ? 200 : (7 * r + 3 * c + i) % 32));
  }
  write_file(dir.file(split + "-images-idx3-ubyte"), idx_bytes(0x08, {n, 28, 28}, images));
  write_file(dir.file(split + "-labels-idx1-ubyte"), idx_bytes(0x08, {n}, labels));
}

// `docs` short documents from a tiny grammar, in the fortune format (a text a masked LM can learn).
inline void write_grammar_corpus(const std::string& path, int64_t docs) {
  const char* who[] = {"the cat", "a dog", "my friend", "the old man", "her sister"};
  const char* did[] = {"sat on", "looked at", "walked to", "painted", "found"};
  const char* what[] = {"the mat", "a red door", "the garden", "an apple", "the river"};
  std::ofstream f(path);
  uint32_t s = 7;
  auto next = [&] { return (s = s * 1664525u + 1013904223u) >> 16; };
  for (int64_t i = 0; i < docs; ++i) {
    for (int k = 0; k < 3; ++k) f << who[next() % 5] << " " << did[next() % 5] << " " << what[next() % 5] << ". ";
    f << "\n%\n";
  }
  ASSERT_TRUE(f.good()) << path;
}

// One gzip member holding `raw`, as gzip(1) writes it.
inline Bytes gzip(const Bytes& raw, int level = Z_BEST_SPEED) {
  z_stream zs{};
  EXPECT_EQ(deflateInit2(&zs, level, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY), Z_OK);
  Bytes out(deflateBound(&zs, raw.size()) + 64);
  zs.next_in = const_cast<Bytef*>(raw.data());
  zs.avail_in = static_cast<uInt>(raw.size());
  zs.next_out = out.data();
  zs.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&zs, Z_FINISH), Z_STREAM_END);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

}  // namespace kiln::test
