// The safetensors header: parsed, and the whole layout checked against the file's size before any
// tensor byte is read (the file is untrusted). Needs no tensors, so the fuzzer links it alone.
#include "io/safetensors.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <numeric>
#include <string_view>

#include "io/json.h"
#include "kiln/error.h"

namespace kiln::io::detail {

static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian");

namespace {

struct DtypeName {
  const char* name;
  ScalarType type;
};
constexpr DtypeName kDtypes[] = {{"BOOL", kBool}, {"U8", kUInt8},     {"I32", kInt32},   {"I64", kInt64},
                                 {"F16", kFloat16}, {"BF16", kBFloat16}, {"F32", kFloat32}, {"F64", kFloat64}};
// Dtypes the format defines that kiln has no type for: named in the error as unsupported
// rather than unknown.
constexpr const char* kUnsupported[] = {"I8",      "I16",        "U16",         "U32",     "U64",     "F8_E4M3",
                                        "F8_E5M2", "F8_E4M3FNUZ", "F8_E5M2FNUZ", "F8_E8M0", "F4",      "F6_E2M3",
                                        "F6_E3M2", "C64"};

std::string supported_list() {
  std::string s;
  for (const auto& d : kDtypes) s += std::string(s.empty() ? "" : ", ") + d.name;
  return s;
}

class HeaderParser {
 public:
  HeaderParser(const uint8_t* head, size_t head_size, uint64_t size, const char* where, const std::string& origin)
      : head_(head), head_size_(head_size), size_(size), where_(where), prefix_(origin + ": ") {}

  SafetensorsHeader run() {
    KILN_CHECK(size_ >= 8, where_, prefix_, "file is ", size_, " bytes, too short for the 8-byte header length");
    uint64_t n = 0;
    KILN_CHECK(head_size_ >= 8, where_, prefix_, "the header length was not read");
    std::memcpy(&n, head_, 8);  // little-endian (checked above)
    // A length past both the limit and the file's end is a file of another kind (a text file's
    // first 8 bytes read as a number): said so, rather than a number that means nothing to its user.
    KILN_CHECK(n <= kMaxHeaderBytes || n <= size_ - 8, where_, prefix_,
               "not a safetensors file: its first 8 bytes give a header length of ", n, ", past its end (", size_,
               " bytes)");
    KILN_CHECK(n <= kMaxHeaderBytes, where_, prefix_, "header length ", n, " exceeds the limit of ",
               kMaxHeaderBytes, " bytes");
    KILN_CHECK(n <= size_ - 8, where_, prefix_, "header length ", n, " runs past the end of the file (",
               size_, " bytes)");
    KILN_CHECK(head_size_ - 8 >= n, where_, prefix_, "the header was not read");
    std::string_view text(reinterpret_cast<const char*>(head_ + 8), n);
    // The schema's bounds, so that a hostile header fails as soon as it leaves them: values at
    // most 4 levels deep (root, entry, field, shape item), arrays no longer than a shape, and
    // the tree within 24 times the text (a 100 MB header of `0,` would otherwise take ~6 GB).
    json::ParseLimits limits;
    limits.max_depth = 4;
    limits.max_array_items = static_cast<size_t>(kMaxDims);
    limits.max_tree_bytes = std::max(kMinHeaderTreeBytes, kHeaderTreeBytesPerByte * static_cast<size_t>(n));
    json::Value root = json::parse(text, where_, prefix_, limits);
    KILN_CHECK(root.kind == json::Value::Kind::Object, where_, prefix_, "header is ", root.kind_name(),
               ", expected a JSON object");
    SafetensorsHeader h;
    h.data_start = 8 + n;
    data_size_ = size_ - h.data_start;
    for (auto& [key, value] : root.members) {
      if (key == "__metadata__") {
        if (value.kind != json::Value::Kind::Null) read_metadata(value, h.metadata);  // null: none, as the reference reads it
      } else {
        h.tensors.push_back(read_tensor(key, value));
      }
    }
    check_layout(h.tensors);
    return h;
  }

 private:
  void read_metadata(const json::Value& v, std::map<std::string, std::string>& out) {
    KILN_CHECK(v.kind == json::Value::Kind::Object, where_, prefix_, "\"__metadata__\" is ", v.kind_name(),
               ", expected an object of strings");
    for (const auto& [k, val] : v.members) {
      KILN_CHECK(val.kind == json::Value::Kind::String, where_, prefix_, "\"__metadata__\" entry \"", k,
                 "\" is ", val.kind_name(), ", expected a string");
      out.emplace(k, val.text);
    }
  }

  const json::Value& field(const std::string& name, const json::Value& v, const char* key) {
    for (const auto& [k, val] : v.members)
      if (k == key) return val;
    KILN_FAIL(where_, prefix_, "tensor \"", name, "\" has no \"", key, "\"");
  }

  // A non-negative integer from the header (sizes and offsets).
  int64_t count(const std::string& name, const char* key, const json::Value& v) {
    KILN_CHECK(v.kind == json::Value::Kind::Number && v.is_integer && v.integer >= 0, where_, prefix_,
               "tensor \"", name, "\": \"", key, "\" holds ", v.describe(), ", expected a non-negative integer");
    return v.integer;
  }

