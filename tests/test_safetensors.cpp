// kiln::io safetensors: round trips, files written by the Python library, malformed files, and
// atomic writes.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include "stand_in_device.h"
#include "io/input_file.h"
#include "io/json.h"
#include "io/safetensors.h"
#include "test_util.h"

namespace fs = std::filesystem;

namespace kiln::test {
namespace {

std::string source_dir() {
#ifdef KILN_SOURCE_DIR
  return KILN_SOURCE_DIR;
#else
  return fs::path(__FILE__).parent_path().parent_path().string();
#endif
}
std::string fixture(const std::string& name) { return source_dir() + "/tests/fixtures/safetensors/" + name; }

std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}
void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}
// A safetensors file from its header text and data bytes (no padding: readers must not need it).
std::string make_file(const std::string& header, const std::string& data) {
  uint64_t n = header.size();
  std::string out(reinterpret_cast<const char*>(&n), 8);
  return out + header + data;
}
std::string raw_bytes(const Tensor& t) {
  Tensor c = t.contiguous();
  return std::string(static_cast<const char*>(c.data_ptr()), c.nbytes());
}

std::string zeros_array(int n) {
  std::string s = "[";
  for (int i = 0; i < n; ++i) s += i ? ",0" : "0";
  return s + "]";
}

// Each test gets its own empty directory.
class Safetensors : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "kiln_safetensors_XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return dir_ + "/" + name; }
  std::vector<std::string> listing() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir_)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }
  // Writes `bytes` to a file and expects loading it to fail with a message containing `needle`.
  void expect_rejected(const std::string& bytes, const std::string& needle) {
    std::string p = path("bad.safetensors");
    write_bytes(p, bytes);
    expect_error([&] { io::load_safetensors(p); }, "[load_safetensors] " + p + ": ");
    expect_error([&] { io::load_safetensors(p); }, needle);
  }
  std::string dir_;
};

TEST_F(Safetensors, RoundTripsEveryDtypeWithZeroDimAndEmptyTensors) {
  std::map<std::string, Tensor> in;
  const ScalarType types[] = {kBool, kUInt8, kInt32, kInt64, kFloat16, kBFloat16, kFloat32, kFloat64};
  for (ScalarType t : types) {
    std::string n = dtype_name(t);
    in[n] = randint(0, 2, {2, 3, 4}).to(t);
    if (is_floating_point(t)) in[n] = randn({2, 3, 4}).to(t);
    in[n + ".scalar"] = scalar_tensor(1, t);
    in[n + ".empty"] = empty({3, 0, 2}, t);
  }
  io::save_safetensors(path("a.safetensors"), in);
  auto out = io::load_safetensors(path("a.safetensors"));
  ASSERT_EQ(out.size(), in.size());
  for (const auto& [name, t] : in) {
    ASSERT_TRUE(out.count(name)) << name;
    const Tensor& got = out.at(name);
    EXPECT_EQ(got.dtype(), t.dtype()) << name;
    EXPECT_EQ(got.shape(), t.shape()) << name;
    EXPECT_EQ(got.device(), Device::cpu()) << name;
    EXPECT_EQ(raw_bytes(got), raw_bytes(t)) << name;
  }
  EXPECT_EQ(listing(), std::vector<std::string>{"a.safetensors"});
}

TEST_F(Safetensors, NonContiguousInputIsSavedInRowMajorOrder) {
  Tensor base = arange(24, kFloat32).reshape({2, 3, 4});
  std::map<std::string, Tensor> in = {
      {"transposed", base.transpose(0, 2)},
      {"strided", base.slice(2, 0, 4, 2)},
      {"expanded", arange(3, kInt64).unsqueeze(0).expand({4, 3})},
      {"offset", base.select(0, 1)},
      {"grad", randn({3}).requires_grad_()},
  };
  io::save_safetensors(path("v.safetensors"), in);
  auto out = io::load_safetensors(path("v.safetensors"));
  for (const auto& [name, t] : in) {
    EXPECT_TRUE(out.at(name).is_contiguous()) << name;
    EXPECT_FALSE(out.at(name).requires_grad()) << name;
    expect_close(out.at(name), values(t), t.shape(), 0, 0, name);
  }
  // Only the viewed elements were written: 24 + 12 floats, 12 int64s, 12 + 3 floats.
  size_t data = 24 * 4 + 12 * 4 + 12 * 8 + 12 * 4 + 3 * 4;
  uint64_t header = 0;
  std::string bytes = read_bytes(path("v.safetensors"));
  std::memcpy(&header, bytes.data(), 8);
  EXPECT_EQ(bytes.size(), 8 + header + data);
  EXPECT_EQ(header % 8, 0u);
}

