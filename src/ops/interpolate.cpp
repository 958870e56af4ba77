// interpolate (torch.nn.functional.interpolate): x [N, C, *spatial] resampled along each spatial
// dim in turn, last dim first, each a linear map: nearest and nearest-exact take one source
// element, linear two and cubic four, with weights; area is adaptive average pooling. The source
// positions and weights are torch's (aten/src/ATen/native/UpSample.h), computed on the host in the
// kernels' type (float, double for float64), and one Resample kernel per dim applies them (its
// gradient applies the transposed map: no atomics, the same bits on every run and device). 16-bit
// inputs are resampled in float32 and rounded once; integers (nearest) are copied by index_select.
#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ops/op_util.h"

namespace kiln {
namespace {

enum class Mode { Nearest, NearestExact, Linear, Cubic, Area };

// One dim's linear map as the Resample kernel reads it: output j is the sum over t in
// [offsets[j], offsets[j + 1]) of weight[t] * input[source[t]].
struct Csr {
  std::vector<int64_t> offsets, source;
  std::vector<double> weight;
};

// The ratio of input to output positions (torch's area_pixel_compute_scale): the scale factor's
// inverse where one was given, else in / out; with align_corners, (in - 1) / (out - 1).
template <class T>
T source_scale(int64_t in, int64_t out, bool align_corners, std::optional<double> scale) {
  if (align_corners) return out > 1 ? static_cast<T>(in - 1) / static_cast<T>(out - 1) : T(0);
  if (scale && *scale > 0) return static_cast<T>(1.0 / *scale);
  return static_cast<T>(in) / static_cast<T>(out);
}

// torch's get_cubic_upsample_coefficients (A = -0.75) for a source position t past its floor.
template <class T>
void cubic_weights(T t, T w[4]) {
  const T a = T(-0.75);
  auto near = [&](T x) { return ((a + 2) * x - (a + 3)) * x * x + 1; };          // |x| <= 1
  auto far = [&](T x) { return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a; };     // 1 < |x| < 2
  w[0] = far(t + 1);
  w[1] = near(t);
  w[2] = near(1 - t);
  w[3] = far(2 - t);
}

// The taps of each output position in order: one for the nearest modes (weight 1), two for linear,
// four for cubic. shortcuts: torch's 2-D nearest kernel (nearest_idx) copies where out = in and
// takes o / 2 where out = 2 in, whatever the scale factor says (its 1-D and 3-D kernels do not).
template <class T>
Csr taps_of(Mode mode, int64_t in, int64_t out, bool align_corners, std::optional<double> scale, bool shortcuts) {
  const int64_t n = mode == Mode::Cubic ? 4 : mode == Mode::Linear ? 2 : 1;
  Csr c;
  c.offsets.resize(static_cast<size_t>(out + 1));
  for (int64_t o = 0; o <= out; ++o) c.offsets[o] = o * n;
  c.source.reserve(static_cast<size_t>(out * n));
  c.weight.reserve(static_cast<size_t>(out * n));
  auto tap = [&](int64_t source, double weight) {
    c.source.push_back(source);
    c.weight.push_back(weight);
  };
  if (mode == Mode::Nearest || mode == Mode::NearestExact) {
    const float s = source_scale<float>(in, out, false, scale);
    for (int64_t o = 0; o < out; ++o) {
      // nearest: floor(o * s); exact: floor((o + 0.5) * s), the product in double as torch's.
      const float pos = mode == Mode::Nearest ? static_cast<float>(o) * s
                                              : static_cast<float>((static_cast<double>(o) + 0.5) * s);
      int64_t i = std::min(static_cast<int64_t>(std::floor(pos)), in - 1);
      if (shortcuts && mode == Mode::Nearest && out == in) i = o;
      if (shortcuts && mode == Mode::Nearest && out == 2 * in) i = o / 2;
      tap(i, 1.0);
    }
    return c;
  }
  const T s = source_scale<T>(in, out, align_corners, scale);
  for (int64_t o = 0; o < out; ++o) {
    if (mode == Mode::Linear && in == out) {  // torch copies: weights 1 and 0 on the same element
      tap(o, 1);
      tap(o, 0);
      continue;
    }
    T real = align_corners ? s * static_cast<T>(o) : s * (static_cast<T>(o) + T(0.5)) - T(0.5);
    if (mode == Mode::Linear && real < 0) real = 0;  // cubic reads before the first element, clamped
    const int64_t i0 = std::min(static_cast<int64_t>(std::floor(real)), in - 1);
    const T lambda = std::min(std::max(real - static_cast<T>(i0), T(0)), T(1));
    if (mode == Mode::Linear) {
      tap(i0, static_cast<double>(T(1) - lambda));
      tap(i0 + (i0 < in - 1 ? 1 : 0), static_cast<double>(lambda));
    } else {
      T w[4];
      cubic_weights(lambda, w);
      for (int k = 0; k < 4; ++k) tap(std::clamp<int64_t>(i0 - 1 + k, 0, in - 1), static_cast<double>(w[k]));
    }
  }
  return c;
}

// The transpose (the gradient's map): input i gathers the outputs that read it, in output order,
// as torch's backward adds them.
Csr transpose(const Csr& f, int64_t in) {
  const int64_t out = static_cast<int64_t>(f.offsets.size()) - 1;
  Csr c;
  c.offsets.assign(static_cast<size_t>(in + 1), 0);
  for (int64_t s : f.source) ++c.offsets[s + 1];
  for (int64_t i = 0; i < in; ++i) c.offsets[i + 1] += c.offsets[i];
  std::vector<int64_t> next(c.offsets.begin(), c.offsets.end() - 1);
  c.source.resize(f.source.size());
  c.weight.resize(f.source.size());
  for (int64_t j = 0; j < out; ++j)
    for (int64_t t = f.offsets[j]; t < f.offsets[j + 1]; ++t) {
      const int64_t slot = next[f.source[t]]++;
      c.source[slot] = j;
      c.weight[slot] = f.weight[t];
    }
  return c;
}

// A dim's map and its transpose, shared by the forward and backward nodes of every order.
struct Map {
  int64_t in = 0, out = 0;
  Csr forward, backward;
};

// x resampled along dim by the map (or its transpose): one Resample kernel over x viewed as
// [outer, n, inner]; a channels-last 4-D x is resampled as the [N, H, W, C] view it is, so the
// result stays channels-last. Its gradient is the other direction, itself differentiable.
Tensor resample(const Tensor& x, int64_t dim, const std::shared_ptr<const Map>& map, bool transposed) {
  if (x.dim() == 4 && dim >= 2 && !x.is_contiguous() && x.is_contiguous(MemoryFormat::ChannelsLast))
    return resample(x.permute({0, 2, 3, 1}), dim - 1, map, transposed).permute({0, 3, 1, 2});
  const Csr& c = transposed ? map->backward : map->forward;
  const int64_t n = transposed ? map->out : map->in, m = transposed ? map->in : map->out;
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= x.size(d);
  for (int64_t d = dim + 1; d < x.dim(); ++d) inner *= x.size(d);
  Shape shape = x.shape();
  shape[dim] = m;
  Tensor out = make_empty(shape, x.dtype(), x.device());
  if (out.numel() > 0) {
    const TensorOptions at = TensorOptions(kInt64).device(x.device());
    const Tensor offsets = tensor(c.offsets, at), source = tensor(c.source, at),
                 weight = tensor(c.weight, TensorOptions(x.dtype()).device(x.device()));
    Tensor rows = out.view({outer, m, inner});
    ops::run1(ops::Op::Resample, x.device(), {x.detach().contiguous().view({outer, n, inner}), offsets, source, weight},
              rows);
  }
  if (autograd::needs_grad({&x}))
    autograd::record("ResampleBackward", {&x}, out,
                     [map, dim, transposed](const Tensor& g) -> TensorList { return {resample(g, dim, map, !transposed)}; });
  return out;
}

Mode parse_mode(std::string_view mode, int64_t spatial) {
  const char* op = "interpolate";
  if (mode == "nearest") return Mode::Nearest;
  if (mode == "nearest-exact") return Mode::NearestExact;
  if (mode == "area") return Mode::Area;
  const struct {
    std::string_view name;
    int64_t dims;
    Mode mode;
  } interpolating[] = {{"linear", 1, Mode::Linear}, {"bilinear", 2, Mode::Linear},
                       {"trilinear", 3, Mode::Linear}, {"bicubic", 2, Mode::Cubic}};
  for (const auto& m : interpolating)
    if (m.name == mode) {
      KILN_CHECK(spatial == m.dims, op, "got ", spatial + 2, "-D input, but ", mode, " mode needs ", m.dims + 2,
                 "-D input");
      return m.mode;
    }
  KILN_FAIL(op, "unknown mode '", mode,
            "': expected nearest, nearest-exact, linear, bilinear, bicubic, trilinear or area");
}

}  // namespace

Tensor interpolate(const Tensor& x, const Shape& size, const std::vector<double>& scale_factor, std::string_view mode_name,
                   std::optional<bool> align_corners, std::optional<bool> recompute_scale_factor) {
  const char* op = "interpolate";
  ops::check_defined(x, op);
  KILN_CHECK(x.dim() >= 3 && x.dim() <= 5, op, "expected a 3-D, 4-D or 5-D input [N, C, *spatial], got shape ",
             x.shape());
  const int64_t spatial = x.dim() - 2;
  const Mode mode = parse_mode(mode_name, spatial);
  KILN_CHECK(is_floating_point(x.dtype()) || (mode == Mode::Nearest || mode == Mode::NearestExact), op, mode_name,
             " mode needs a floating-point input, got ", x.dtype());
  KILN_CHECK(!align_corners || mode == Mode::Linear || mode == Mode::Cubic, op,
             "align_corners can only be set with the interpolating modes linear, bilinear, bicubic and trilinear");
  KILN_CHECK(size.empty() != scale_factor.empty(), op,
             size.empty() ? "either size or scale_factor must be given" : "only one of size and scale_factor may be given");
  KILN_CHECK(!(recompute_scale_factor.value_or(false) && !size.empty()), op,
             "recompute_scale_factor is not meaningful with an explicit size");
  const auto count = size.empty() ? scale_factor.size() : size.size();
  KILN_CHECK(count == 1 || static_cast<int64_t>(count) == spatial, op, "input ", x.shape(), " has ", spatial,
             " spatial dims but ", size.empty() ? "scale_factor" : "size", " has ", count, " values");
  Shape out(static_cast<size_t>(spatial));
  std::vector<std::optional<double>> scales(static_cast<size_t>(spatial));
  for (int64_t i = 0; i < spatial; ++i) {
    const int64_t in = x.size(2 + i);
    if (!size.empty()) {
      out[i] = size[size.size() == 1 ? 0 : i];
    } else {
      const double f = scale_factor[scale_factor.size() == 1 ? 0 : i];
      KILN_CHECK(std::isfinite(f) && f > 0, op, "scale_factor must be positive and finite, got ", f);
      const double o = std::floor(static_cast<double>(in) * f);
      KILN_CHECK(o < 9.2e18, op, "scale_factor ", f, " makes dim ", 2 + i, " of ", x.shape(), " too large");
      out[i] = static_cast<int64_t>(o);
      if (!recompute_scale_factor.value_or(false)) scales[i] = f;  // the kernels use 1 / f as torch's
    }
  }
  for (int64_t i = 0; i < spatial; ++i)
    KILN_CHECK(x.size(2 + i) > 0 && out[i] > 0, op, "input and output sizes must be greater than 0, got input ",
               x.shape(), " and output size ", out);
  if (mode == Mode::Area) {  // adaptive average pooling: 1-D through 2-D; no 3-D pool yet
    KILN_CHECK(spatial <= 2, op, "area mode takes 3-D and 4-D inputs, got shape ", x.shape());
    if (spatial == 1) return adaptive_avg_pool2d(x.unsqueeze(2), {1, out[0]}).squeeze(2);
    return adaptive_avg_pool2d(x, out);
  }
  // 16-bit inputs in float32, rounded once at the end (torch's opmath).
  const bool nearest = mode == Mode::Nearest || mode == Mode::NearestExact;
  const bool widen = (x.dtype() == kFloat16 || x.dtype() == kBFloat16) && !nearest;
  Tensor y = widen ? x.to(kFloat32) : x;
  for (int64_t i = spatial - 1; i >= 0; --i) {
    const int64_t in = x.size(2 + i);
    const bool corners = align_corners.value_or(false);
    Csr t = y.dtype() == kFloat64 ? taps_of<double>(mode, in, out[i], corners, scales[i], spatial == 2)
                                  : taps_of<float>(mode, in, out[i], corners, scales[i], spatial == 2);
    if (y.dtype() != kFloat32 && y.dtype() != kFloat64) {  // nearest of 16-bit floats, integers, bools: a copy
      y = index_select(y, 2 + i, tensor(t.source, Shape{out[i]}, TensorOptions(kInt64).device(y.device())));
      continue;
    }
    auto map = std::make_shared<Map>();
    map->in = in;
    map->out = out[i];
    map->forward = std::move(t);
    if (autograd::needs_grad({&y})) map->backward = transpose(map->forward, in);
    y = resample(y, 2 + i, map, false);
  }
  return widen ? y.to(x.dtype()) : y;
}

}  // namespace kiln
