// Printing tensors like PyTorch: values (summarised past 1000 elements), shape, dtype, device.
#include <cmath>
#include <cstdio>
#include <sstream>

#include "kiln/ops.h"

namespace kiln {
namespace {

constexpr int64_t kThreshold = 1000;  // PyTorch's print threshold
constexpr int64_t kEdge = 3;          // items kept at each edge when summarising

struct Formatter {
  bool is_float = false, is_bool = false, use_sci = false, all_int = true;
  int width = 1;

  std::string format(double v) const {
    char buf[64];
    if (is_bool) return v != 0 ? "True" : "False";
    if (!is_float) std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(v));
    else if (std::isnan(v)) std::snprintf(buf, sizeof buf, "nan");
    else if (std::isinf(v)) std::snprintf(buf, sizeof buf, "%sinf", v < 0 ? "-" : "");
    else if (use_sci) std::snprintf(buf, sizeof buf, "%.4e", v);
    else if (all_int) std::snprintf(buf, sizeof buf, "%.0f.", v);
    else std::snprintf(buf, sizeof buf, "%.4f", v);
    return buf;
  }
};

void print_rec(std::ostream& os, const std::vector<double>& v, const Shape& shape, size_t dim, int64_t offset,
               const Formatter& f, bool summarise, int indent) {
  if (shape.empty()) {
    os << f.format(v[offset]);
    return;
  }
  const int64_t n = shape[dim];
  int64_t inner = 1;
  for (size_t d = dim + 1; d < shape.size(); ++d) inner *= shape[d];
  os << '[';
  for (int64_t i = 0; i < n; ++i) {
    if (summarise && n > 2 * kEdge && i == kEdge) {
      os << (dim + 1 == shape.size() ? "..., " : "...,\n" + std::string(indent + 1, ' '));
      i = n - kEdge;
    }
    if (dim + 1 == shape.size()) {
      std::string s = f.format(v[offset + i]);
      os << std::string(std::max<int>(0, f.width - static_cast<int>(s.size())), ' ') << s;
    } else {
      print_rec(os, v, shape, dim + 1, offset + i * inner, f, summarise, indent + 1);
    }
    if (i + 1 < n) os << (dim + 1 == shape.size() ? ", " : ",\n" + std::string(indent + 1, ' '));
  }
  os << ']';
}

}  // namespace

std::string Tensor::to_string() const {
  if (!defined()) return "tensor(undefined)";
  std::vector<double> v = numel() ? to_vector<double>() : std::vector<double>();
  Formatter f;
  f.is_float = is_floating_point();
  f.is_bool = dtype() == kBool;
  double max_abs = 0, min_abs = INFINITY;
  for (double x : v) {
    if (!std::isfinite(x)) continue;
    if (x != std::floor(x)) f.all_int = false;
    max_abs = std::max(max_abs, std::abs(x));
    if (x != 0) min_abs = std::min(min_abs, std::abs(x));
  }
  f.use_sci = f.is_float && (max_abs >= 1e8 || (min_abs < 1e-4 && min_abs != INFINITY) ||
                             (max_abs / std::max(min_abs, 1e-300) > 1000 && !f.all_int && min_abs != INFINITY));
  for (double x : v) f.width = std::max<int>(f.width, static_cast<int>(f.format(x).size()));
  std::ostringstream os;
  os << "tensor(";
  print_rec(os, v, shape(), 0, 0, f, numel() > kThreshold, 7);
  os << ", shape=" << shape() << ", dtype=" << dtype() << ", device=" << device();
  if (requires_grad()) os << ", requires_grad=True";
  os << ')';
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.to_string(); }

}  // namespace kiln