TEST_F(Safetensors, MetadataRoundTripsAndCheckpointsUseTheSameFormat) {
  std::map<std::string, std::string> meta = {{"step", "1200"}, {"empty", ""}, {"\xc3\xbc", "line\nbreak \"q\""}};
  std::map<std::string, Tensor> in = {{"model.w", ones({2, 2})}, {"rng", arange(4, kInt64)}};
  io::save_safetensors(path("m.safetensors"), in, meta);
  io::SafetensorsFile f = io::load_safetensors_file(path("m.safetensors"));
  EXPECT_EQ(f.metadata, meta);
  EXPECT_EQ(f.tensors.size(), 2u);
  EXPECT_EQ(io::load_safetensors_metadata(path("m.safetensors")), meta);

  // A checkpoint is the same file with its CRC-32 (of the header and data) in the metadata.
  io::save_checkpoint(path("c.ckpt"), in, meta);
  io::SafetensorsFile c = io::load_checkpoint(path("c.ckpt"));
  std::map<std::string, std::string> with_crc = meta;
  ASSERT_TRUE(c.metadata.count(io::kChecksumKey));
  with_crc[io::kChecksumKey] = c.metadata.at(io::kChecksumKey);
  EXPECT_EQ(c.metadata, with_crc);
  io::save_safetensors(path("m2.safetensors"), in, with_crc);
  EXPECT_EQ(read_bytes(path("c.ckpt")), read_bytes(path("m2.safetensors")));
  expect_close(c.tensors.at("rng"), {0, 1, 2, 3}, {4}, 0, 0);
  write_bytes(path("bad.ckpt"), "short");
  expect_error([&] { io::load_checkpoint(path("bad.ckpt")); }, "[load_checkpoint] " + path("bad.ckpt"));
  expect_error([&] { io::load_safetensors_metadata(path("bad.ckpt")); }, "[load_safetensors_metadata] " + path("bad.ckpt"));

  io::save_safetensors(path("none.safetensors"), in);
  EXPECT_TRUE(io::load_safetensors_file(path("none.safetensors")).metadata.empty());
  EXPECT_EQ(read_bytes(path("none.safetensors")).find("__metadata__"), std::string::npos);
}

TEST_F(Safetensors, SavesDeviceTensorsThroughTheHost) {
  if (cuda::is_available()) {
    Tensor x = arange(12, kFloat32).reshape({3, 4});
    io::save_safetensors(path("d.safetensors"), {{"x", x.to(Device::cuda(0)).t()}});
    expect_close(io::load_safetensors(path("d.safetensors")).at("x"), values(x.t()), {4, 3}, 0, 0);
    return;
  }
  // No GPU: a stand-in "cuda:0" whose memory is host memory (as in test_fallback.cpp).
  {
    test::StandInCuda stand_in;
    Tensor d = arange(12, kFloat32).reshape({3, 4}).to(Device::cuda(0)).t();
    ASSERT_EQ(d.device(), Device::cuda(0));
    io::save_safetensors(path("d.safetensors"), {{"x", d}});
  }
  Tensor got = io::load_safetensors(path("d.safetensors")).at("x");
  EXPECT_EQ(got.device(), Device::cpu());
  expect_close(got, values(arange(12, kFloat32).reshape({3, 4}).t()), {4, 3}, 0, 0);
}

TEST_F(Safetensors, DecodesJsonEscapesInNames) {
  std::string p = path("esc.safetensors");
  write_bytes(p, make_file("{\"\\ud83d\\ude00 \\u00e9\\/\\\"\":{\"dtype\":\"U8\",\"shape\":[],\"data_offsets\":[0,1]}}",
                           "\x07"));
  auto t = io::load_safetensors(p);
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t.begin()->first, "\xf0\x9f\x98\x80 \xc3\xa9/\"");
  expect_close(t.begin()->second, {7}, {}, 0, 0);
}

TEST_F(Safetensors, ReadsEveryDtypeWrittenByThePythonLibrary) {
  io::SafetensorsFile f = io::load_safetensors_file(fixture("all_dtypes.safetensors"));
  EXPECT_EQ(f.metadata, (std::map<std::string, std::string>{{"format", "pt"}}));
  auto& t = f.tensors;
  ASSERT_EQ(t.size(), 11u);
  const double inf = INFINITY, nan = NAN;
  EXPECT_EQ(t.at("bool").dtype(), kBool);
  expect_close(t.at("bool"), {1, 0, 1, 0, 0, 1}, {2, 3}, 0, 0);
  EXPECT_EQ(t.at("u8").dtype(), kUInt8);
  expect_close(t.at("u8"), {0, 1, 127, 128, 255}, {5}, 0, 0);
  EXPECT_EQ(t.at("i32").dtype(), kInt32);
  expect_close(t.at("i32"), {-2147483648.0, -1, 0, 1, 2147483647.0}, {5}, 0, 0);
  ASSERT_EQ(t.at("i64").dtype(), kInt64);
  const int64_t* i64 = t.at("i64").data_ptr<int64_t>();
  EXPECT_EQ(i64[0], std::numeric_limits<int64_t>::min());
  EXPECT_EQ(i64[1], -1);
  EXPECT_EQ(i64[4], std::numeric_limits<int64_t>::max());
  EXPECT_EQ(t.at("f16").dtype(), kFloat16);
  expect_close(t.at("f16"), {-2.5, 0, 0.333251953125, 65504, inf, -inf, nan, std::ldexp(1.0, -24)}, {8}, 0, 0);
  EXPECT_EQ(t.at("bf16").dtype(), kBFloat16);
  expect_close(t.at("bf16"), {-2.5, 1, 3.140625, std::ldexp(1.0, 100), inf, nan}, {6}, 0, 0);
  std::vector<double> w;
  for (int i = 0; i < 12; ++i) w.push_back(0.25 * i - 1);
  EXPECT_EQ(t.at("layer.0.weight").dtype(), kFloat32);
  expect_close(t.at("layer.0.weight"), w, {3, 4}, 0, 0);
  EXPECT_EQ(t.at("f64").dtype(), kFloat64);
  expect_close(t.at("f64"), {1.0 / 3, -1e300, 5e-324}, {3}, 0, 0);
  expect_close(t.at("scalar"), {3.5}, {}, 0, 0);
  expect_close(t.at("empty_f32"), {}, {2, 0, 3});
  EXPECT_EQ(t.at("empty_i64").dtype(), kInt64);
  expect_close(t.at("empty_i64"), {}, {0});
}

