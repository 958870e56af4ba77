// Writing safetensors, byte for byte as the Python library writes it, through an AtomicFile.
#include <algorithm>
#include <bit>
#include <cstring>

#include "io/json.h"
#include "io/safetensors.h"
#include "kiln/autograd.h"
#include "kiln/error.h"

namespace kiln::io {

namespace {

// The position of each dtype in the reference implementation's Dtype enum: it lays the data
// out by this, descending (so larger, more aligned types come first), then by name.
int reference_rank(ScalarType t) {
  switch (t) {
    case kBool: return 0;
    case kUInt8: return 1;
    case kFloat16: return 2;
    case kBFloat16: return 3;
    case kInt32: return 4;
    case kFloat32: return 5;
    case kFloat64: return 6;
    case kInt64: return 7;
  }
  return -1;
}

struct Item {
  const std::string* name;
  Tensor data;  // contiguous, on the CPU
};

void write_safetensors(const std::string& path, const std::map<std::string, Tensor>& tensors,
                       std::map<std::string, std::string> metadata, const char* where, bool checksum) {
  static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian");
  // Names and metadata go into JSON strings, which readers require to be valid UTF-8.
  for (const auto& [k, v] : metadata)
    KILN_CHECK(json::is_valid_utf8(k) && json::is_valid_utf8(v), where, path, ": metadata entry \"", k,
               "\" is not valid UTF-8");
  std::vector<Item> items;
  items.reserve(tensors.size());
  for (const auto& [name, t] : tensors) {
    KILN_CHECK(name != "__metadata__", where, path, ": \"__metadata__\" is reserved and cannot name a tensor");
    KILN_CHECK(json::is_valid_utf8(name), where, path, ": tensor name \"", name, "\" is not valid UTF-8");
    KILN_CHECK(t.defined(), where, path, ": tensor \"", name, "\" is undefined");
    NoGradGuard no_grad;
    Tensor c = t.detach();
    if (c.device() != Device::cpu()) c = c.to(Device::cpu());
    items.push_back({&name, c.contiguous()});
  }
  std::sort(items.begin(), items.end(), [](const Item& a, const Item& b) {
    int ra = reference_rank(a.data.dtype()), rb = reference_rank(b.data.dtype());
    return ra != rb ? ra > rb : *a.name < *b.name;
  });
  if (checksum) {  // over the data section, which is the items' bytes in this order
    uint32_t crc = 0;
    for (const Item& it : items) crc = detail::crc32_update(crc, it.data.data_ptr(), it.data.nbytes());
    metadata[kChecksumKey] = detail::crc32_hex(crc);
  }

  // The header as serde_json writes it: compact, metadata first, then tensors in data order.
  std::string header = "{";
  if (!metadata.empty()) {
    header += "\"__metadata__\":{";
    bool first = true;
    for (const auto& [k, v] : metadata) {
      if (!first) header += ',';
      first = false;
      json::append_string(header, k);
      header += ':';
      json::append_string(header, v);
    }
    header += "},";
  }
  uint64_t offset = 0;
  for (const Item& it : items) {
    json::append_string(header, *it.name);
    header += ":{\"dtype\":\"";
    header += detail::safetensors_dtype_name(it.data.dtype());
    header += "\",\"shape\":[";
    for (size_t d = 0; d < it.data.shape().size(); ++d) {
      if (d) header += ',';
      header += std::to_string(it.data.shape()[d]);
    }
    uint64_t end = offset + it.data.nbytes();
    header += "],\"data_offsets\":[" + std::to_string(offset) + "," + std::to_string(end) + "]},";
    offset = end;
  }
  if (header.back() == ',') header.pop_back();
  header += '}';
  // Spaces pad the header so the data section starts 8-byte aligned (the reference's rule).
  header.append((8 - header.size() % 8) % 8, ' ');
  KILN_CHECK(header.size() <= detail::kMaxHeaderBytes, where, path, ": the header would be ", header.size(),
             " bytes, over the format's limit of ", detail::kMaxHeaderBytes);

  write_file_atomically(
      path,
      [&](AtomicFile& f) {
        uint64_t n = header.size();
        f.write(&n, 8);
        f.write(header.data(), header.size());
        for (const Item& it : items)
          if (it.data.nbytes() > 0) f.write(it.data.data_ptr(), it.data.nbytes());
      },
      where);
}

}  // namespace

void save_safetensors(const std::string& path, const std::map<std::string, Tensor>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  write_safetensors(path, tensors, metadata, "save_safetensors", false);
}

void save_checkpoint(const std::string& path, const std::map<std::string, Tensor>& tensors,
                     const std::map<std::string, std::string>& metadata) {
  KILN_CHECK(!metadata.count(kChecksumKey), "save_checkpoint", path, ": metadata key \"", kChecksumKey,
             "\" is the checkpoint's own");
  write_safetensors(path, tensors, metadata, "save_checkpoint", true);
}

}  // namespace kiln::io
