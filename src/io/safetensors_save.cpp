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
  std::vector<detail::TensorRecord> records;
  records.reserve(items.size());
  uint64_t offset = 0;
  for (const Item& it : items) {
    const uint64_t end = offset + it.data.nbytes();
    records.push_back({*it.name, it.data.dtype(), it.data.shape(), offset, end});
    offset = end;
  }
  if (checksum) {
    // Over the header with this entry's value zeroed, then the data: a flipped bit in a resume
    // setting or a shape is caught as surely as one in a weight.
    metadata[kChecksumKey] = detail::kZeroChecksum;
    const std::string zeroed = detail::header_json(metadata, records);
    uint32_t crc = detail::crc32_update(0, zeroed.data(), zeroed.size());
    for (const Item& it : items) crc = detail::crc32_update(crc, it.data.data_ptr(), it.data.nbytes());
    metadata[kChecksumKey] = detail::crc32_hex(crc);
  }
  std::string header = detail::header_json(metadata, records);
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

namespace detail {

std::string header_json(const std::map<std::string, std::string>& metadata, const std::vector<TensorRecord>& tensors) {
  // As serde_json writes it: compact, metadata first, then the tensors.
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
  for (const TensorRecord& r : tensors) {
    json::append_string(header, r.name);
    header += ":{\"dtype\":\"";
    header += safetensors_dtype_name(r.dtype);
    header += "\",\"shape\":[";
    for (size_t d = 0; d < r.shape.size(); ++d) {
      if (d) header += ',';
      header += std::to_string(r.shape[d]);
    }
    header += "],\"data_offsets\":[" + std::to_string(r.begin) + "," + std::to_string(r.end) + "]},";
  }
  if (header.back() == ',') header.pop_back();
  header += '}';
  return header;
}

}  // namespace detail

void save_safetensors(const std::string& path, const std::map<std::string, Tensor>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  write_safetensors(path, tensors, metadata, "save_safetensors", false);
}

void save_checkpoint(const std::string& path, const std::map<std::string, Tensor>& tensors,
                     const std::map<std::string, std::string>& metadata) {
  for (const char* key : {kChecksumKey, kDataChecksumKey})
    KILN_CHECK(!metadata.count(key), "save_checkpoint", path, ": metadata key \"", key, "\" is the checkpoint's own");
  write_safetensors(path, tensors, metadata, "save_checkpoint", true);
}

}  // namespace kiln::io