TEST_F(Safetensors, ReadsEscapedNamesAndMetadataWrittenByThePythonLibrary) {
  io::SafetensorsFile f = io::load_safetensors_file(fixture("names.safetensors"));
  EXPECT_EQ(f.metadata.at("note"), "\xc3\x9f\xcf\x80 \"q\"\n\\");
  expect_close(f.tensors.at("\xc3\xbcn\xc3\xaf" "c\xc3\xb8" "d\xc3\xa9.\xcf\x80"), {1, 2}, {2}, 0, 0);
  expect_close(f.tensors.at("quote\"back\\slash"), {3}, {1}, 0, 0);
  expect_close(f.tensors.at("tab\tnewline\ncontrol\x01"), {1}, {1}, 0, 0);

  io::SafetensorsFile m = io::load_safetensors_file(fixture("metadata.safetensors"));
  EXPECT_EQ(m.metadata, (std::map<std::string, std::string>{
                            {"step", "1200"}, {"epoch", "3"}, {"model", "resnet18"}, {"empty", ""}}));
  expect_close(m.tensors.at("x"), {1, -1}, {2}, 0, 0);
  EXPECT_TRUE(io::load_safetensors(fixture("no_tensors.safetensors")).empty());
}

// Kiln's writer lays files out exactly as the Python library does (data order, header JSON,
// escapes, padding), so these files are byte-identical and Python reads ours.
TEST_F(Safetensors, WritesTheSameBytesAsThePythonLibrary) {
  for (std::string name : {"all_dtypes.safetensors", "names.safetensors", "no_tensors.safetensors"}) {
    io::SafetensorsFile f = io::load_safetensors_file(fixture(name));
    io::save_safetensors(path(name), f.tensors, f.metadata);
    EXPECT_EQ(read_bytes(path(name)), read_bytes(fixture(name))) << name;
  }
}

TEST_F(Safetensors, RejectsTruncatedFiles) {
  std::string good = read_bytes(fixture("all_dtypes.safetensors"));
  uint64_t n = 0;
  std::memcpy(&n, good.data(), 8);
  expect_rejected("", "file is 0 bytes, too short for the 8-byte header length");
  expect_rejected(good.substr(0, 7), "file is 7 bytes, too short");
  expect_rejected(good.substr(0, 8), "header length " + std::to_string(n) + " runs past the end of the file (8 bytes)");
  expect_rejected(good.substr(0, 8 + n - 1), "runs past the end of the file");
  expect_rejected(good.substr(0, 8 + n), "are out of range: the data section has 0 bytes");
  expect_rejected(good.substr(0, good.size() - 1), "are out of range: the data section has");
  expect_rejected(good + "x", "the tensors cover only");
}

TEST_F(Safetensors, RejectsBadHeaderLengthsAndJson) {
  std::string big(8, '\0');
  uint64_t n = io::detail::kMaxHeaderBytes + 1;
  std::memcpy(big.data(), &n, 8);
  // Past both the limit and the file's end: a file of another kind (a text file), said so.
  expect_rejected(big + "{}", "not a safetensors file: its first 8 bytes give a header length of 100000001, past its end (10 bytes)");
  expect_rejected("root:x:0:0:root:/root:/bin/bash\n", "not a safetensors file");
  n = ~uint64_t{0};
  std::memcpy(big.data(), &n, 8);
  expect_rejected(big + "{}", "not a safetensors file");
  {  // past the limit only: a sparse file of 100 MB and more
    std::memcpy(big.data(), &(n = io::detail::kMaxHeaderBytes + 1), 8);
    const std::string p = path("huge.safetensors");
    write_bytes(p, big);
    std::filesystem::resize_file(p, io::detail::kMaxHeaderBytes + 100);
    expect_error([&] { io::load_safetensors(p); }, "header length 100000001 exceeds the limit of 100000000 bytes");
    std::filesystem::remove(p);
  }

  expect_rejected(make_file("{\"a\":", ""), "invalid JSON header at byte 5: unexpected end of the header");
  expect_rejected(make_file("{\"a\":1,}", ""), "invalid JSON header at byte 7: expected a string key");
  expect_rejected(make_file("{} x", ""), "unexpected text after the JSON value");
  expect_rejected(make_file("[1, 2]", ""), "header is an array, expected a JSON object");
  expect_rejected(make_file("{\"a\":\"\xff\"}", ""), "invalid UTF-8 in a string");
  expect_rejected(make_file("{\"a\":\"\\ud800\"}", ""), "lone high surrogate");
  expect_rejected(make_file("{\"a\":01}", ""), "leading zero");
  std::string deep = "{\"a\":{\"dtype\":\"U8\",\"shape\":[],\"data_offsets\":[0,1],\"x\":" + std::string(100, '[') +
                     std::string(100, ']') + "}}";
  expect_rejected(make_file(deep, "a"), "nested deeper than 4 levels");
  std::string t = "{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}";
  expect_rejected(make_file("{\"a\":" + t + ",\"a\":" + t + "}", "a"), "duplicate key \"a\"");
  expect_rejected(make_file("{\"__metadata__\":{\"k\":1}}", ""), "\"__metadata__\" entry \"k\" is a number");
  expect_rejected(make_file("{\"__metadata__\":[]}", ""), "\"__metadata__\" is an array");
  // A null "__metadata__" is none, as the reference reads it (published shards carry it).
  write_bytes(path("null_meta.safetensors"), make_file("{\"__metadata__\":null,\"a\":" + t + "}", "\x07"));
  const io::SafetensorsFile f = io::load_safetensors_file(path("null_meta.safetensors"));
  EXPECT_TRUE(f.metadata.empty());
  EXPECT_EQ(test::values(f.tensors.at("a")), std::vector<double>{7});
}

