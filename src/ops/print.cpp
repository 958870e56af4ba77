// Printing tensors like PyTorch: values (summarised past 1000 elements), shape, dtype, device.
#include <cmath>
#include <cstdio>
#include <sstream>

#include "kiln/autograd.h"
#include "kiln/ops.h"

namespace kiln {
namespace {

constexpr int64_t kThreshold = 1000;  // PyTorch's print threshold
constexpr int64_t kEdge = 3;          // items kept at each edge when summarising

struct Formatter {
  bool use_sci = false, all_int = true;

  std::string format(double v) const {
    char buf[64];
    if (std::isnan(v)) std::snprintf(buf, sizeof buf, "nan");
    else if (std::isinf(v)) std::snprintf(buf, sizeof buf, "%sinf", v < 0 ? "-" : "");
    else if (use_sci) std::snprintf(buf, sizeof buf, "%.4e", v);
    else if (all_int) std::snprintf(buf, sizeof buf, "%.0f.", v);
    else std::snprintf(buf, sizeof buf, "%.4f", v);
    return buf;
  }
};

// The elements printed: summarising, each dim longer than 2 * kEdge keeps its edges only, so that
// only those are read (a GPU tensor of 2^30 elements is not copied to the host to show 36).
Tensor shown(const Tensor& t, bool summarise) {
  if (!summarise) return t;
  NoGradGuard ng;
  Tensor s = t;
  for (int64_t d = 0; d < t.dim(); ++d)
    if (s.size(d) > 2 * kEdge) s = cat({s.narrow(d, 0, kEdge), s.narrow(d, s.size(d) - kEdge, kEdge)}, d);
  return s;
}

// The shown elements as text: floats as PyTorch chooses (fixed or scientific, over the shown
// values), integers exactly (past 2^53 too), bools as True/False.
std::vector<std::string> cells(const Tensor& s) {
  std::vector<std::string> out;
  out.reserve(static_cast<size_t>(s.numel()));
  char buf[32];
  if (s.dtype() == kBool) {
    for (int64_t v : s.to_vector<int64_t>()) out.push_back(v ? "True" : "False");
  } else if (!s.is_floating_point()) {
    for (int64_t v : s.to_vector<int64_t>()) {
      std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(v));
      out.push_back(buf);
    }
  } else {
    const std::vector<double> v = s.to_vector<double>();
    Formatter f;
    double max_abs = 0, min_abs = INFINITY;
    for (double x : v) {
      if (!std::isfinite(x)) continue;
      if (x != std::floor(x)) f.all_int = false;
      max_abs = std::max(max_abs, std::abs(x));
      if (x != 0) min_abs = std::min(min_abs, std::abs(x));
    }
    f.use_sci = max_abs >= 1e8 || (min_abs < 1e-4 && min_abs != INFINITY) ||
                (max_abs / std::max(min_abs, 1e-300) > 1000 && !f.all_int && min_abs != INFINITY);
    for (double x : v) out.push_back(f.format(x));
  }
  return out;
}

// `shape` is the tensor's, `inner_shape` the shown elements' (the edges when summarising).
void print_rec(std::ostream& os, const std::vector<std::string>& v, const Shape& shape, const Shape& inner_shape,
               size_t dim, int64_t offset, int width, bool summarise, int indent) {
  if (shape.empty()) {
    os << v[static_cast<size_t>(offset)];
    return;
  }
  const int64_t n = shape[dim];
  const bool cut = summarise && n > 2 * kEdge;
  int64_t inner = 1;
  for (size_t d = dim + 1; d < inner_shape.size(); ++d) inner *= inner_shape[d];
  os << '[';
  for (int64_t i = 0; i < n; ++i) {
    if (cut && i == kEdge) {
      os << (dim + 1 == shape.size() ? "..., " : "...,\n" + std::string(indent + 1, ' '));
      i = n - kEdge;
    }
    const int64_t j = cut && i >= kEdge ? i - (n - 2 * kEdge) : i;  // its place among the shown
    if (dim + 1 == shape.size()) {
      const std::string& s = v[static_cast<size_t>(offset + j)];
      os << std::string(std::max<int>(0, width - static_cast<int>(s.size())), ' ') << s;
    } else {
      print_rec(os, v, shape, inner_shape, dim + 1, offset + j * inner, width, summarise, indent + 1);
    }
    if (i + 1 < n) os << (dim + 1 == shape.size() ? ", " : ",\n" + std::string(indent + 1, ' '));
  }
  os << ']';
}

}  // namespace

std::string Tensor::to_string() const {
  if (!defined()) return "tensor(undefined)";
  const bool summarise = numel() > kThreshold;
  const Tensor s = shown(*this, summarise);
  const std::vector<std::string> v = numel() ? cells(s) : std::vector<std::string>();
  int width = 1;
  for (const std::string& c : v) width = std::max<int>(width, static_cast<int>(c.size()));
  std::ostringstream os;
  os << "tensor(";
  print_rec(os, v, shape(), s.shape(), 0, 0, width, summarise, 7);
  os << ", shape=" << shape() << ", dtype=" << dtype() << ", device=" << device();
  if (requires_grad()) os << ", requires_grad=True";
  os << ')';
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.to_string(); }

}  // namespace kiln
