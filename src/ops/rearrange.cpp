// flip, roll and repeat: copies that move elements around, written with other ops (index_select,
// cat and narrow, expand and reshape), so they run on every device and their gradients come from
// those ops'. Each returns a new tensor, as torch's do, even where nothing moves.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "ops/op_util.h"

namespace kiln {
namespace {

// dims wrapped into [0, rank) (a 0-d tensor takes 0 and -1), each at most once.
std::vector<int64_t> distinct_dims(const Tensor& x, const Shape& dims, const char* name) {
  std::vector<int64_t> out;
  for (int64_t dim : dims) {
    const int64_t d = wrap_dim(dim, std::max<int64_t>(x.dim(), 1), name);
    KILN_CHECK(std::find(out.begin(), out.end(), d) == out.end(), name, "dim ", d,
               " appears more than once in the dims ", dims);
    out.push_back(d);
  }
  return out;
}

}  // namespace

Tensor flip(const Tensor& x, const Shape& dims) {
  ops::check_defined(x, "flip");
  Tensor out = x;
  for (int64_t d : distinct_dims(x, dims, "flip")) {
    const int64_t n = x.dim() == 0 ? 1 : x.size(d);
    if (n > 1) out = index_select(out, d, arange(n - 1, -1, -1, TensorOptions(kInt64).device(x.device())));
  }
  return out.is_same(x) ? x.clone() : out;
}

Tensor roll(const Tensor& x, const Shape& shifts, const Shape& dims) {
  ops::check_defined(x, "roll");
  KILN_CHECK(!shifts.empty(), "roll", "expects at least one shift");
  if (dims.empty()) {
    KILN_CHECK(shifts.size() == 1, "roll", "without dims, expects one shift (over the flattened tensor), got ",
               shifts);
    return roll(x.flatten(), shifts, {0}).view(x.shape());
  }
  KILN_CHECK(shifts.size() == dims.size(), "roll", "expects a shift per dim, got shifts ", shifts, " and dims ", dims);
  const std::vector<int64_t> ds = distinct_dims(x, dims, "roll");
  Tensor out = x;
  for (size_t i = 0; i < ds.size(); ++i) {
    const int64_t d = ds[i], n = x.dim() == 0 ? 1 : x.size(d);
    if (n == 0) continue;
    const int64_t s = ((shifts[i] % n) + n) % n;  // element j goes to (j + s) mod n
    if (s != 0) out = cat({out.narrow(d, n - s, s), out.narrow(d, 0, n - s)}, d);
  }
  return out.is_same(x) ? x.clone() : out;
}

Tensor repeat(const Tensor& x, const Shape& repeats) {
  ops::check_defined(x, "repeat");
  const int64_t r = static_cast<int64_t>(repeats.size());
  KILN_CHECK(r >= x.dim(), "repeat", "expects at least one repeat per dim of the tensor (", x.dim(), "), got ",
             repeats);
  // x as [1, s0, 1, s1, ...] (leading dims of size 1 where repeats has more), expanded to
  // [r0, s0, r1, s1, ...] and laid out densely as [r0 s0, r1 s1, ...].
  Shape split, expanded, out_shape;
  for (int64_t i = 0; i < r; ++i) {
    const int64_t j = i - (r - x.dim());
    const int64_t s = j < 0 ? 1 : x.size(j);
    KILN_CHECK(repeats[i] >= 0, "repeat", "repeats must not be negative, got ", repeats);
    KILN_CHECK(s == 0 || repeats[i] <= INT64_MAX / s, "repeat", "repeats ", repeats, " of shape ", x.shape(),
               " overflow a dim's size");
    split.insert(split.end(), {1, s});
    expanded.insert(expanded.end(), {repeats[i], s});
    out_shape.push_back(repeats[i] * s);
  }
  shape_numel(out_shape, "repeat");  // too many elements: an error naming repeat
  Tensor out = x.reshape(split).expand(expanded).reshape(out_shape);
  return out.storage() == x.storage() ? out.clone() : out;  // every repeat 1: reshape gave a view
}

}  // namespace kiln