// A file that shrinks while it is read (another program rewriting it in place) is an error that
// names it; through a memory mapping it killed the process with SIGBUS. The file is cut after it
// was opened and sized, as a rewrite would cut it during the read.
TEST_F(Safetensors, AFileThatShrinksWhileItIsReadIsAnError) {
  const std::string p = path("shrinks.safetensors");
  io::save_safetensors(p, {{"w", ones({1 << 20})}});
  const io::InputFile file(p, "load_safetensors");
  ASSERT_EQ(::truncate(p.c_str(), 4096), 0);
  std::vector<char> buf(size_t{4} << 20);
  expect_error([&] { file.read(64, buf.data(), buf.size()); },
               "[load_safetensors] " + p + ": the file changed or could not be read while it was read (it ended early: read ");
  // What is there is read.
  file.read(0, buf.data(), 4096);
  // The loaders read through it: a truncated file is refused before anything is read.
  expect_error([&] { io::load_safetensors(p); }, "are out of range");
}

TEST_F(Safetensors, RejectsBadTensorEntries) {
  expect_rejected(make_file("{\"a\":[]}", ""), "tensor \"a\" is an array, expected an object");
  expect_rejected(make_file("{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", "abcd"), "tensor \"a\" has no \"data_offsets\"");
  expect_rejected(make_file("{\"a\":{\"shape\":[1],\"data_offsets\":[0,4]}}", "abcd"), "has no \"dtype\"");
  expect_rejected(make_file("{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", "abcd"), "has no \"shape\"");
  auto entry = [](const std::string& dtype, const std::string& shape, const std::string& offsets) {
    return "{\"t\":{\"dtype\":" + dtype + ",\"shape\":" + shape + ",\"data_offsets\":" + offsets + "}}";
  };
  expect_rejected(make_file(entry("\"I8\"", "[1]", "[0,1]"), "a"), "tensor \"t\" has unsupported dtype \"I8\" (kiln reads BOOL, U8");
  expect_rejected(make_file(entry("\"F8_E4M3\"", "[1]", "[0,1]"), "a"), "unsupported dtype \"F8_E4M3\"");
  expect_rejected(make_file(entry("\"F8_E4M3FNUZ\"", "[1]", "[0,1]"), "a"), "unsupported dtype \"F8_E4M3FNUZ\"");
  expect_rejected(make_file(entry("\"U16\"", "[1]", "[0,2]"), "ab"), "unsupported dtype \"U16\"");
  expect_rejected(make_file(entry("\"f32\"", "[1]", "[0,4]"), "abcd"), "unknown dtype \"f32\"");
  expect_rejected(make_file(entry("32", "[1]", "[0,4]"), "abcd"), "\"dtype\" is a number, expected a string");
  expect_rejected(make_file(entry("\"F32\"", "[-1]", "[0,4]"), "abcd"), "\"shape\" holds -1, expected a non-negative integer");
  expect_rejected(make_file(entry("\"F32\"", "[1.5]", "[0,4]"), "abcd"), "\"shape\" holds 1.5");
  expect_rejected(make_file(entry("\"F32\"", "[99999999999999999999]", "[0,4]"), "abcd"), "holds 99999999999999999999");
  expect_rejected(make_file(entry("\"F32\"", "{}", "[0,4]"), "abcd"), "\"shape\" is an object");
  expect_rejected(make_file(entry("\"F32\"", "[4294967296,4294967296]", "[0,4]"), "abcd"),
                  "has shape [4294967296, 4294967296], whose element count overflows");
  expect_rejected(make_file(entry("\"F64\"", "[1152921504606846976,8]", "[0,4]"), "abcd"), "overflows");
  expect_rejected(make_file(entry("\"F32\"", "[2]", "[0,4]"), "abcd"),
                  "tensor \"t\" of dtype F32 and shape [2] needs 8 bytes but data_offsets [0, 4] hold 4");
  expect_rejected(make_file(entry("\"F32\"", "[1]", "[0]"), "abcd"), "must be an array of two integers");
  expect_rejected(make_file(entry("\"F32\"", "[1]", "[0,4,8]"), "abcd"), "must be an array of two integers");
  expect_rejected(make_file(entry("\"F32\"", "[1]", "[0,-4]"), "abcd"), "\"data_offsets\" holds -4");
  expect_rejected(make_file(entry("\"F32\"", "[0]", "[4,0]"), "abcd"), "data_offsets [4, 0] end before they begin");
  expect_rejected(make_file(entry("\"F32\"", "[25]", "[0,100]"), "abcd"),
                  "data_offsets [0, 100] are out of range: the data section has 4 bytes");
  expect_rejected(make_file(entry("\"BOOL\"", "[2]", "[0,2]"), std::string("\x01\x02", 2)),
                  "tensor \"t\" of dtype BOOL holds byte 2 at element 1");
}

TEST_F(Safetensors, RejectsRanksNoOpTakes) {
  std::string shape = "[";
  for (int i = 0; i < 65; ++i) shape += i ? ",1" : "1";
  shape += "]";
  expect_rejected(make_file("{\"deep\":{\"dtype\":\"F32\",\"shape\":" + shape + ",\"data_offsets\":[0,4]}}", "abcd"),
                  "an array of more than 64 items");
  shape = "[";
  for (int i = 0; i < 64; ++i) shape += i ? ",1" : "1";
  shape += "]";
  write_bytes(path("ok.safetensors"), make_file("{\"t\":{\"dtype\":\"F32\",\"shape\":" + shape + ",\"data_offsets\":[0,4]}}",
                                               std::string(4, '\0')));
  EXPECT_EQ(io::load_safetensors(path("ok.safetensors")).at("t").dim(), 64);
}

