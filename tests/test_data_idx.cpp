// read_idx / parse_idx: every element type, raw and gzip files, and bad files rejected clearly.
#include <cstring>

#include "data_util.h"
#include "kiln/data/idx.h"
#include "test_util.h"

namespace kiln::test {
namespace {

using data::parse_idx;
using data::read_idx;

Bytes sample_u8() {
  Bytes payload;
  for (int i = 0; i < 24; ++i) payload.push_back(static_cast<uint8_t>(i * 37 % 256));
  return idx_bytes(0x08, {2, 3, 4}, payload);
}

void expect_sample_u8(const Tensor& t) {
  ASSERT_EQ(t.dtype(), kUInt8);
  ASSERT_EQ(t.shape(), (Shape{2, 3, 4}));
  auto v = t.to_vector<int64_t>();
  for (int i = 0; i < 24; ++i) EXPECT_EQ(v[static_cast<size_t>(i)], i * 37 % 256) << i;
}

TEST(DataIdx, RawAndGzipUint8) {
  TempDir dir;
  write_file(dir.file("raw-idx3-ubyte"), sample_u8());
  write_file(dir.file("gz-idx3-ubyte.gz"), gzip(sample_u8()));
  expect_sample_u8(read_idx(dir.file("raw-idx3-ubyte")));
  expect_sample_u8(read_idx(dir.file("gz-idx3-ubyte.gz")));
  // Detection is by the magic bytes, not the name.
  write_file(dir.file("gz-without-suffix"), gzip(sample_u8()));
  expect_sample_u8(read_idx(dir.file("gz-without-suffix")));
}

TEST(DataIdx, ConcatenatedGzipMembers) {
  Bytes raw = sample_u8();
  Bytes first(raw.begin(), raw.begin() + 10), second(raw.begin() + 10, raw.end());
  Bytes gz = gzip(first), gz2 = gzip(second);
  gz.insert(gz.end(), gz2.begin(), gz2.end());
  expect_sample_u8(parse_idx(gz.data(), gz.size()));
}

TEST(DataIdx, ElementTypesBigEndian) {
  // int8 widens to int32.
  Bytes b8 = idx_bytes(0x09, {3}, {0x7f, 0x80, 0xff});
  Tensor i8 = parse_idx(b8.data(), b8.size());
  EXPECT_EQ(i8.dtype(), kInt32);
  EXPECT_EQ(i8.to_vector<int64_t>(), (std::vector<int64_t>{127, -128, -1}));
  // int16 widens to int32.
  Bytes b16 = idx_bytes(0x0B, {2}, {0x12, 0x34, 0xff, 0xfe});
  Tensor i16 = parse_idx(b16.data(), b16.size());
  EXPECT_EQ(i16.dtype(), kInt32);
  EXPECT_EQ(i16.to_vector<int64_t>(), (std::vector<int64_t>{0x1234, -2}));
  Bytes b32 = idx_bytes(0x0C, {1, 2}, {0x01, 0x02, 0x03, 0x04, 0xff, 0xff, 0xff, 0xfd});
  Tensor i32 = parse_idx(b32.data(), b32.size());
  EXPECT_EQ(i32.dtype(), kInt32);
  EXPECT_EQ(i32.shape(), (Shape{1, 2}));
  EXPECT_EQ(i32.to_vector<int64_t>(), (std::vector<int64_t>{0x01020304, -3}));
  // 1.5f = 0x3fc00000, -2.25f = 0xc0100000.
  Bytes bf = idx_bytes(0x0D, {2}, {0x3f, 0xc0, 0, 0, 0xc0, 0x10, 0, 0});
  Tensor f32 = parse_idx(bf.data(), bf.size());
  EXPECT_EQ(f32.dtype(), kFloat32);
  EXPECT_EQ(f32.to_vector<double>(), (std::vector<double>{1.5, -2.25}));
  // 0.1 = 0x3fb999999999999a.
  Bytes bd = idx_bytes(0x0E, {1}, {0x3f, 0xb9, 0x99, 0x99, 0x99, 0x99, 0x99, 0x9a});
  Tensor f64 = parse_idx(bd.data(), bd.size());
  EXPECT_EQ(f64.dtype(), kFloat64);
  EXPECT_EQ(f64.to_vector<double>(), (std::vector<double>{0.1}));
}

TEST(DataIdx, EmptyDimensionsAndScalar) {
  Bytes empty_dim = idx_bytes(0x08, {0, 28, 28}, {});
  Tensor t = parse_idx(empty_dim.data(), empty_dim.size());
  EXPECT_EQ(t.shape(), (Shape{0, 28, 28}));
  Bytes scalar = idx_bytes(0x08, {}, {42});
  Tensor s = parse_idx(scalar.data(), scalar.size());
  EXPECT_EQ(s.dim(), 0);
  EXPECT_EQ(s.item<int64_t>(), 42);
}

// Each bad image is rejected with "[read_idx] <name>: " and a message saying what is wrong.
void expect_bad(const Bytes& bytes, const std::string& needle) {
  expect_error([&] { parse_idx(bytes.data(), bytes.size(), "bad.idx"); }, "[read_idx] bad.idx: " + needle);
  expect_error([&] { Bytes gz = gzip(bytes); parse_idx(gz.data(), gz.size(), "bad.idx"); },
               "[read_idx] bad.idx: ");
}

TEST(DataIdx, BadFilesRejected) {
  expect_bad({1, 2, 8, 1, 0, 0, 0, 0}, "not an IDX file (magic bytes 1 2");
  expect_bad(idx_bytes(0x0A, {1}, {0}), "unknown IDX element type code 0xa");
  expect_bad({0, 0, 8}, "truncated header (3 bytes)");
  // No bytes, no buffer: an error, not a memcpy from null (UBSan's report under the fuzzer).
  expect_error([] { parse_idx(nullptr, 0, "none"); }, "[read_idx] none: truncated header (0 bytes)");
  expect_bad({0, 0, 8, 2, 0, 0, 0, 1}, "truncated header (8 bytes)");
  expect_bad(idx_bytes(0x08, {2, 3}, {1, 2, 3}), "truncated data: dimensions [2, 3] need 6 bytes, the file has 3");
  expect_bad(idx_bytes(0x0C, {2}, {0, 0, 0, 1}), "truncated data: dimensions [2] need 8 bytes, the file has 4");
  expect_bad(idx_bytes(0x08, {2}, {1, 2, 3}), "1 trailing bytes after the 2 bytes that dimensions [2] declare");
  expect_bad(idx_bytes(0x08, {0xffffffffu, 0xffffffffu, 0xffffffffu}, {}),
             "dimensions [4294967295, 4294967295, 4294967295] overflow the element count");
  expect_bad(idx_bytes(0x0E, {0x40000000u, 0x40000000u}, {}),
             "dimensions [1073741824, 1073741824] overflow the byte count");
  // An empty tensor's other dims still make its strides; the rank is Kiln's limit.
  expect_bad(idx_bytes(0x08, {0, 0xffffffffu, 0xffffffffu, 0xffffffffu}, {}),
             "dimensions [0, 4294967295, 4294967295, 4294967295] overflow the element count");
  expect_bad(idx_bytes(0x08, std::vector<uint32_t>(65, 1), {0}), "65 dimensions, past the limit of 64");
}

TEST(DataIdx, BadGzipRejected) {
  Bytes gz = gzip(sample_u8());
  Bytes truncated(gz.begin(), gz.begin() + static_cast<long>(gz.size() / 2));
  expect_error([&] { parse_idx(truncated.data(), truncated.size(), "t.gz"); }, "[read_idx] t.gz: truncated gzip stream");
  Bytes trailing = gz;
  trailing.insert(trailing.end(), {'x', 'y', 'z'});
  expect_error([&] { parse_idx(trailing.data(), trailing.size(), "t.gz"); },
               "[read_idx] t.gz: 3 trailing bytes after the gzip stream");
  Bytes padded = gz;  // zero padding after the stream (a block-padded copy): read as gzip -d reads it
  padded.insert(padded.end(), 4, 0);
  expect_sample_u8(parse_idx(padded.data(), padded.size(), "t.gz"));
  Bytes corrupt = gz;
  corrupt[3] = 0xe0;  // reserved flag bits set in the gzip header
  expect_error([&] { parse_idx(corrupt.data(), corrupt.size(), "t.gz"); }, "[read_idx] t.gz: corrupt gzip data");
  // More decompressed bytes than the header declares: stopped while inflating.
  Bytes big = idx_bytes(0x08, {4}, Bytes(1 << 21, 7));
  Bytes gz_big = gzip(big);
  expect_error([&] { parse_idx(gz_big.data(), gz_big.size(), "t.gz"); },
               "[read_idx] t.gz: more data than the dimensions declare (12 bytes expected");
}

// A 204 KB gzip declaring 1 GiB grew its output to 430 MB before "truncated" was found (a 20 MB
// one could force ~40 GB). Deflate expands at most ~1032:1, so such a file is refused as soon
// as its header is read.
TEST(DataIdx, GzipDeclaringMoreThanDeflateCanHoldIsRefusedUpFront) {
  Bytes bomb = gzip(idx_bytes(0x08, {1024, 1024, 1024}, Bytes(100000, 0)));
  expect_error([&] { parse_idx(bomb.data(), bomb.size(), "bomb.gz"); },
               "[read_idx] bomb.gz: dimensions [1024, 1024, 1024] declare 1073741840 bytes, more than " +
                   std::to_string(bomb.size()) + " bytes of gzip can hold");
  // The most compressible valid file (all zeros, compressed as hard as zlib can) is within it.
  Bytes zeros = gzip(idx_bytes(0x08, {8 << 20}, Bytes(8 << 20, 0)), Z_BEST_COMPRESSION);
  ASSERT_LT(zeros.size() * 1000, size_t{8} << 20);  // over 1000:1
  Tensor t = parse_idx(zeros.data(), zeros.size(), "zeros.gz");
  EXPECT_EQ(t.numel(), 8 << 20);
  EXPECT_EQ(t.sum().item<int64_t>(), 0);
}

// The elements are decoded in the tensor's own buffer (the file's bytes at its end, widened
// forwards): every type, raw and gzip, with enough elements to overlap.
TEST(DataIdx, ElementsDecodeInPlaceForEveryTypeRawAndGzip) {
  const int n = 1001;
  Bytes b8, b16, b32, bf, bd;
  std::vector<int64_t> want8, want16, want32;
  std::vector<double> wantf, wantd;
  for (int i = 0; i < n; ++i) {
    int8_t v8 = static_cast<int8_t>(i * 37);
    b8.push_back(static_cast<uint8_t>(v8));
    want8.push_back(v8);
    int16_t v16 = static_cast<int16_t>(i * 7919 - 30000);
    b16.push_back(static_cast<uint8_t>(static_cast<uint16_t>(v16) >> 8));
    b16.push_back(static_cast<uint8_t>(v16));
    want16.push_back(v16);
    int32_t v32 = i * 1000003 - 7;
    put_be32(b32, static_cast<uint32_t>(v32));
    want32.push_back(v32);
    float f = static_cast<float>(i) * 0.25f - 3.0f;
    uint32_t fu;
    std::memcpy(&fu, &f, 4);
    put_be32(bf, fu);
    wantf.push_back(f);
    double d = i * 0.1 - 50.0;
    uint64_t du;
    std::memcpy(&du, &d, 8);
    put_be32(bd, static_cast<uint32_t>(du >> 32));
    put_be32(bd, static_cast<uint32_t>(du));
    wantd.push_back(d);
  }
  const uint32_t un = static_cast<uint32_t>(n);
  for (bool compressed : {false, true}) {
    auto parse = [&](uint8_t code, const Bytes& payload) {
      Bytes b = idx_bytes(code, {un}, payload);
      if (compressed) b = gzip(b);
      return parse_idx(b.data(), b.size());
    };
    EXPECT_EQ(parse(0x09, b8).to_vector<int64_t>(), want8) << compressed;
    EXPECT_EQ(parse(0x0B, b16).to_vector<int64_t>(), want16) << compressed;
    EXPECT_EQ(parse(0x0C, b32).to_vector<int64_t>(), want32) << compressed;
    EXPECT_EQ(parse(0x0D, bf).to_vector<double>(), wantf) << compressed;
    EXPECT_EQ(parse(0x0E, bd).to_vector<double>(), wantd) << compressed;
  }
}

TEST(DataIdx, MissingFileAndDirectory) {
  TempDir dir;
  expect_error([&] { read_idx(dir.file("nope.gz")); }, "[read_idx] " + dir.file("nope.gz") + ": no such file");
  expect_error([&] { read_idx(dir.str()); }, "[read_idx] " + dir.str() + ": not a regular file");
  write_file(dir.file("empty"), {});
  expect_error([&] { read_idx(dir.file("empty")); }, "truncated header (0 bytes)");
}

// Truncations and byte flips of valid files give a tensor or a kiln::Error, never a crash (the
// sanitizer build checks the memory accesses).
TEST(DataIdx, MutatedFilesNeverCrash) {
  Bytes raw = sample_u8();
  Bytes gz = gzip(raw);
  uint32_t state = 12345;
  auto next = [&] { state = state * 1664525u + 1013904223u; return state >> 8; };
  int errors = 0, parsed = 0;
  for (const Bytes* base : {&raw, &gz}) {
    for (int trial = 0; trial < 300; ++trial) {
      Bytes b = *base;
      if (trial % 3 == 0) {
        b.resize(next() % b.size());
      } else {
        for (int k = 0; k < 1 + trial % 4; ++k) b[next() % b.size()] = static_cast<uint8_t>(next());
      }
      try {
        Tensor t = parse_idx(b.data(), b.size(), "m");
        EXPECT_GE(t.numel(), 0);
        ++parsed;
      } catch (const Error& e) {
        EXPECT_EQ(std::string(e.what()).rfind("[read_idx] m: ", 0), 0u) << e.what();
        ++errors;
      }
    }
  }
  EXPECT_GT(errors, 0);
}

}  // namespace
}  // namespace kiln::test
