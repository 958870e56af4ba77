// The IDX reader: header checks, gzip decompression through zlib straight into the tensor,
// big-endian element decoding in place.
#include "kiln/data/idx.h"

#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <optional>
#include <system_error>

#include "io/input_file.h"

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

// The most bytes deflate can expand n compressed bytes to: a 258-byte match takes at least 2
// bits (a 1-bit length code and a 1-bit distance code), so about 1032:1. Headers, trailers and
// block headers only lower it, so no valid file exceeds it.
constexpr size_t kMaxDeflateRatio = 1032;

// A gzip stream (members may be concatenated), decompressed on demand into the caller's buffers.
class Gunzip {
 public:
  Gunzip(const uint8_t* in, size_t n, const std::string& name) : in_(in), n_(n), name_(name) {
    int ret = inflateInit2(&zs_, 16 + MAX_WBITS);
    if (ret != Z_OK) zlib_fail(zs_, ret, name_);
  }
  ~Gunzip() { inflateEnd(&zs_); }
  Gunzip(const Gunzip&) = delete;
  Gunzip& operator=(const Gunzip&) = delete;

  // Fills dst with up to `cap` bytes: fewer only when the last member has ended and no input is
  // left. A corrupt or truncated stream, or bytes after it that start no member, throw.
  size_t read(uint8_t* dst, size_t cap) {
    constexpr size_t kMaxStep = size_t{1} << 30;  // avail_in and avail_out are uInt
    size_t got = 0;
    while (got < cap && !finished_) {
      if (zs_.avail_in == 0 && consumed_ < n_) {
        size_t feed = std::min(n_ - consumed_, kMaxStep);
        zs_.next_in = const_cast<Bytef*>(in_ + consumed_);
        zs_.avail_in = static_cast<uInt>(feed);
        consumed_ += feed;
      }
      size_t step = std::min(cap - got, kMaxStep);
      zs_.next_out = dst + got;
      zs_.avail_out = static_cast<uInt>(step);
      int ret = inflate(&zs_, Z_NO_FLUSH);
      got += step - zs_.avail_out;
      if (ret == Z_STREAM_END) {
        size_t left = zs_.avail_in + (n_ - consumed_);
        if (left == 0) {
          finished_ = true;
          break;
        }
        const uint8_t* rest = in_ + (n_ - left);
        // Zero padding after the last member (a block-padded copy) ends the file, as gzip -d and
        // Python's gzip read it.
        if (std::all_of(rest, rest + left, [](uint8_t b) { return b == 0; })) {
          finished_ = true;
          break;
        }
        KILN_CHECK(left >= 2 && rest[0] == 0x1f && rest[1] == 0x8b, kWhere, name_, ": ", left,
                   " trailing bytes after the gzip stream");
        ret = inflateReset(&zs_);  // another gzip member follows
        if (ret != Z_OK) zlib_fail(zs_, ret, name_);
        continue;
      }
      if (ret == Z_BUF_ERROR && zs_.avail_in == 0 && consumed_ == n_)
        KILN_FAIL(kWhere, name_, ": truncated gzip stream (ends after ", total_ + got, " decompressed bytes)");
      if (ret != Z_OK && ret != Z_BUF_ERROR) zlib_fail(zs_, ret, name_);
    }
    total_ += got;
    return got;
  }

 private:
  z_stream zs_{};
  const uint8_t* in_;
  size_t n_;
  size_t consumed_ = 0;  // input handed to zlib so far
  size_t total_ = 0;     // bytes decompressed so far
  bool finished_ = false;
  const std::string& name_;
};

// Where the file's elements go in the tensor made for them: the end of its buffer, so that
// decode_in_place can widen them to the tensor's type where they lie.
uint8_t* payload_destination(Tensor& t, const Header& h) {
  return static_cast<uint8_t*>(t.data_ptr()) + (t.nbytes() - h.payload_bytes);
}

// Turns the big-endian elements at payload_destination(t, h) into t's values, in place: one
// buffer holds the data, never two. Widening runs forward: element i's source bytes (at or past
// byte 3n + i for int8, 2n + 2i for int16, of n elements) are read before element i is written,
// and no later element's source lies below the bytes written so far.
void decode_in_place(Tensor& t, const Header& h) {
  const size_t n = static_cast<size_t>(t.numel());
  if (n == 0 || h.code == 0x08) return;
  uint8_t* base = static_cast<uint8_t*>(t.data_ptr());
  const uint8_t* src = payload_destination(t, h);
  for (size_t i = 0; i < n; ++i) {
    const uint8_t* e = src + i * h.file_elem_size;
    uint8_t* out = base + i * element_size(h.dtype);
    if (h.code == 0x09 || h.code == 0x0B) {
      int32_t v = h.code == 0x09 ? int32_t{static_cast<int8_t>(e[0])}
                                 : int32_t{static_cast<int16_t>((uint16_t{e[0]} << 8) | e[1])};
      std::memcpy(out, &v, 4);
    } else if (h.file_elem_size == 4) {
      uint32_t u = be32(e);
      std::memcpy(out, &u, 4);
    } else {
      uint64_t u = (uint64_t{be32(e)} << 32) | be32(e + 4);
      std::memcpy(out, &u, 8);
    }
  }
}