TEST_F(Safetensors, CheckpointChecksumCatchesFlippedBytes) {
  std::map<std::string, Tensor> in = {{"w", arange(1000, kFloat32)}, {"step", tensor({7}, TensorOptions(kInt64))}};
  io::save_checkpoint(path("c.ckpt"), in, {{"epoch", "3"}});
  std::string bytes = read_bytes(path("c.ckpt"));
  // zlib's CRC-32 (Python's zlib.crc32) of the header as written, less its padding and with the
  // entry's value zeroed, then of the data, as io.h says.
  uint64_t header = 0;
  std::memcpy(&header, bytes.data(), 8);
  const std::string sum = io::load_checkpoint(path("c.ckpt")).metadata.at(io::kChecksumKey);
  ASSERT_EQ(sum.size(), 8u);
  std::string text = bytes.substr(8, header);
  text.erase(text.find_last_not_of(' ') + 1);
  text.replace(text.find(sum), 8, "00000000");
  uint32_t crc = io::detail::crc32_update(0, text.data(), text.size());
  crc = io::detail::crc32_update(crc, bytes.data() + 8 + header, bytes.size() - 8 - header);
  EXPECT_EQ(io::detail::crc32_hex(crc), sum);
  bytes[8 + header + 100] ^= 0x10;  // one bit of one weight
  write_bytes(path("c.ckpt"), bytes);
  expect_error([&] { io::load_checkpoint(path("c.ckpt")); },
               "[load_checkpoint] " + path("c.ckpt") + ": the CRC-32 of its header and data is ");
  expect_error([&] { io::load_checkpoint(path("c.ckpt")); }, "(--no-verify loads it anyway)");
  EXPECT_NO_THROW(io::load_checkpoint(path("c.ckpt"), false));  // verify off
  EXPECT_NO_THROW(io::load_safetensors(path("c.ckpt")));        // other readers ignore the entry
  // A file another program wrote has no checksum and loads unchecked.
  io::save_safetensors(path("plain.safetensors"), in);
  EXPECT_EQ(io::load_checkpoint(path("plain.safetensors")).tensors.size(), 2u);
  expect_error([&] { io::save_checkpoint(path("x.ckpt"), in, {{io::kChecksumKey, "0"}}); }, "is the checkpoint's own");
  expect_error([&] { io::save_checkpoint(path("x.ckpt"), in, {{io::kDataChecksumKey, "0"}}); },
               "is the checkpoint's own");
}

// The checksum covered the data alone: a changed resume setting or shape loaded silently, and a
// flipped bit in the checksum entry's name switched verification off.
TEST_F(Safetensors, CheckpointChecksumCoversTheHeader) {
  const std::string p = path("h.ckpt");
  const std::map<std::string, std::string> meta = {{"format", "kiln-train-checkpoint-1"}, {"lr", "0.001"}};
  io::save_checkpoint(p, {{"w", arange(6, kFloat32).reshape({2, 3})}}, meta);
  const std::string good = read_bytes(p);
  io::SafetensorsFile f = io::load_checkpoint(p);
  EXPECT_EQ(f.metadata.at("lr"), "0.001");
  EXPECT_EQ(f.metadata.count(io::kDataChecksumKey), 0u);
  auto changed = [&](const std::string& from, const std::string& to) {
    std::string b = good;
    size_t at = b.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    if (at != std::string::npos) b.replace(at, from.size(), to);
    write_bytes(p, b);
  };
  const std::string mismatch = "[load_checkpoint] " + p + ": the CRC-32 of its header and data is ";
  changed("\"lr\":\"0.001\"", "\"lr\":\"0.003\"");  // one setting
  expect_error([&] { io::load_checkpoint(p); }, mismatch);
  EXPECT_EQ(io::load_checkpoint(p, false).metadata.at("lr"), "0.003");  // --no-verify
  changed("\"shape\":[2,3]", "\"shape\":[3,2]");  // a shape
  expect_error([&] { io::load_checkpoint(p); }, mismatch);
  changed("\"w\":", "\"v\":");  // a name
  expect_error([&] { io::load_checkpoint(p); }, mismatch);
  changed("kiln_crc32", "jiln_crc32");  // the entry's own name
  expect_error([&] { io::load_checkpoint(p); },
               "[load_checkpoint] " + p + ": a Kiln checkpoint (format 'kiln-train-checkpoint-1') without its "
               "checksum entry \"kiln_crc32\"");
  EXPECT_NO_THROW(io::load_checkpoint(p, false));
  // JSON whitespace changes nothing that loads, and is not covered.
  {
    std::string b = good;
    b.insert(b.find("\"0.001\""), " ");
    uint64_t n = 0;
    std::memcpy(&n, b.data(), 8);
    ++n;
    std::memcpy(b.data(), &n, 8);
    write_bytes(p, b);
    EXPECT_EQ(io::load_checkpoint(p).metadata.at("lr"), "0.001");
  }
  // Still a plain safetensors file: only a metadata string differs from save_safetensors's.
  write_bytes(p, good);
  std::map<std::string, std::string> with_crc = meta;
  with_crc[io::kChecksumKey] = f.metadata.at(io::kChecksumKey);
  io::save_safetensors(path("plain.safetensors"), {{"w", arange(6, kFloat32).reshape({2, 3})}}, with_crc);
  EXPECT_EQ(read_bytes(path("plain.safetensors")), good);
}

