// Copies and conversions: contiguous, clone, to(dtype/device), copy_, fill_, zero_, the random
// fills, item and to_vector.
#include "core/device_runtime.h"
#include "kiln/random.h"
#include "ops/op_util.h"

namespace kiln {
namespace {

using ops::Op;

// Whether writing dst could change src before it is read (shared storage, overlapping range).
bool may_overlap(const Tensor& dst, const Tensor& src) {
  if (dst.storage() != src.storage() || dst.numel() == 0 || src.numel() == 0) return false;
  auto [dlo, dhi] = element_span(dst);
  auto [slo, shi] = element_span(src);
  dlo += dst.storage_offset();
  dhi += dst.storage_offset();
  slo += src.storage_offset();
  shi += src.storage_offset();
  if (dlo >= shi || slo >= dhi) return false;
  // The same elements in the same order are safe to copy onto themselves.
  return !(dst.storage_offset() == src.storage_offset() && dst.strides() == src.strides() &&
           dst.shape() == src.shape());
}

// A copy of t on another device (no autograd). A dense tensor (row-major, channels-last, any
// dense order of dims) goes over byte for byte and keeps its layout, as PyTorch's to(device)
// does; a strided view is made row-major where it is first (a device's own copy kernel: no trip
// through the host).
Tensor transfer(const Tensor& t, Device device, bool non_blocking = false) {
  Tensor src = t;
  if (!is_non_overlapping_and_dense(src)) {
    Tensor c = make_empty(src.shape(), src.dtype(), src.device());
    ops::run1(Op::Copy, src.device(), {src}, c);
    src = c;
  }
  Tensor out = make_empty_like(src, t.shape(), t.dtype(), device);
  copy_bytes(out.data_ptr(), device, src.data_ptr(), src.device(), out.nbytes(), non_blocking);
  return out;
}

// A copy of t in dtype, laid out like t (dense layouts kept) or row-major.
Tensor convert(const Tensor& t, ScalarType dtype, bool keep_layout = true) {
  Tensor out = keep_layout ? make_empty_like(t, t.shape(), dtype, t.device()) : make_empty(t.shape(), dtype, t.device());
  ops::run1(Op::Copy, t.device(), {t}, out);
  return out;
}

void record_identity(const char* name, const Tensor& x, const Tensor& out) {
  if (!autograd::needs_grad({&x})) return;
  autograd::record(name, {&x}, out, [mx = autograd::InputMeta(x)](const Tensor& g) -> TensorList { return {mx(g)}; });
}

// Fills `self` with random numbers from `op`, using counters reserved from the global generator.
Tensor& random_fill(Tensor& self, Op op, const backend::RandomAttrs& how, const char* name, uint64_t words_per_element) {
  ops::check_defined(self, name);
  // New values replace self's history (their gradient is zero), as with fill_.
  const bool rec = autograd::needs_grad({&self});
  autograd::check_inplace(self, name);
  Tensor target = self.is_contiguous() ? self : make_empty(self.shape(), self.dtype(), self.device());
  uint64_t words = static_cast<uint64_t>(self.numel()) * words_per_element;
  GeneratorState st = detail::reserve_counters((words + 3) / 4);
  backend::RandomAttrs attrs = how;
  attrs.seed = st.seed;
  attrs.offset = st.offset;
  ops::run1(op, self.device(), {}, target, &attrs);
  if (!target.is_same(self)) {
    NoGradGuard ng;
    self.copy_(target);
  } else {
    ops::bump_version(self);
  }
  if (rec) {
    Tensor before = self;
    autograd::record_inplace(op == Op::Normal ? "NormalBackward" : "UniformBackward", self, {&before},
                     [](const Tensor&) -> TensorList { return {Tensor()}; });
  }
  return self;
}

}  // namespace

Tensor Tensor::contiguous() const {
  ops::check_defined(*this, "contiguous");
  if (is_contiguous()) return *this;
  Tensor out = convert(*this, dtype(), /*keep_layout=*/false);
  record_identity("CloneBackward", *this, out);
  return out;
}

Tensor Tensor::contiguous(MemoryFormat format) const {
  ops::check_defined(*this, "contiguous");
  if (format == MemoryFormat::Contiguous || dim() != 4) return contiguous();
  if (is_contiguous(format)) return *this;
  Tensor out = make_empty_strided(shape(), channels_last_strides(shape()), dtype(), device());
  ops::run1(Op::Copy, device(), {*this}, out);
  record_identity("CloneBackward", *this, out);
  return out;
}

Tensor Tensor::clone() const {
  ops::check_defined(*this, "clone");
  Tensor out = convert(*this, dtype());
  record_identity("CloneBackward", *this, out);
  return out;
}

Tensor Tensor::to(ScalarType t) const {
  ops::check_defined(*this, "to");
  if (t == dtype()) return *this;
  Tensor out = convert(*this, t);
  if (kiln::is_floating_point(t)) record_identity("ToCopyBackward", *this, out);
  return out;
}

Tensor Tensor::to(Device device_or_current, bool non_blocking) const {
  ops::check_defined(*this, "to");
  const Device d = device_or_current.resolved();
  if (d == device()) return *this;
  runtime_for(d, "to");
  Tensor out = transfer(*this, d, non_blocking);
  record_identity("ToCopyBackward", *this, out);
  return out;
}

Tensor Tensor::to(Device d, ScalarType t, bool non_blocking) const { return to(t).to(d, non_blocking); }

Tensor Tensor::pin_memory() const {
  ops::check_defined(*this, "pin_memory");
  KILN_CHECK(device().is_cpu(), "pin_memory", "only CPU tensors can be pinned, got one on ", device().str());
  if (is_pinned()) return *this;
  Tensor out = make_empty_pinned(shape(), dtype());
  ops::run1(Op::Copy, Device::cpu(), {*this}, out);
  record_identity("PinMemoryBackward", *this, out);
  return out;
}

bool Tensor::is_pinned() const { return defined() && impl()->storage && impl()->storage->pinned; }

Tensor& Tensor::copy_(const Tensor& src) {
  ops::check_defined(*this, "copy_");
  ops::check_defined(src, "copy_");
  Shape shape = broadcast_shapes(this->shape(), src.shape(), "copy_");
  KILN_CHECK(shape == this->shape(), "copy_", "a source of shape ", src.shape(),
             " does not broadcast to the destination's shape ", this->shape());
  // Gradients flow into floating-point tensors only: an integer copy of a float is a constant.
  const bool rec = is_floating_point() && autograd::needs_grad({this, &src});
  autograd::check_inplace(*this, "copy_");
  Tensor s = src;
  if (s.device() != device()) {
    NoGradGuard ng;
    s = transfer(s, device());
  } else if (may_overlap(*this, s)) {
    s = convert(s, s.dtype());
  }
  Tensor before = *this;
  ops::run1(Op::Copy, device(), {s}, *this);
  ops::bump_version(*this);
  if (rec) {
    autograd::record_inplace("CopyBackward", *this, {&before, &src},
                     [ms = autograd::InputMeta(src)](const Tensor& g) -> TensorList { return {Tensor(), ms(g)}; });
  }
  return *this;
}

Tensor& Tensor::fill_(Scalar value) {
  ops::check_defined(*this, "fill_");
  ops::check_fill_value(value, dtype(), "fill_");
  const bool rec = autograd::needs_grad({this});
  autograd::check_inplace(*this, "fill_");
  backend::ScalarAttrs attrs{value};
  ops::run1(Op::Fill, device(), {}, *this, &attrs);
  ops::bump_version(*this);
  if (rec) {
    Tensor before = *this;
    autograd::record_inplace("FillBackward", *this, {&before}, [](const Tensor&) -> TensorList { return {Tensor()}; });
  }
  return *this;
}

Tensor& Tensor::zero_() { return fill_(0); }

Tensor& Tensor::uniform_(double from, double to) {
  KILN_CHECK(is_floating_point(), "uniform_", "needs a floating-point tensor, got ", dtype());
  KILN_CHECK(from <= to, "uniform_", "from (", from, ") must not exceed to (", to, ")");
  return random_fill(*this, Op::Uniform, {.a = from, .b = to}, "uniform_", 1);
}

Tensor& Tensor::normal_(double mean, double std) {
  KILN_CHECK(is_floating_point(), "normal_", "needs a floating-point tensor, got ", dtype());
  KILN_CHECK(std >= 0, "normal_", "std must be >= 0, got ", std);
  return random_fill(*this, Op::Normal, {.a = mean, .b = std}, "normal_", 1);
}

namespace detail {
Tensor random_int(const Shape& shape, int64_t low, int64_t high, TensorOptions o) {
  KILN_CHECK(low < high, "randint", "low (", low, ") must be below high (", high, ")");
  KILN_CHECK(o.dtype() != kBool, "randint", "cannot make bool integers");
  // Integers must fit the dtype (as torch's check; a uint8 draw below 1000 would wrap).
  const auto [min, max] = ops::integer_range(o.dtype());
  KILN_CHECK(low >= min && high - 1 <= max, "randint", "[", low, ", ", high, ") does not fit ", o.dtype(), " (", min,
             " to ", max, ")");
  Tensor t = make_empty(shape, o.dtype(), o.device());
  // high - low as unsigned: up to 2^64 - 1 for int64's whole range.
  const uint64_t range = static_cast<uint64_t>(high) - static_cast<uint64_t>(low);
  return random_fill(t, Op::RandInt, {.low = low, .range = range}, "randint", 2);
}
}  // namespace detail

Scalar Tensor::item() const {
  ops::check_defined(*this, "item");
  KILN_CHECK(numel() == 1, "item", "needs a tensor with one element, got shape ", shape());
  Tensor h = device().is_cpu() ? *this : host_mirror(*this);
  const void* p = h.data_ptr();
  switch (dtype()) {
    case kBool: return Scalar(*static_cast<const bool*>(p));
    case kUInt8: return Scalar(static_cast<int64_t>(*static_cast<const uint8_t*>(p)));
    case kInt32: return Scalar(static_cast<int64_t>(*static_cast<const int32_t*>(p)));
    case kInt64: return Scalar(*static_cast<const int64_t*>(p));
    case kFloat16: return Scalar(static_cast<double>(static_cast<float>(*static_cast<const Half*>(p))));
    case kBFloat16: return Scalar(static_cast<double>(static_cast<float>(*static_cast<const BFloat16*>(p))));
    case kFloat32: return Scalar(static_cast<double>(*static_cast<const float*>(p)));
    case kFloat64: return Scalar(*static_cast<const double*>(p));
  }
  KILN_FAIL("item", "unsupported dtype");
}

template <class T>
std::vector<T> Tensor::to_vector() const {
  ops::check_defined(*this, "to_vector");
  NoGradGuard ng;
  Tensor h = to(Device::cpu()).to(dtype_of<T>).contiguous();
  const T* p = static_cast<const T*>(h.data_ptr());
  return std::vector<T>(p, p + h.numel());
}
template std::vector<float> Tensor::to_vector<float>() const;
template std::vector<double> Tensor::to_vector<double>() const;
template std::vector<int64_t> Tensor::to_vector<int64_t>() const;
template std::vector<int32_t> Tensor::to_vector<int32_t>() const;
template std::vector<uint8_t> Tensor::to_vector<uint8_t>() const;
template std::vector<bool> Tensor::to_vector<bool>() const;
template std::vector<Half> Tensor::to_vector<Half>() const;
template std::vector<BFloat16> Tensor::to_vector<BFloat16>() const;

}  // namespace kiln
