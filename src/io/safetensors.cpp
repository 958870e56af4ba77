// Reading safetensors files: map the file, check the header, copy each tensor out.
#include <cstring>

#include "io/mapped_file.h"
#include "io/safetensors.h"
#include "kiln/error.h"

namespace kiln::io::detail {

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

SafetensorsFile load_checkpoint(const std::string& path) {
  MappedFile file(path, "load_checkpoint");
  return detail::parse_safetensors(file.data(), file.size(), "load_checkpoint", path);
}

}  // namespace kiln::io
