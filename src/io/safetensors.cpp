// Reading safetensors files: read and check the header, then read each tensor into its own memory.
#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <vector>

#include "io/input_file.h"
#include "io/safetensors.h"
#include "kiln/error.h"

namespace kiln::io::detail {

uint32_t crc32_update(uint32_t crc, const void* data, size_t n) {
  // zlib answers 0 for a null buffer (its "initial value" call): an empty tensor has no buffer.
  if (n == 0) return crc;
  return static_cast<uint32_t>(crc32_z(crc, static_cast<const Bytef*>(data), n));
}

std::string crc32_hex(uint32_t crc) {
  char buf[9];
  std::snprintf(buf, sizeof buf, "%08x", crc);
  return buf;
}

std::map<std::string, Tensor> read_tensors(const SafetensorsHeader& h, const ReadData& read, const char* where,
                                           const std::string& origin,
                                           const std::function<void(const void*, size_t)>& seen) {
  std::vector<const TensorRecord*> order;  // by offset: the file read front to back
  for (const TensorRecord& r : h.tensors) order.push_back(&r);
  std::sort(order.begin(), order.end(), [](const TensorRecord* a, const TensorRecord* b) { return a->begin < b->begin; });
  std::map<std::string, Tensor> out;
  for (const TensorRecord* r : order) {
    const size_t nbytes = r->end - r->begin;
    Tensor t = empty(r->shape, TensorOptions(r->dtype).device(Device::cpu()));
    if (nbytes > 0) {
      read(r->begin, t.data_ptr(), nbytes);
      if (seen) seen(t.data_ptr(), nbytes);
    }
    if (r->dtype == kBool) {
      const auto* b = static_cast<const uint8_t*>(t.data_ptr());
      for (size_t i = 0; i < nbytes; ++i)
        KILN_CHECK(b[i] <= 1, where, origin, ": tensor \"", r->name, "\" of dtype BOOL holds byte ",
                   static_cast<int>(b[i]), " at element ", i, " (expected 0 or 1)");
    }
    out.emplace(r->name, std::move(t));
  }
  return out;
}

SafetensorsFile parse_safetensors(const uint8_t* data, size_t size, const char* where, const std::string& origin) {
  SafetensorsHeader h = parse_safetensors_header(data, size, where, origin);
  const uint8_t* section = data + h.data_start;
  SafetensorsFile out;
  out.tensors = read_tensors(
      h, [&](uint64_t offset, void* dst, size_t n) { std::memcpy(dst, section + offset, n); }, where, origin);
  out.metadata = std::move(h.metadata);
  return out;
}

}  // namespace kiln::io::detail

namespace kiln::io {

namespace {

// A file's header: its first bytes read (the length, then the header it gives where that is
// within the limits; the parser refuses it otherwise), then parsed against the file's size.
detail::SafetensorsHeader read_header(const InputFile& file, const char* where) {
  std::string head(static_cast<size_t>(std::min<uint64_t>(file.size(), 8)), '\0');
  file.read(0, head.data(), head.size());
  if (head.size() == 8) {
    uint64_t n = 0;
    std::memcpy(&n, head.data(), 8);
    if (n <= detail::kMaxHeaderBytes && n <= file.size() - 8) {
      head.resize(8 + n);
      file.read(8, head.data() + 8, n);
    }
  }
  return detail::parse_safetensors_header(reinterpret_cast<const uint8_t*>(head.data()), head.size(), file.size(),
                                          where, file.path());
}

detail::ReadData reader(const InputFile& file, const detail::SafetensorsHeader& h) {
  return [&file, start = h.data_start](uint64_t offset, void* dst, size_t n) { file.read(start + offset, dst, n); };
}

}  // namespace

SafetensorsFile load_safetensors_file(const std::string& path) {
  const char* where = "load_safetensors";
  InputFile file(path, where);
  detail::SafetensorsHeader h = read_header(file, where);
  SafetensorsFile out;
  out.tensors = detail::read_tensors(h, reader(file, h), where, path);
  out.metadata = std::move(h.metadata);
  return out;
}

std::map<std::string, std::string> load_safetensors_metadata(const std::string& path) {
  InputFile file(path, "load_safetensors_metadata");
  return read_header(file, "load_safetensors_metadata").metadata;
}

std::map<std::string, Tensor> load_safetensors(const std::string& path) {
  return load_safetensors_file(path).tensors;
}

SafetensorsFile load_checkpoint(const std::string& path, bool verify) {
  const char* where = "load_checkpoint";
  InputFile file(path, where);
  detail::SafetensorsHeader h = read_header(file, where);
  const auto& m = h.metadata;
  auto whole = m.find(kChecksumKey);
  auto data_only = m.find(kDataChecksumKey);  // checkpoints from before the header was covered
  if (verify && whole == m.end() && data_only == m.end()) {
    // Kiln's trainers mark their checkpoints with a "format" entry: one of them without a checksum
    // has lost it to damage (a flipped bit in the entry's name), not been written so.
    auto format = m.find("format");
    KILN_CHECK(format == m.end() || format->second.rfind("kiln-", 0) != 0, where, path,
               ": a Kiln checkpoint (format '", format->second, "') without its checksum entry \"", kChecksumKey,
               "\": damaged after it was written, or written before 2026-12-02, when checkpoints gained one "
               "(--no-verify loads it)");
  }
  // The checksums (see save_checkpoint in kiln/io.h) over the data as it is read. The header's
  // part is rebuilt from what was read, so any change to what loads (a setting, a name, a dtype,
  // a shape, an offset) changes it.
  uint32_t whole_crc = 0, data_crc = 0;
  if (verify && whole != m.end()) {
    std::map<std::string, std::string> zeroed = m;
    zeroed[kChecksumKey] = detail::kZeroChecksum;
    const std::string header = detail::header_json(zeroed, h.tensors);
    whole_crc = detail::crc32_update(0, header.data(), header.size());
  }
  std::function<void(const void*, size_t)> seen;
  if (verify && (whole != m.end() || data_only != m.end()))
    seen = [&](const void* p, size_t n) {
      if (whole != m.end()) whole_crc = detail::crc32_update(whole_crc, p, n);
      if (data_only != m.end()) data_crc = detail::crc32_update(data_crc, p, n);
    };
  SafetensorsFile f;
  f.tensors = detail::read_tensors(h, reader(file, h), where, path, seen);
  auto check = [&](const char* covers, uint32_t got, const std::string& want) {
    KILN_CHECK(detail::crc32_hex(got) == want, where, path, ": the CRC-32 of ", covers, " is ", detail::crc32_hex(got),
               " but the checkpoint says ", want,
               ": the file was changed or damaged after it was written (--no-verify loads it anyway)");
  };
  if (verify && whole != m.end()) check("its header and data", whole_crc, whole->second);
  if (verify && data_only != m.end()) check("its data", data_crc, data_only->second);
  f.metadata = std::move(h.metadata);
  return f;
}

}  // namespace kiln::io
