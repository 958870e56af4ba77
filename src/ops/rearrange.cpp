// flip, roll, repeat and pad: copies that move elements around, written with other ops
// (index_select, cat and narrow, expand and reshape), so they run on every device and their
// gradients come from those ops'. Each returns a new tensor, as torch's do, even where nothing moves.
#include <algorithm>
#include <cstdint>
#include <string_view>
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

Tensor repeat_interleave(const Tensor& counts_in) {
  ops::check_defined(counts_in, "repeat_interleave");
  KILN_CHECK(counts_in.dim() == 1 && !counts_in.is_floating_point() && counts_in.dtype() != kBool, "repeat_interleave",
             "expects a 1-D integer tensor of repeats, got ", counts_in.dim(), "-D ", counts_in.dtype());
  const Tensor counts = counts_in.to(kInt64);
  const int64_t n = counts.size(0);
  const TensorOptions index = TensorOptions(kInt64).device(counts.device());
  if (n == 0) return empty({0}, index);
  KILN_CHECK(amin(counts).item<int64_t>() >= 0, "repeat_interleave", "repeats must not be negative");
  const Tensor ends = cumsum(counts, 0);
  const int64_t total = ends[n - 1].item<int64_t>();
  // A 1 where each position's run starts (after the first), summed: the position of each output.
  // Runs of length 0 share a start (the slot past the end for those at the end).
  const Tensor starts = zeros({total + 1}, index).scatter_add(0, ends.slice(0, 0, n - 1), ones({n - 1}, index));
  return cumsum(starts.slice(0, 0, total), 0);
}

Tensor repeat_interleave(const Tensor& x_in, const Tensor& repeats, std::optional<int64_t> dim) {
  ops::check_defined(x_in, "repeat_interleave");
  ops::check_defined(repeats, "repeat_interleave");
  const Tensor x = dim ? x_in : x_in.flatten();
  const int64_t d = dim ? wrap_dim(*dim, std::max<int64_t>(x.dim(), 1), "repeat_interleave") : 0;
  const int64_t n = x.dim() == 0 ? 1 : x.size(d);
  KILN_CHECK(repeats.dim() <= 1 && (repeats.numel() == 1 || repeats.numel() == n), "repeat_interleave",
             "expects one repeat or one per element along the dim (", n, "), got repeats of shape ", repeats.shape());
  const Tensor counts = repeats.numel() == 1 ? repeats.reshape({1}).expand({n}) : repeats;
  const Tensor idx = repeat_interleave(counts.to(x.device()));
  return index_select(x.dim() == 0 ? x.reshape({1}) : x, d, idx);
}

Tensor repeat_interleave(const Tensor& x_in, int64_t repeats, std::optional<int64_t> dim) {
  ops::check_defined(x_in, "repeat_interleave");
  KILN_CHECK(repeats >= 0, "repeat_interleave", "repeats must not be negative, got ", repeats);
  const Tensor x = dim ? x_in : x_in.flatten();
  const int64_t d = dim ? wrap_dim(*dim, std::max<int64_t>(x.dim(), 1), "repeat_interleave") : 0;
  const Tensor xs = x.dim() == 0 ? x.reshape({1}) : x;
  Shape expanded = xs.shape();
  expanded.insert(expanded.begin() + d + 1, repeats);
  Shape out = xs.shape();
  out[static_cast<size_t>(d)] *= repeats;
  const Tensor r = xs.unsqueeze(d + 1).expand(expanded).reshape(out);
  return r.storage() == x_in.storage() ? r.clone() : r;  // repeats 1: reshape gave a view
}

namespace {

// The positions of dim d's elements after padding it by l before and r after (l, r >= 0) in a
// mode that copies elements: reflect, replicate or circular.
std::vector<int64_t> padded_positions(int64_t n, int64_t l, int64_t r, std::string_view mode, int64_t d) {
  const bool reflect = mode == "reflect", circular = mode == "circular";
  const int64_t most = reflect ? n - 1 : circular ? n : (n > 0 ? INT64_MAX : 0);
  KILN_CHECK(l <= most && r <= most, "pad", mode, " padding of (", l, ", ", r, ") along dim ", d, " of size ", n,
             reflect ? ": each amount must be below the size" : circular ? ": each amount must be at most the size"
                                                               : ": the dim is empty");
  std::vector<int64_t> pos;
  pos.reserve(static_cast<size_t>(l + n + r));
  for (int64_t i = l; i > 0; --i) pos.push_back(reflect ? i : circular ? n - i : 0);
  for (int64_t i = 0; i < n; ++i) pos.push_back(i);
  for (int64_t i = 1; i <= r; ++i) pos.push_back(reflect ? n - 1 - i : circular ? i - 1 : n - 1);
  return pos;
}

}  // namespace

Tensor pad(const Tensor& x, const Shape& pad, std::string_view mode, double value) {
  ops::check_defined(x, "pad");
  KILN_CHECK(mode == "constant" || mode == "reflect" || mode == "replicate" || mode == "circular", "pad",
             "mode must be \"constant\", \"reflect\", \"replicate\" or \"circular\", got \"", mode, "\"");
  KILN_CHECK(pad.size() % 2 == 0 && static_cast<int64_t>(pad.size()) / 2 <= x.dim(), "pad", "expects (before, after) "
             "pairs for at most the tensor's ", x.dim(), " dims, got ", pad);
  KILN_CHECK(mode == "constant" || value == 0, "pad", "a value is for constant padding, not ", mode);
  Tensor out = x;
  for (size_t i = 0; i < pad.size() / 2; ++i) {
    const int64_t d = x.dim() - 1 - static_cast<int64_t>(i);
    const int64_t l = pad[2 * i], r = pad[2 * i + 1], n = out.size(d);
    KILN_CHECK(n + l + r >= 0, "pad", "cropping (", l, ", ", r,
               ") along dim ", d, " of size ", n, " leaves less than nothing");
    // The padding first, from the dim as it is (torch's order: reflect (-2, 3) of 4 elements pads
    // by 3 from all 4), then the cropping.
    const int64_t pl = std::max<int64_t>(l, 0), pr = std::max<int64_t>(r, 0);
    if (pl > 0 || pr > 0) {
      if (mode == "constant") {
        Shape before = out.shape(), after = out.shape();
        before[static_cast<size_t>(d)] = pl;
        after[static_cast<size_t>(d)] = pr;
        const TensorOptions like = TensorOptions(out.dtype()).device(out.device());
        out = cat({full(before, value, like), out, full(after, value, like)}, d);
      } else {
        const std::vector<int64_t> pos = padded_positions(n, pl, pr, mode, d);
        out = index_select(out, d, tensor(pos, TensorOptions(kInt64)).to(out.device()));
      }
    }
    if (l < 0 || r < 0) {
      const int64_t from = std::max<int64_t>(-l, 0);
      out = out.narrow(d, from, out.size(d) - from - std::max<int64_t>(-r, 0));
    }
  }
  return out.is_same(x) ? x.clone() : out;
}

}  // namespace kiln