// Checkpoints written before the header was covered carry "kiln_data_crc32" (the data alone):
// they load, and their data is still checked.
TEST_F(Safetensors, CheckpointsFromEarlierVersionsStillVerifyTheirData) {
  const std::string p = path("old.ckpt");
  std::map<std::string, Tensor> in = {{"w", arange(100, kFloat32)}, {"step", tensor({7}, TensorOptions(kInt64))}};
  io::save_safetensors(p, in, {{"format", "kiln-train-checkpoint-1"}, {io::kDataChecksumKey, "00000000"}});
  std::string bytes = read_bytes(p);
  uint64_t header = 0;
  std::memcpy(&header, bytes.data(), 8);
  const std::string crc = io::detail::crc32_hex(io::detail::crc32_update(0, bytes.data() + 8 + header, bytes.size() - 8 - header));
  bytes.replace(bytes.find("00000000"), 8, crc);
  write_bytes(p, bytes);
  io::SafetensorsFile f = io::load_checkpoint(p);
  EXPECT_EQ(f.metadata.at(io::kDataChecksumKey), crc);
  expect_close(f.tensors.at("step"), {7}, {1}, 0, 0);
  bytes[bytes.size() - 5] ^= 0x01;
  write_bytes(p, bytes);
  expect_error([&] { io::load_checkpoint(p); }, "[load_checkpoint] " + p + ": the CRC-32 of its data is ");
  EXPECT_NO_THROW(io::load_checkpoint(p, false));
}

// A 98 MB header of `{"__metadata__":[0,0,...]}` took 6.5 GB as a tree before its schema was
// checked. The reader stops at the schema's bounds, where they are first exceeded.
TEST_F(Safetensors, HostileHeadersStopAtTheSchemasBounds) {
  std::string zeros = "{\"__metadata__\":[";
  for (int i = 0; i < 100000; ++i) zeros += i ? ",0" : "0";
  zeros += "]}";
  // The 65th item starts at byte 17 + 64 * 2.
  expect_rejected(make_file(zeros, ""), "invalid JSON header at byte 145: an array of more than 64 items");
  expect_rejected(make_file("{\"a\":{\"shape\":[[1]]}}", ""), "at byte 16: nested deeper than 4 levels");
  expect_rejected(make_file("{\"__metadata__\":{\"k\":{\"x\":[1]}}}", ""), "nested deeper than 4 levels");
}

// A long value in a message is cut at a character's start, never inside one.
TEST(Json, DescribeCutsALongStringAtACharacter) {
  io::json::Value v;
  v.kind = io::json::Value::Kind::String;
  v.text = std::string(18, 'a');  // the 40-byte cut falls inside the 11th é
  for (int i = 0; i < 20; ++i) v.text += "\xc3\xa9";  // é, two bytes each
  const std::string d = v.describe();
  ASSERT_TRUE(d.ends_with("..."));
  const std::string kept = d.substr(0, d.size() - 3);
  EXPECT_EQ((kept.size() - 19) % 2, 0u) << d;  // the quote and the a's, then whole é's
  EXPECT_LE(kept.size(), 40u);
}

TEST(Json, LimitsStopTheReaderWhereTheyAreFirstExceeded) {
  using io::json::parse;
  using io::json::ParseLimits;
  EXPECT_EQ(parse("[1,2]", "t", "", {.max_array_items = 2}).items.size(), 2u);
  expect_error([] { parse("[1,2,3]", "t", "p: ", {.max_array_items = 2}); },
               "[t] p: invalid JSON header at byte 5: an array of more than 2 items");
  EXPECT_EQ(parse("{\"a\":[1]}", "t", "", {.max_depth = 3}).members.size(), 1u);
  expect_error([] { parse("{\"a\":[[1]]}", "t", "", {.max_depth = 3}); }, "at byte 7: nested deeper than 3 levels");
  std::string wide = "{";
  for (int i = 0; i < 1000; ++i) wide += (i ? ",\"k" : "\"k") + std::to_string(i) + "\":0";
  wide += "}";
  EXPECT_EQ(parse(wide, "t", "").members.size(), 1000u);
  expect_error([&] { parse(wide, "t", "", {.max_tree_bytes = 10000}); },
               "needs more than 10000 bytes of memory to hold");
  // Without limits: the defaults (64 levels, arrays and trees of any size).
  EXPECT_EQ(parse(zeros_array(100000), "t", "").items.size(), 100000u);
  EXPECT_NO_THROW(parse(std::string(64, '[') + std::string(64, ']'), "t", ""));
  expect_error([] { parse(std::string(65, '[') + std::string(65, ']'), "t", ""); }, "nested deeper than 64 levels");
  // Duplicate keys are still found, at the later one.
  expect_error([] { parse("{\"b\":1,\"a\":2,\"b\":3,\"a\":4}", "t", ""); }, "at byte 13: duplicate key \"b\"");
}

// An empty tensor has no buffer (a null pointer), which zlib's crc32 takes as "start again": one
// after a non-empty tensor in the data's order reset the checksum, and the checkpoint then failed
// its own check.
TEST_F(Safetensors, CheckpointWithEmptyTensorsPassesItsOwnCheck) {
  std::map<std::string, Tensor> in = {{"a", ones({2})}, {"b", empty({0})}, {"c", empty({3, 0}, kInt64)}};
  io::save_checkpoint(path("e.ckpt"), in, {});
  io::SafetensorsFile f = io::load_checkpoint(path("e.ckpt"));
  EXPECT_EQ(f.tensors.at("b").numel(), 0);
  EXPECT_EQ(f.tensors.at("c").shape(), (Shape{3, 0}));
  EXPECT_EQ(f.tensors.at("a").sum().item<float>(), 2.0f);
}