// n bytes at `offset` of the file into dst (from memory, or read from the file).
using ReadAt = std::function<void(size_t offset, void* dst, size_t n)>;

// A file of n bytes: its header, then the data read straight into the tensor.
Tensor parse_raw(size_t n, const ReadAt& read, const std::string& name) {
  uint8_t head[4 + 4 * kMaxDims];
  const size_t got = std::min(n, sizeof head);
  read(0, head, got);
  auto h = parse_header(head, got, name);
  KILN_CHECK(h.has_value(), kWhere, name, ": truncated header (", n, " bytes)");
  KILN_CHECK(n - h->header_bytes >= h->payload_bytes, kWhere, name, ": truncated data: dimensions ", h->dims,
             " need ", h->payload_bytes, " bytes, the file has ", n - h->header_bytes);
  KILN_CHECK(n - h->header_bytes == h->payload_bytes, kWhere, name, ": ", n - h->header_bytes - h->payload_bytes,
             " trailing bytes after the ", h->payload_bytes, " bytes that dimensions ", h->dims, " declare");
  Tensor t = empty(h->dims, h->dtype);
  if (h->payload_bytes > 0) read(h->header_bytes, payload_destination(t, *h), h->payload_bytes);
  decode_in_place(t, *h);
  return t;
}

// Decompresses straight into the tensor, once the header says how large it is and that the
// compressed size can hold that much: a small file declaring gigabytes fails before anything
// is allocated for them.
Tensor parse_gzip(const uint8_t* p, size_t n, const std::string& name) {
  Gunzip gz(p, n, name);
  uint8_t head[4 + 4 * kMaxDims];
  size_t got = gz.read(head, 4);
  std::optional<Header> h = parse_header(head, got, name);  // checks the rank before reading the dims
  if (!h && got == 4) {
    got += gz.read(head + 4, 4 * size_t{head[3]});
    h = parse_header(head, got, name);
  }
  KILN_CHECK(h.has_value(), kWhere, name, ": truncated header (", got, " bytes)");
  size_t bound = 0;
  if (__builtin_mul_overflow(n, kMaxDeflateRatio, &bound)) bound = SIZE_MAX;
  const size_t declared = h->header_bytes + h->payload_bytes;
  KILN_CHECK(declared <= bound, kWhere, name, ": dimensions ", h->dims, " declare ", declared,
             " bytes, more than ", n, " bytes of gzip can hold (deflate expands at most ", kMaxDeflateRatio,
             ":1): the file is truncated or corrupt");
  Tensor t = empty(h->dims, h->dtype);
  const size_t have = h->payload_bytes > 0 ? gz.read(payload_destination(t, *h), h->payload_bytes) : 0;
  KILN_CHECK(have == h->payload_bytes, kWhere, name, ": truncated data: dimensions ", h->dims, " need ",
             h->payload_bytes, " bytes, the file has ", have);
  uint8_t extra = 0;
  KILN_CHECK(gz.read(&extra, 1) == 0, kWhere, name, ": more data than the dimensions declare (", declared,
             " bytes expected, trailing bytes after them)");
  decode_in_place(t, *h);
  return t;
}

}  // namespace

Tensor parse_idx(const void* bytes, size_t size, const std::string& name) {
  const auto* p = static_cast<const uint8_t*>(bytes);
  if (size >= 2 && p[0] == 0x1f && p[1] == 0x8b) return parse_gzip(p, size, name);
  return parse_raw(size, [p](size_t offset, void* dst, size_t n) {
    if (n > 0) std::memcpy(dst, p + offset, n);  // an empty input has no buffer (memcpy of null)
  }, name);
}

Tensor read_idx(const std::string& path) {
  std::error_code ec;
  auto status = std::filesystem::status(path, ec);
  KILN_CHECK(std::filesystem::exists(status), kWhere, path, ": no such file");
  KILN_CHECK(std::filesystem::is_regular_file(status), kWhere, path, ": not a regular file");
  io::InputFile file(path, kWhere);
  uint8_t magic[2] = {0, 0};
  file.read(0, magic, std::min<uint64_t>(file.size(), 2));
  if (file.size() >= 2 && magic[0] == 0x1f && magic[1] == 0x8b) {  // gzip: the compressed bytes, then the tensor
    const std::string bytes = file.read_all(std::numeric_limits<uint64_t>::max());
    return parse_gzip(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), path);
  }
  // Read straight into the tensor, its only copy in memory.
  return parse_raw(file.size(), [&file](size_t offset, void* dst, size_t n) { file.read(offset, dst, n); }, path);
}

}  // namespace kiln::data
