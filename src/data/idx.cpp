// The IDX reader: header checks, gzip decompression through zlib, big-endian element decoding.
#include "kiln/data/idx.h"

#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <system_error>
#include <vector>

namespace kiln::data {
namespace {

constexpr const char* kWhere = "read_idx";

struct Header {
  uint8_t code = 0;
  ScalarType dtype = kUInt8;
  size_t file_elem_size = 1;  // bytes per element in the file (may differ from the tensor's)
  Shape dims;
  size_t header_bytes = 0;
  size_t payload_bytes = 0;  // bytes of elements the dims declare
};

uint32_t be32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

// The header of an IDX image of which the first n bytes are known; nullopt if n is too short to
// tell yet. Throws on a bad magic number, unknown type code or a size that overflows.
std::optional<Header> parse_header(const uint8_t* p, size_t n, const std::string& name) {
  if (n < 4) return std::nullopt;
  KILN_CHECK(p[0] == 0 && p[1] == 0, kWhere, name, ": not an IDX file (magic bytes ", int{p[0]}, " ", int{p[1]},
             ", expected 0 0)");
  Header h;
  h.code = p[2];
  switch (h.code) {
    case 0x08: h.dtype = kUInt8; h.file_elem_size = 1; break;
    case 0x09: h.dtype = kInt32; h.file_elem_size = 1; break;  // int8, widened
    case 0x0B: h.dtype = kInt32; h.file_elem_size = 2; break;  // int16, widened
    case 0x0C: h.dtype = kInt32; h.file_elem_size = 4; break;
    case 0x0D: h.dtype = kFloat32; h.file_elem_size = 4; break;
    case 0x0E: h.dtype = kFloat64; h.file_elem_size = 8; break;
    default:
      KILN_FAIL(kWhere, name, ": unknown IDX element type code 0x", std::hex, int{h.code},
                " (expected 0x08, 0x09, 0x0B, 0x0C, 0x0D or 0x0E)");
  }
  size_t ndim = p[3];
  KILN_CHECK(static_cast<int64_t>(ndim) <= kMaxDims, kWhere, name, ": ", ndim, " dimensions, past the limit of ",
             kMaxDims);
  h.header_bytes = 4 + 4 * ndim;
  if (n < h.header_bytes) return std::nullopt;
  // Element and byte counts are bounded by int64 (a tensor's numel) before anything is allocated.
  for (size_t i = 0; i < ndim; ++i) h.dims.push_back(be32(p + 4 + 4 * i));
  // The product of the non-zero dims too: an empty tensor's strides are still that product.
  uint64_t numel = 1;
  for (int64_t d : h.dims) {
    KILN_CHECK(!__builtin_mul_overflow(numel, static_cast<uint64_t>(std::max<int64_t>(d, 1)), &numel) &&
                   numel <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()),
               kWhere, name, ": dimensions ", h.dims, " overflow the element count");
  }
  for (int64_t d : h.dims)
    if (d == 0) numel = 0;
  // The tensor's bytes (up to 8 per element) must fit in int64 too.
  KILN_CHECK(numel <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / 8, kWhere, name,
             ": dimensions ", h.dims, " overflow the byte count");
  h.payload_bytes = static_cast<size_t>(numel * h.file_elem_size);
  return h;
}

[[noreturn]] void zlib_fail(const z_stream& zs, int ret, const std::string& name) {
  KILN_FAIL(kWhere, name, ": corrupt gzip data (zlib error ", ret, zs.msg ? std::string(": ") + zs.msg : "", ")");
}

// Decompresses a gzip stream (members may be concatenated). Output grows only as data arrives and
// stops as soon as it exceeds what the IDX header declares, so a bad file cannot exhaust memory
// beyond its own content.
std::vector<uint8_t> gunzip(const uint8_t* in, size_t in_size, const std::string& name) {
  z_stream zs{};
  int ret = inflateInit2(&zs, 16 + MAX_WBITS);
  if (ret != Z_OK) zlib_fail(zs, ret, name);
  struct End { z_stream* zs; ~End() { inflateEnd(zs); } } end{&zs};

  std::vector<uint8_t> out;
  size_t produced = 0;
  size_t consumed = 0;
  std::optional<size_t> expected;  // header + payload, once the header has been decompressed
  constexpr size_t kChunk = size_t{1} << 20;
  constexpr size_t kMaxFeed = size_t{1} << 30;  // avail_in is a uInt
  for (;;) {
    if (zs.avail_in == 0 && consumed < in_size) {
      size_t feed = std::min(in_size - consumed, kMaxFeed);
      zs.next_in = const_cast<Bytef*>(in + consumed);
      zs.avail_in = static_cast<uInt>(feed);
      consumed += feed;
    }
    if (out.size() - produced < kChunk) out.resize(produced + kChunk);
    zs.next_out = out.data() + produced;
    zs.avail_out = static_cast<uInt>(out.size() - produced);
    ret = inflate(&zs, Z_NO_FLUSH);
    produced = out.size() - zs.avail_out;
    if (!expected) {
      if (auto h = parse_header(out.data(), produced, name)) expected = h->header_bytes + h->payload_bytes;
    }
    KILN_CHECK(!expected || produced <= *expected, kWhere, name, ": more data than the dimensions declare (",
               *expected, " bytes expected, trailing bytes after them)");
    if (ret == Z_STREAM_END) {
      size_t left = zs.avail_in + (in_size - consumed);
      if (left == 0) break;
      const uint8_t* rest = in + (in_size - left);
      KILN_CHECK(left >= 2 && rest[0] == 0x1f && rest[1] == 0x8b, kWhere, name, ": ", left,
                 " trailing bytes after the gzip stream");
      ret = inflateReset(&zs);  // another gzip member follows
      if (ret != Z_OK) zlib_fail(zs, ret, name);
      continue;
    }
    if (ret == Z_BUF_ERROR && zs.avail_in == 0 && consumed == in_size) {
      KILN_FAIL(kWhere, name, ": truncated gzip stream (ends after ", produced, " decompressed bytes)");
    }
    if (ret != Z_OK && ret != Z_BUF_ERROR) zlib_fail(zs, ret, name);
  }
  out.resize(produced);
  return out;
}

template <class T>
void decode(const uint8_t* src, T* dst, size_t numel, size_t elem_bytes, uint8_t code) {
  for (size_t i = 0; i < numel; ++i, src += elem_bytes) {
    if (code == 0x09) {
      dst[i] = static_cast<T>(static_cast<int8_t>(src[0]));
    } else if (code == 0x0B) {
      dst[i] = static_cast<T>(static_cast<int16_t>((uint16_t{src[0]} << 8) | src[1]));
    } else if (elem_bytes == 4) {
      uint32_t u = be32(src);
      std::memcpy(&dst[i], &u, 4);
    } else {
      uint64_t u = (uint64_t{be32(src)} << 32) | be32(src + 4);
      std::memcpy(&dst[i], &u, 8);
    }
  }
}

Tensor parse_raw(const uint8_t* p, size_t n, const std::string& name) {
  auto h = parse_header(p, n, name);
  KILN_CHECK(h.has_value(), kWhere, name, ": truncated header (", n, " bytes)");
  KILN_CHECK(n - h->header_bytes >= h->payload_bytes, kWhere, name, ": truncated data: dimensions ", h->dims,
             " need ", h->payload_bytes, " bytes, the file has ", n - h->header_bytes);
  KILN_CHECK(n - h->header_bytes == h->payload_bytes, kWhere, name, ": ", n - h->header_bytes - h->payload_bytes,
             " trailing bytes after the ", h->payload_bytes, " bytes that dimensions ", h->dims, " declare");
  Tensor t = empty(h->dims, h->dtype);
  const uint8_t* src = p + h->header_bytes;
  size_t numel = static_cast<size_t>(t.numel());
  switch (h->code) {
    case 0x08: if (numel) std::memcpy(t.data_ptr(), src, numel); break;
    case 0x09: case 0x0B: case 0x0C: decode(src, t.data_ptr<int32_t>(), numel, h->file_elem_size, h->code); break;
    case 0x0D: decode(src, t.data_ptr<float>(), numel, 4, h->code); break;
    default: decode(src, t.data_ptr<double>(), numel, 8, h->code); break;
  }
  return t;
}

}  // namespace