TEST_F(Safetensors, RejectsOverlapsGapsAndTrailingData) {
  auto two = [](const std::string& a, const std::string& b) {
    return "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":" + a +
           "},\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":" + b + "}}";
  };
  std::string data16(16, '\0');
  expect_rejected(make_file(two("[0,8]", "[4,12]"), std::string(12, '\0')),
                  "tensors \"a\" (data_offsets [0, 8]) and \"b\" (data_offsets [4, 12]) overlap");
  expect_rejected(make_file(two("[0,8]", "[0,8]"), data16), "overlap");
  expect_rejected(make_file(two("[8,16]", "[0,8]"), data16 + "xxxx"), "the data section has 20 bytes but the tensors cover only 16");
  expect_rejected(make_file(two("[0,8]", "[12,20]"), std::string(20, '\0')),
                  "gap of 4 bytes in the data before tensor \"b\" (data_offsets [12, 20])");
  // An empty tensor inside another tensor's bytes overlaps it too (as the reference says).
  std::string with_empty = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                           "\"e\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[4,4]}}";
  expect_rejected(make_file(with_empty, std::string(8, '\0')), "overlap");
  // Out of order in the header but tiling the data is fine; so is any JSON whitespace.
  std::string p = path("ok.safetensors");
  write_bytes(p, make_file(" {\"b\" : {\"shape\":[2], \"dtype\":\"F32\", \"data_offsets\":[8,16], \"extra\":null},\n"
                           "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}  ", data16));
  auto t = io::load_safetensors(p);
  EXPECT_EQ(t.size(), 2u);
}

TEST_F(Safetensors, RejectsMissingFilesAndDirectories) {
  expect_error([&] { io::load_safetensors(path("missing.safetensors")); },
               "[load_safetensors] " + path("missing.safetensors") + ": cannot open: No such file");
  expect_error([&] { io::load_safetensors(dir_); }, "not a regular file");
  // A FIFO: refused at once, not an open that waits for a writer forever.
  ASSERT_EQ(::mkfifo(path("fifo").c_str(), 0600), 0);
  expect_error([&] { io::load_safetensors(path("fifo")); }, path("fifo") + ": not a regular file");
}

TEST_F(Safetensors, SaveRejectsBadNamesAndTensorsAndKeepsThePreviousFile) {
  std::string p = path("keep.safetensors");
  io::save_safetensors(p, {{"w", ones({2})}});
  std::string before = read_bytes(p);
  expect_error([&] { io::save_safetensors(p, {{"__metadata__", ones({1})}}); }, "\"__metadata__\" is reserved");
  expect_error([&] { io::save_safetensors(p, {{"\xff", ones({1})}}); }, "is not valid UTF-8");
  expect_error([&] { io::save_safetensors(p, {{"x", Tensor()}}); }, "[save_safetensors] " + p + ": tensor \"x\" is undefined");
  expect_error([&] { io::save_safetensors(p, {{"x", ones({1})}}, {{"k", "\xc0\xaf"}}); }, "metadata entry \"k\"");
  EXPECT_EQ(read_bytes(p), before);
  EXPECT_EQ(listing(), std::vector<std::string>{"keep.safetensors"});
  expect_error([&] { io::save_safetensors(path("no/such/dir/x.safetensors"), {{"w", ones({2})}}); },
               "cannot create a temporary file");
}

TEST_F(Safetensors, TheNextSaveRemovesTemporariesOfKilledWriters) {
  std::string p = path("last.safetensors");
  // A writer killed mid-save leaves ".last.safetensors.tmp.PID.N.R"; PID 999999999 is no process.
  write_bytes(path(".last.safetensors.tmp.999999999.0.1"), std::string(1000, 'x'));
  // Temporaries of a live process (this one: it may be saving on another thread) and of other files stay.
  const std::string live = ".last.safetensors.tmp." + std::to_string(::getpid()) + ".7.7";
  write_bytes(path(live), "y");
  write_bytes(path(".other.safetensors.tmp.999999999.0.1"), "z");
  io::save_checkpoint(p, {{"w", ones({2})}});
  EXPECT_EQ(listing(), (std::vector<std::string>{".last.safetensors.tmp." + std::to_string(::getpid()) + ".7.7",
                                                 ".other.safetensors.tmp.999999999.0.1", "last.safetensors"}));
}

// A file name of 255 bytes (the longest there is) is saved and read back: the temporary's name,
// longer than the file's, was refused as too long. A killed writer's temporary of it is removed.
TEST_F(Safetensors, TheLongestFileNameIsSaved) {
  const std::string name = std::string(255 - 12, 'n') + ".safetensors";
  io::save_checkpoint(path(name), {{"w", ones({2})}});
  EXPECT_EQ(test::values(io::load_checkpoint(path(name)).tensors.at("w")), (std::vector<double>{1, 1}));
  EXPECT_EQ(listing(), std::vector<std::string>{name});
  std::string stale;  // as a killed writer (PID 999999999 is no process) would leave it
  {
    io::AtomicFile f(path(name));
    const std::string temp = fs::path(f.temp_path()).filename().string();
    EXPECT_LE(temp.size(), 255u);
    stale = temp.substr(0, temp.find(".tmp.") + 5) + "999999999.0.1";
  }
  write_bytes(path(stale), "x");
  EXPECT_EQ(listing().size(), 2u);
  io::save_checkpoint(path(name), {{"w", ones({3})}});
  EXPECT_EQ(listing(), std::vector<std::string>{name});
}

