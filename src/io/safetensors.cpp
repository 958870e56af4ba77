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

SafetensorsFile parse_safetensors(const uint8_t* data, size_t size, const char* where, const std::string& origin) {
  SafetensorsHeader h = parse_safetensors_header(data, size, where, origin);
  SafetensorsFile out;
  out.metadata = std::move(h.metadata);
  for (const TensorRecord& r : h.tensors) {
    const uint8_t* src = data + h.data_start + r.begin;
    size_t nbytes = r.end - r.begin;
    Tensor t = empty(r.shape, TensorOptions(r.dtype).device(Device::cpu()));
    if (nbytes > 0) std::memcpy(t.data_ptr(), src, nbytes);
    out.tensors.emplace(r.name, std::move(t));
  }
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

SafetensorsFile load_checkpoint(const std::string& path, bool verify) {
  MappedFile file(path, "load_checkpoint");
  SafetensorsFile f = detail::parse_safetensors(file.data(), file.size(), "load_checkpoint", path);
  auto it = f.metadata.find(kChecksumKey);
  if (verify && it != f.metadata.end()) {
    uint64_t header = 0;
    std::memcpy(&header, file.data(), 8);  // parse_safetensors checked it fits
    const size_t start = 8 + static_cast<size_t>(header);
    const std::string got = detail::crc32_hex(detail::crc32_update(0, file.data() + start, file.size() - start));
    KILN_CHECK(got == it->second, "load_checkpoint", path, ": the data's CRC-32 is ", got, " but the checkpoint says ",
               it->second, ": the file was changed or damaged after it was written (--no-verify loads it anyway)");
  }
  return f;
}

}  // namespace kiln::io