Tensor parse_idx(const void* bytes, size_t size, const std::string& name) {
  const auto* p = static_cast<const uint8_t*>(bytes);
  if (size >= 2 && p[0] == 0x1f && p[1] == 0x8b) {
    std::vector<uint8_t> raw = gunzip(p, size, name);
    return parse_raw(raw.data(), raw.size(), name);
  }
  return parse_raw(p, size, name);
}

Tensor read_idx(const std::string& path) {
  std::error_code ec;
  auto status = std::filesystem::status(path, ec);
  KILN_CHECK(std::filesystem::exists(status), kWhere, path, ": no such file");
  KILN_CHECK(std::filesystem::is_regular_file(status), kWhere, path, ": not a regular file");
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  KILN_CHECK(in.good(), kWhere, path, ": cannot open the file");
  std::streamoff size = in.tellg();
  KILN_CHECK(size >= 0, kWhere, path, ": cannot read the file's size");
  std::vector<uint8_t> bytes(static_cast<size_t>(size));
  in.seekg(0);
  in.read(reinterpret_cast<char*>(bytes.data()), size);
  KILN_CHECK(in.gcount() == size, kWhere, path, ": read ", in.gcount(), " of ", size, " bytes");
  return parse_idx(bytes.data(), bytes.size(), path);
}

}  // namespace kiln::data
