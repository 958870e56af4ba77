// Shape printing, element counts, strides, dim wrapping and broadcasting.
#include "kiln/shape.h"

#include "kiln/error.h"

namespace kiln {

std::ostream& operator<<(std::ostream& os, const Shape& s) {
  os << '[';
  for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  return os << ']';
}

int64_t shape_numel(const Shape& s, const char* where) {
  // The product of the non-zero sizes must fit too: strides are computed from it even when some
  // size is 0 ([0, 2^62, 2^62] would overflow them).
  int64_t n = 1, strided = 1;
  for (int64_t d : s) {
    KILN_CHECK(d >= 0, where, "negative size in shape ", s);
    KILN_CHECK(d == 0 || strided <= INT64_MAX / d, where, "shape ", s, " has too many elements");
    if (d != 0) strided *= d;
    n *= d;
  }
  return n;
}

Shape contiguous_strides(const Shape& s) {
  Shape st(s.size());
  int64_t acc = 1;
  for (size_t i = s.size(); i-- > 0;) {
    st[i] = acc;
    acc *= s[i] > 0 ? s[i] : 1;
  }
  return st;
}

Shape channels_last_strides(const Shape& s) {
  if (s.size() != 4) return contiguous_strides(s);
  auto nz = [](int64_t v) { return v > 0 ? v : 1; };
  const int64_t c = nz(s[1]), w = nz(s[3]), h = nz(s[2]);
  return Shape{h * w * c, 1, w * c, c};
}

int64_t wrap_dim(int64_t dim, int64_t rank, const char* where) {
  int64_t r = rank == 0 ? 1 : rank;
  KILN_CHECK(dim >= -r && dim < r, where, "dim ", dim, " is out of range for a tensor of rank ", rank,
             " (expected ", -r, " to ", r - 1, ")");
  return dim < 0 ? dim + r : dim;
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* where) {
  size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    KILN_CHECK(da == db || da == 1 || db == 1, where, "shapes ", a, " and ", b,
               " cannot be broadcast together");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

}  // namespace kiln
