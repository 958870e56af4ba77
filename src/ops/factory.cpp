// Factories: tensors from values, empty/zeros/ones/full, arange, linspace, eye, random tensors, *_like.
#include <cmath>
#include <cstring>

#include "core/device_runtime.h"
#include "ops/op_util.h"

namespace kiln {
namespace {

using ops::Op;

Tensor finish(Tensor t, const TensorOptions& o) {
  if (o.requires_grad()) t.requires_grad_(true);
  return t;
}

// A CPU tensor of dtype T's from host values, then converted and moved as the options say.
template <class T>
Tensor from_host(const T* values, const Shape& shape, const TensorOptions& o, ScalarType natural) {
  Tensor t = make_empty(shape, dtype_of<T>, Device::cpu());
  if (t.numel()) std::memcpy(t.data_ptr(), values, t.nbytes());
  ScalarType want = o.has_dtype() ? o.dtype() : natural;
  NoGradGuard ng;
  t = t.to(want).to(o.device());
  return finish(t, o);
}

template <class T, class List>
Tensor from_rows(List rows, const TensorOptions& o, ScalarType natural) {
  std::vector<T> flat;
  size_t cols = rows.size() ? rows.begin()->size() : 0;
  for (const auto& r : rows) {
    KILN_CHECK(r.size() == cols, "tensor", "rows have different lengths (", cols, " and ", r.size(), ")");
    flat.insert(flat.end(), r.begin(), r.end());
  }
  return from_host(flat.data(), {static_cast<int64_t>(rows.size()), static_cast<int64_t>(cols)}, o, natural);
}

}  // namespace

Tensor tensor(std::initializer_list<double> v, TensorOptions o) {
  return from_host(v.begin(), {static_cast<int64_t>(v.size())}, o, kDefaultFloat);
}
Tensor tensor(std::initializer_list<float> v, TensorOptions o) {
  return from_host(v.begin(), {static_cast<int64_t>(v.size())}, o, kDefaultFloat);
}
Tensor tensor(std::initializer_list<int> v, TensorOptions o) {
  std::vector<int64_t> w(v.begin(), v.end());
  return from_host(w.data(), {static_cast<int64_t>(w.size())}, o, kInt64);
}
Tensor tensor(std::initializer_list<int64_t> v, TensorOptions o) {
  return from_host(v.begin(), {static_cast<int64_t>(v.size())}, o, kInt64);
}
Tensor tensor(std::initializer_list<bool> v, TensorOptions o) {
  std::vector<uint8_t> w(v.begin(), v.end());
  Tensor t = make_empty({static_cast<int64_t>(w.size())}, kBool, Device::cpu());
  if (!w.empty()) std::memcpy(t.data_ptr(), w.data(), w.size());
  NoGradGuard ng;
  return finish(t.to(o.has_dtype() ? o.dtype() : kBool).to(o.device()), o);
}
Tensor tensor(std::initializer_list<std::initializer_list<double>> rows, TensorOptions o) {
  return from_rows<double>(rows, o, kDefaultFloat);
}
Tensor tensor(std::initializer_list<std::initializer_list<float>> rows, TensorOptions o) {
  return from_rows<float>(rows, o, kDefaultFloat);
}
Tensor tensor(std::initializer_list<std::initializer_list<int64_t>> rows, TensorOptions o) {
  return from_rows<int64_t>(rows, o, kInt64);
}

template <class T>
Tensor tensor(const std::vector<T>& values, const Shape& shape, TensorOptions o) {
  KILN_CHECK(shape_numel(shape, "tensor") == static_cast<int64_t>(values.size()), "tensor", "shape ", shape,
             " needs ", shape_numel(shape), " values, got ", values.size());
  if constexpr (std::is_same_v<T, bool>) {
    std::vector<uint8_t> w(values.begin(), values.end());
    Tensor t = make_empty(shape, kBool, Device::cpu());
    if (!w.empty()) std::memcpy(t.data_ptr(), w.data(), w.size());
    NoGradGuard ng;
    return finish(t.to(o.has_dtype() ? o.dtype() : kBool).to(o.device()), o);
  } else {
    ScalarType natural = std::is_floating_point_v<T> ? (std::is_same_v<T, double> ? kFloat64 : kFloat32)
                                                     : dtype_of<T>;
    return from_host(values.data(), shape, o, natural);
  }
}
template <class T>
Tensor tensor(const std::vector<T>& values, TensorOptions o) {
  return tensor(values, Shape{static_cast<int64_t>(values.size())}, o);
}
#define KILN_INSTANTIATE_TENSOR(T)                                                    \
  template Tensor tensor<T>(const std::vector<T>&, const Shape&, TensorOptions); \
  template Tensor tensor<T>(const std::vector<T>&, TensorOptions);
KILN_INSTANTIATE_TENSOR(float)
KILN_INSTANTIATE_TENSOR(double)
KILN_INSTANTIATE_TENSOR(int64_t)
KILN_INSTANTIATE_TENSOR(int32_t)
KILN_INSTANTIATE_TENSOR(uint8_t)
KILN_INSTANTIATE_TENSOR(bool)
KILN_INSTANTIATE_TENSOR(Half)
KILN_INSTANTIATE_TENSOR(BFloat16)
#undef KILN_INSTANTIATE_TENSOR

Tensor scalar_tensor(Scalar value, TensorOptions o) {
  return full({}, value, o.has_dtype() ? o : o.dtype(value.natural_dtype()));
}

Tensor empty(const Shape& shape, TensorOptions o) {
  runtime_for(o.device(), "empty");
  return finish(make_empty(shape, o.dtype(), o.device()), o);
}

Tensor empty_strided(const Shape& shape, const Shape& strides, TensorOptions o) {
  KILN_CHECK(shape.size() == strides.size(), "empty_strided", "shape ", shape, " and strides ", strides,
             " differ in rank");
  runtime_for(o.device(), "empty_strided");
  return finish(make_empty_strided(shape, strides, o.dtype(), o.device()), o);
}

Tensor full(const Shape& shape, Scalar value, TensorOptions o) {
  runtime_for(o.device(), "full");
  if (!o.has_dtype()) o = o.dtype(value.natural_dtype());
  ops::check_fill_value(value, o.dtype(), "full");
  Tensor t = make_empty(shape, o.dtype(), o.device());
  backend::ScalarAttrs attrs{value};
  ops::run1(Op::Fill, t.device(), {}, t, &attrs);
  return finish(t, o);
}

Tensor zeros(const Shape& shape, TensorOptions o) { return full(shape, 0, o.dtype(o.dtype())); }
Tensor ones(const Shape& shape, TensorOptions o) { return full(shape, 1, o.dtype(o.dtype())); }

Tensor arange(Scalar end, TensorOptions o) { return arange(0, end, 1, o); }

Tensor arange(Scalar start, Scalar end, Scalar step, TensorOptions o) {
  double s = start.to_double(), e = end.to_double(), st = step.to_double();
  KILN_CHECK(st != 0, "arange", "step must be nonzero");
  KILN_CHECK(std::isfinite(s) && std::isfinite(e), "arange", "start and end must be finite, got ", s, " and ", e);
  KILN_CHECK((st > 0 && e >= s) || (st < 0 && e <= s), "arange", "the range from ", s, " to ", e,
             " is inconsistent with step ", st);
  if (!o.has_dtype()) {
    bool any_float = start.is_floating_point() || end.is_floating_point() || step.is_floating_point();
    o = o.dtype(any_float ? kDefaultFloat : kInt64);
  }
  backend::ArangeAttrs attrs{s, st};
  int64_t n = 0;
  if (!start.is_floating_point() && !end.is_floating_point() && !step.is_floating_point() &&
      !is_floating_point(o.dtype())) {
    // Integers throughout: counted and filled in int64, exact past 2^53.
    const __int128 is = start.to_int(), ie = end.to_int(), ist = step.to_int();
    const __int128 count = (ie - is + ist - (ist > 0 ? 1 : -1)) / ist;  // ceil((e - s) / step)
    KILN_CHECK(count >= 0 && count < (static_cast<__int128>(1) << 63), "arange", "the range from ", start.to_int(),
               " to ", end.to_int(), " in steps of ", step.to_int(), " is inconsistent with its step, or too long");
    n = static_cast<int64_t>(count);
    attrs.integral = true, attrs.istart = start.to_int(), attrs.istep = step.to_int();
  } else {
    const double count = std::ceil((e - s) / st);
    KILN_CHECK(std::isfinite(count) && count < 9.2e18, "arange", "the range from ", s, " to ", e, " in steps of ",
               st, " has ", count, " elements, more than a tensor can hold");
    n = static_cast<int64_t>(count);
  }
  Tensor t = make_empty({n}, o.dtype(), o.device());
  ops::run1(Op::Arange, t.device(), {}, t, &attrs);
  return finish(t, o);
}

Tensor linspace(double start, double end, int64_t steps, TensorOptions o) {
  KILN_CHECK(steps >= 0, "linspace", "steps must be >= 0, got ", steps);
  Tensor t = make_empty({steps}, o.dtype(), o.device());
  backend::ArangeAttrs attrs{start, steps > 1 ? (end - start) / static_cast<double>(steps - 1) : 0.0};
  ops::run1(Op::Arange, t.device(), {}, t, &attrs);
  if (steps > 1) {
    NoGradGuard ng;
    t.narrow(0, steps - 1, 1).fill_(end);  // the last value exactly, as PyTorch
  }
  return finish(t, o);
}

Tensor eye(int64_t n, std::optional<int64_t> m, TensorOptions o) {
  int64_t cols = m.value_or(n);
  KILN_CHECK(n >= 0 && cols >= 0, "eye", "sizes must be >= 0, got ", n, " and ", cols);
  Tensor t = zeros({n, cols}, o.requires_grad(false));
  int64_t diag = std::min(n, cols);
  if (diag > 0) {
    NoGradGuard ng;
    make_view(t, {diag}, {cols + 1}, 0).fill_(1);
  }
  return finish(t, o);
}

Tensor rand(const Shape& shape, TensorOptions o) {
  Tensor t = make_empty(shape, o.dtype(), o.device());
  t.uniform_(0.0, 1.0);
  return finish(t, o);
}

Tensor randn(const Shape& shape, TensorOptions o) {
  Tensor t = make_empty(shape, o.dtype(), o.device());
  t.normal_(0.0, 1.0);
  return finish(t, o);
}

Tensor randint(int64_t low, int64_t high, const Shape& shape, TensorOptions o) {
  return finish(detail::random_int(shape, low, high, o.has_dtype() ? o : o.dtype(kInt64)), o);
}

namespace {
TensorOptions like(const Tensor& t, const std::optional<TensorOptions>& o) {
  ops::check_defined(t, "*_like");
  if (!o) return t.options();
  // What the options leave out is t's, as torch's *_like (ones_like(x, kBool) stays on x's device).
  TensorOptions r = *o;
  if (!r.has_dtype()) r = r.dtype(t.dtype());
  if (!r.has_device()) r = r.device(t.device());
  return r;
}
}  // namespace

// *_like keep t's layout when it is dense in another dim order (channels-last, transposed).
namespace {
Tensor empty_in_layout(const Tensor& t, const std::optional<TensorOptions>& o) {
  TensorOptions opts = like(t, o);
  runtime_for(opts.device(), "empty_like");
  return make_empty_like(t, t.shape(), opts.dtype(), opts.device());
}
Tensor finish_like(Tensor out, const std::optional<TensorOptions>& o) { return o ? finish(out, *o) : out; }
}  // namespace

Tensor empty_like(const Tensor& t, std::optional<TensorOptions> o) { return finish_like(empty_in_layout(t, o), o); }
Tensor full_like(const Tensor& t, Scalar v, std::optional<TensorOptions> o) {
  Tensor out = empty_in_layout(t, o);
  ops::check_fill_value(v, out.dtype(), "full_like");
  backend::ScalarAttrs attrs{v};
  ops::run1(Op::Fill, out.device(), {}, out, &attrs);
  return finish_like(out, o);
}
Tensor zeros_like(const Tensor& t, std::optional<TensorOptions> o) { return full_like(t, 0, o); }
Tensor ones_like(const Tensor& t, std::optional<TensorOptions> o) { return full_like(t, 1, o); }
Tensor rand_like(const Tensor& t, std::optional<TensorOptions> o) {
  Tensor out = empty_in_layout(t, o);
  out.uniform_(0.0, 1.0);
  return finish_like(out, o);
}
Tensor randn_like(const Tensor& t, std::optional<TensorOptions> o) {
  Tensor out = empty_in_layout(t, o);
  out.normal_(0.0, 1.0);
  return finish_like(out, o);
}

}  // namespace kiln

namespace kiln {
Tensor tensor(std::initializer_list<std::initializer_list<int>> rows, TensorOptions o) {
  std::vector<std::vector<int64_t>> wide;
  for (const auto& r : rows) wide.emplace_back(r.begin(), r.end());
  std::vector<int64_t> flat;
  size_t cols = wide.empty() ? 0 : wide[0].size();
  for (const auto& r : wide) {
    KILN_CHECK(r.size() == cols, "tensor", "rows have different lengths (", cols, " and ", r.size(), ")");
    flat.insert(flat.end(), r.begin(), r.end());
  }
  return tensor(flat, {static_cast<int64_t>(wide.size()), static_cast<int64_t>(cols)}, o);
}
}  // namespace kiln
