// Dtype sizes, names and PyTorch's promotion table.
#include "kiln/dtype.h"

namespace kiln {

size_t element_size(ScalarType t) {
  switch (t) {
    case kBool: case kUInt8: return 1;
    case kFloat16: case kBFloat16: return 2;
    case kInt32: case kFloat32: return 4;
    case kInt64: case kFloat64: return 8;
  }
  return 1;
}

const char* dtype_name(ScalarType t) {
  switch (t) {
    case kBool: return "bool";
    case kUInt8: return "uint8";
    case kInt32: return "int32";
    case kInt64: return "int64";
    case kFloat16: return "float16";
    case kBFloat16: return "bfloat16";
    case kFloat32: return "float32";
    case kFloat64: return "float64";
  }
  return "?";
}

std::ostream& operator<<(std::ostream& os, ScalarType t) { return os << dtype_name(t); }

ScalarType promote_types(ScalarType a, ScalarType b) {
  if (a == b) return a;
  // float16 with bfloat16 has no common 16-bit type: PyTorch gives float32.
  if ((a == kFloat16 && b == kBFloat16) || (a == kBFloat16 && b == kFloat16)) return kFloat32;
  // Otherwise the enum is ordered bool < uint8 < int32 < int64 < f16 < bf16 < f32 < f64.
  return static_cast<int>(a) > static_cast<int>(b) ? a : b;
}

}  // namespace kiln