TEST_F(Safetensors, InterruptedAtomicWriteLeavesThePreviousFileAndNoTemporary) {
  std::string p = path("ckpt.safetensors");
  io::save_safetensors(p, {{"w", arange(6, kFloat32)}}, {{"step", "1"}});
  std::string before = read_bytes(p);
  std::string temp;
  EXPECT_THROW(io::write_file_atomically(p,
                                         [&](io::AtomicFile& f) {
                                           temp = f.temp_path();
                                           f.write("partial", 7);
                                           EXPECT_TRUE(fs::exists(temp));
                                           throw std::runtime_error("simulated crash");
                                         }),
               std::runtime_error);
  EXPECT_FALSE(temp.empty());
  EXPECT_EQ(fs::path(temp).parent_path(), fs::path(p).parent_path());
  EXPECT_FALSE(fs::exists(temp));
  EXPECT_EQ(read_bytes(p), before);
  EXPECT_EQ(listing(), std::vector<std::string>{"ckpt.safetensors"});
  EXPECT_EQ(io::load_safetensors_file(p).metadata.at("step"), "1");

  {  // destroyed without commit: nothing is created
    io::AtomicFile f(path("never"));
    f.write("x", 1);
  }
  EXPECT_EQ(listing(), std::vector<std::string>{"ckpt.safetensors"});

  io::write_file_atomically(p, [](io::AtomicFile& f) { f.write("new", 3); });
  EXPECT_EQ(read_bytes(p), "new");
  EXPECT_EQ(listing(), std::vector<std::string>{"ckpt.safetensors"});
  mode_t mask = ::umask(0);
  ::umask(mask);
  struct stat st {};
  ASSERT_EQ(::stat(p.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0666 & ~mask);  // as any newly created file, not mkstemp's 0600
}

mode_t mode_of(const std::string& p) {
  struct stat st {};
  EXPECT_EQ(::stat(p.c_str(), &st), 0) << p;
  return st.st_mode & 07777;
}

// A save through a symbolic link replaced the link with a regular file (the file it named kept
// its old contents), and a replaced file lost its permissions (a private checkpoint became
// world-readable on its next save).
TEST_F(Safetensors, SavingThroughALinkUpdatesItsTargetAndPermissionsAreKept) {
  fs::create_directories(path("real"));
  const std::string target = path("real/c.safetensors"), link = path("link.safetensors");
  io::save_safetensors(target, {{"w", zeros({2})}});
  ASSERT_EQ(::chmod(target.c_str(), 0600), 0);
  fs::create_symlink("real/c.safetensors", link);  // relative to the link's directory
  io::save_safetensors(link, {{"w", ones({2})}});
  EXPECT_TRUE(fs::is_symlink(link));
  EXPECT_EQ(fs::read_symlink(link), fs::path("real/c.safetensors"));
  expect_close(io::load_safetensors(target).at("w"), {1, 1}, {2}, 0, 0);
  EXPECT_EQ(mode_of(target), 0600u);
  EXPECT_EQ(listing(), (std::vector<std::string>{"link.safetensors", "real"}));  // no temporary left
  // A link to a link, absolute this time; and a dangling link gets its file.
  fs::create_symlink(link, path("link2.safetensors"));
  io::save_checkpoint(path("link2.safetensors"), {{"w", full({2}, 3.0f)}});
  expect_close(io::load_checkpoint(target).tensors.at("w"), {3, 3}, {2}, 0, 0);
  EXPECT_EQ(mode_of(target), 0600u);
  fs::create_symlink("real/new.safetensors", path("dangling.safetensors"));
  io::save_safetensors(path("dangling.safetensors"), {{"w", ones({1})}});
  EXPECT_TRUE(fs::is_symlink(path("dangling.safetensors")));
  EXPECT_TRUE(fs::is_regular_file(fs::symlink_status(path("real/new.safetensors"))));
  std::vector<std::string> in_real;
  for (const auto& e : fs::directory_iterator(path("real"))) in_real.push_back(e.path().filename().string());
  std::sort(in_real.begin(), in_real.end());
  EXPECT_EQ(in_real, (std::vector<std::string>{"c.safetensors", "new.safetensors"}));
  // A plain file keeps unusual permissions too.
  const std::string plain = path("plain.txt");
  io::write_file_atomically(plain, [](io::AtomicFile& f) { f.write("a", 1); });
  ASSERT_EQ(::chmod(plain.c_str(), 0640), 0);
  io::write_file_atomically(plain, [](io::AtomicFile& f) { f.write("b", 1); });
  EXPECT_EQ(read_bytes(plain), "b");
  EXPECT_EQ(mode_of(plain), 0640u);
  // A link to something that is not a regular file (a FIFO here; /dev/null in practice) is
  // refused: renaming over it would replace a device with a file.
  const std::string fifo = path("fifo"), to_fifo = path("to_fifo.safetensors");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  ASSERT_EQ(::symlink(fifo.c_str(), to_fifo.c_str()), 0);
  expect_error([&] { io::save_safetensors(to_fifo, {{"w", ones({2})}}); }, ": is not a regular file; not replaced");
  struct stat st {};
  ASSERT_EQ(::lstat(fifo.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
}

}  // namespace
}  // namespace kiln::test