  TensorRecord read_tensor(const std::string& name, const json::Value& v) {
    KILN_CHECK(v.kind == json::Value::Kind::Object, where_, prefix_, "tensor \"", name, "\" is ", v.kind_name(),
               ", expected an object with dtype, shape and data_offsets");
    TensorRecord r;
    r.name = name;

    const json::Value& dtype = field(name, v, "dtype");
    KILN_CHECK(dtype.kind == json::Value::Kind::String, where_, prefix_, "tensor \"", name, "\": \"dtype\" is ",
               dtype.kind_name(), ", expected a string");
    const DtypeName* found = nullptr;
    for (const auto& d : kDtypes)
      if (dtype.text == d.name) found = &d;
    if (!found) {
      bool known = std::any_of(std::begin(kUnsupported), std::end(kUnsupported),
                               [&](const char* u) { return dtype.text == u; });
      KILN_FAIL(where_, prefix_, "tensor \"", name, "\" has ", known ? "unsupported" : "unknown", " dtype ",
                dtype.describe(), " (kiln reads ", supported_list(), ")");
    }
    r.dtype = found->type;

    const json::Value& shape = field(name, v, "shape");
    KILN_CHECK(shape.kind == json::Value::Kind::Array, where_, prefix_, "tensor \"", name, "\": \"shape\" is ",
               shape.kind_name(), ", expected an array");
    KILN_CHECK(static_cast<int64_t>(shape.items.size()) <= kMaxDims, where_, prefix_, "tensor \"", name, "\" has ",
               shape.items.size(), " dims; Kiln's ops take at most ", kMaxDims);
    // The product of the non-zero sizes must fit, so that strides computed from it do too.
    int64_t span = 1;
    bool overflow = false;
    for (const auto& s : shape.items) {
      int64_t d = count(name, "shape", s);
      r.shape.push_back(d);
      if (d > 0) overflow = overflow || __builtin_mul_overflow(span, d, &span);
    }
    int64_t numel = std::find(r.shape.begin(), r.shape.end(), 0) != r.shape.end() ? 0 : span;
    int64_t nbytes = 0;
    overflow = overflow || __builtin_mul_overflow(numel, static_cast<int64_t>(element_size(r.dtype)), &nbytes);
    KILN_CHECK(!overflow, where_, prefix_, "tensor \"", name, "\" has shape ", r.shape,
               ", whose element count overflows");

    const json::Value& offsets = field(name, v, "data_offsets");
    KILN_CHECK(offsets.kind == json::Value::Kind::Array && offsets.items.size() == 2, where_, prefix_, "tensor \"",
               name, "\": \"data_offsets\" must be an array of two integers [begin, end]");
    r.begin = static_cast<uint64_t>(count(name, "data_offsets", offsets.items[0]));
    r.end = static_cast<uint64_t>(count(name, "data_offsets", offsets.items[1]));
    KILN_CHECK(r.begin <= r.end, where_, prefix_, "tensor \"", name, "\": data_offsets [", r.begin, ", ", r.end,
               "] end before they begin");
    KILN_CHECK(r.end <= data_size_, where_, prefix_, "tensor \"", name, "\": data_offsets [", r.begin, ", ",
               r.end, "] are out of range: the data section has ", data_size_, " bytes");
    KILN_CHECK(r.end - r.begin == static_cast<uint64_t>(nbytes), where_, prefix_, "tensor \"", name,
               "\" of dtype ", dtype.text, " and shape ", r.shape, " needs ", nbytes, " bytes but data_offsets [",
               r.begin, ", ", r.end, "] hold ", r.end - r.begin);
    return r;
  }

  // As the reference implementation requires: tensors tile the data section exactly, in
  // offset order, with no overlaps, gaps or trailing bytes.
  void check_layout(const std::vector<TensorRecord>& t) {
    std::vector<size_t> order(t.size());
    std::iota(order.begin(), order.end(), size_t{0});
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return std::pair(t[a].begin, t[a].end) < std::pair(t[b].begin, t[b].end);
    });
    uint64_t covered = 0;
    const TensorRecord* prev = nullptr;
    for (size_t i : order) {
      const TensorRecord& r = t[i];
      KILN_CHECK(r.begin >= covered, where_, prefix_, "tensors \"", prev->name, "\" (data_offsets [", prev->begin,
                 ", ", prev->end, "]) and \"", r.name, "\" (data_offsets [", r.begin, ", ", r.end, "]) overlap");
      KILN_CHECK(r.begin == covered, where_, prefix_, "gap of ", r.begin - covered, " bytes in the data before tensor \"",
                 r.name, "\" (data_offsets [", r.begin, ", ", r.end, "])");
      covered = r.end;
      if (r.end > r.begin || !prev) prev = &r;
    }
    KILN_CHECK(covered == data_size_, where_, prefix_, "the data section has ", data_size_,
               " bytes but the tensors cover only ", covered);
  }

  const uint8_t* head_;
  size_t head_size_;
  uint64_t size_;
  const char* where_;
  std::string prefix_;
  uint64_t data_size_ = 0;
};

}  // namespace

const char* safetensors_dtype_name(ScalarType t) {
  for (const auto& d : kDtypes)
    if (d.type == t) return d.name;
  return "?";
}

SafetensorsHeader parse_safetensors_header(const uint8_t* head, size_t head_size, uint64_t file_size,
                                           const char* where, const std::string& origin) {
  return HeaderParser(head, head_size, file_size, where, origin).run();
}

SafetensorsHeader parse_safetensors_header(const uint8_t* data, size_t size, const char* where,
                                           const std::string& origin) {
  return parse_safetensors_header(data, size, size, where, origin);
}

}  // namespace kiln::io::detail
