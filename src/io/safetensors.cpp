// Reading safetensors files: map the file, check the header, copy each tensor out.
#include <zlib.h>

#include <cstdio>
#include <cstring>

#include "io/mapped_file.h"
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

std::map<std::string, Tensor> copy_tensors(const SafetensorsHeader& h, const uint8_t* data) {
  std::map<std::string, Tensor> out;
  for (const TensorRecord& r : h.tensors) {
    const uint8_t* src = data + h.data_start + r.begin;
    size_t nbytes = r.end - r.begin;
    Tensor t = empty(r.shape, TensorOptions(r.dtype).device(Device::cpu()));
    if (nbytes > 0) std::memcpy(t.data_ptr(), src, nbytes);
    out.emplace(r.name, std::move(t));
  }
  return out;
}

SafetensorsFile parse_safetensors(const uint8_t* data, size_t size, const char* where, const std::string& origin) {
  SafetensorsHeader h = parse_safetensors_header(data, size, where, origin);
  SafetensorsFile out;
  out.tensors = copy_tensors(h, data);
  out.metadata = std::move(h.metadata);
  return out;
}

}  // namespace kiln::io::detail

namespace kiln::io {

SafetensorsFile load_safetensors_file(const std::string& path) {
  MappedFile file(path, "load_safetensors");
  return detail::parse_safetensors(file.data(), file.size(), "load_safetensors", path);
}

std::map<std::string, std::string> load_safetensors_metadata(const std::string& path) {
  MappedFile file(path, "load_safetensors_metadata");
  return detail::parse_safetensors_header(file.data(), file.size(), "load_safetensors_metadata", path).metadata;
}

std::map<std::string, Tensor> load_safetensors(const std::string& path) {
  return load_safetensors_file(path).tensors;
}

namespace {

// Checks a checkpoint's checksum entries against the file (see save_checkpoint in kiln/io.h).
void verify_checkpoint(const detail::SafetensorsHeader& h, const uint8_t* data, size_t size, const std::string& path) {
  const char* where = "load_checkpoint";
  const uint8_t* section = data + h.data_start;
  const size_t section_bytes = size - h.data_start;
  const auto& m = h.metadata;
  auto check = [&](const char* covers, const std::string& got, const std::string& want) {
    KILN_CHECK(got == want, where, path, ": the CRC-32 of ", covers, " is ", got, " but the checkpoint says ", want,
               ": the file was changed or damaged after it was written (--no-verify loads it anyway)");
  };
  auto whole = m.find(kChecksumKey);
  if (whole != m.end()) {
    // The header as it was checksummed: rebuilt from what was read, so any change to what loads
    // (a setting, a name, a dtype, a shape, an offset) changes it.
    std::map<std::string, std::string> zeroed = m;
    zeroed[kChecksumKey] = detail::kZeroChecksum;
    const std::string header = detail::header_json(zeroed, h.tensors);
    uint32_t crc = detail::crc32_update(0, header.data(), header.size());
    crc = detail::crc32_update(crc, section, section_bytes);
    check("its header and data", detail::crc32_hex(crc), whole->second);
  }
  auto data_only = m.find(kDataChecksumKey);  // checkpoints from before the header was covered
  if (data_only != m.end())
    check("its data", detail::crc32_hex(detail::crc32_update(0, section, section_bytes)), data_only->second);
  if (whole == m.end() && data_only == m.end()) {
    // Kiln's trainers mark their checkpoints with a "format" entry: one of them without a checksum
    // has lost it to damage (a flipped bit in the entry's name), not been written so.
    auto format = m.find("format");
    KILN_CHECK(format == m.end() || format->second.rfind("kiln-", 0) != 0, where, path,
               ": a Kiln checkpoint (format '", format->second, "') without its checksum entry \"", kChecksumKey,
               "\": damaged after it was written, or written before 2026-12-02, when checkpoints gained one "
               "(--no-verify loads it)");
  }
}

}  // namespace

SafetensorsFile load_checkpoint(const std::string& path, bool verify) {
  MappedFile file(path, "load_checkpoint");
  detail::SafetensorsHeader h = detail::parse_safetensors_header(file.data(), file.size(), "load_checkpoint", path);
  if (verify) verify_checkpoint(h, file.data(), file.size(), path);
  SafetensorsFile f;
  f.tensors = detail::copy_tensors(h, file.data());
  f.metadata = std::move(h.metadata);
  return f;
}

}  // namespace kiln::io
