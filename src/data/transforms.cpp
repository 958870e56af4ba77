// Normalize, RandomCrop and RandomHorizontalFlip as plain loops over contiguous CPU memory, so a
// worker thread transforms its samples without going through ops (and their OpenMP threads).
#include "kiln/data/transforms.h"

#include <algorithm>
#include <cstring>
#include <type_traits>

namespace kiln::data::transforms {
namespace {

Tensor cpu_contiguous(const Tensor& x, int64_t min_dim, const char* where) {
  KILN_CHECK(x.defined(), where, "the input is undefined");
  KILN_CHECK(x.device().is_cpu(), where, "expects a CPU tensor, got one on ", x.device());
  KILN_CHECK(x.dim() >= min_dim, where, "expects at least ", min_dim, " dims, got shape ", x.shape());
  return x.contiguous();
}

// 16-bit images in float32, rounded once.
template <class T>
void normalize(const T* in, T* out, int64_t outer, int64_t channels, int64_t plane, const std::vector<double>& mean,
               const std::vector<double>& std) {
  using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t c = 0; c < channels; ++c) {
      size_t k = mean.size() == 1 ? 0 : static_cast<size_t>(c);
      // Division, not multiplication by 1/std, so results match (x - m) / s exactly.
      A m = static_cast<A>(mean[k]), s = static_cast<A>(std[k]);
      const int64_t first = (o * channels + c) * plane;
      for (int64_t i = first; i < first + plane; ++i) out[i] = static_cast<T>((static_cast<A>(in[i]) - m) / s);
    }
}

}  // namespace

Normalize::Normalize(std::vector<double> mean, std::vector<double> std) : mean_(std::move(mean)), std_(std::move(std)) {
  KILN_CHECK(!mean_.empty() && mean_.size() == std_.size(), "Normalize", "needs as many means as stds (at least one), got ",
             mean_.size(), " and ", std_.size());
  // Nonzero in float32 too, the type the images are divided in (1e-50 is 0 there).
  for (double s : std_) KILN_CHECK(static_cast<float>(s) != 0.0f, "Normalize", "std must be nonzero in float32, got ", s);
}

Tensor Normalize::operator()(const Tensor& x, SampleGenerator&) const { return (*this)(x); }

Tensor Normalize::operator()(const Tensor& input) const {
  Tensor x = cpu_contiguous(input, 1, "Normalize");
  // torchvision's channel dim -3 ([..., C, H, W]: a batch, a clip), dim 0 below three dims.
  const int64_t cdim = x.dim() >= 3 ? x.dim() - 3 : 0;
  const int64_t channels = x.size(cdim);
  KILN_CHECK(mean_.size() == 1 || static_cast<int64_t>(mean_.size()) == channels, "Normalize", "has ", mean_.size(),
             " means but the input ", x.shape(), " has ", channels, " channels (dim ", cdim, ")");
  int64_t outer = 1, plane = 1;
  for (int64_t d = 0; d < cdim; ++d) outer *= x.size(d);
  for (int64_t d = cdim + 1; d < x.dim(); ++d) plane *= x.size(d);
  Tensor out = empty(x.shape(), x.dtype());
  auto run = [&]<class T>() { normalize(x.data_ptr<T>(), out.data_ptr<T>(), outer, channels, plane, mean_, std_); };
  switch (x.dtype()) {
    case kFloat32: run.operator()<float>(); break;
    case kFloat64: run.operator()<double>(); break;
    case kFloat16: run.operator()<Half>(); break;
    case kBFloat16: run.operator()<BFloat16>(); break;
    default: KILN_FAIL("Normalize", "expects a floating-point image, got ", x.dtype());
  }
  return out;
}

RandomCrop::RandomCrop(int64_t size, int64_t padding) : size_(size), padding_(padding) {
  KILN_CHECK(size > 0 && padding >= 0, "RandomCrop", "needs size > 0 and padding >= 0, got ", size, " and ", padding);
}

Tensor RandomCrop::operator()(const Tensor& input, SampleGenerator& gen) const {
  Tensor x = cpu_contiguous(input, 2, "RandomCrop");
  int64_t h = x.size(-2 + x.dim()), w = x.size(x.dim() - 1), p = padding_, s = size_;
  KILN_CHECK(h + 2 * p >= s && w + 2 * p >= s, "RandomCrop", "cannot cut ", s, "x", s, " from shape ", x.shape(),
             " padded by ", p);
  int64_t top = gen.randint(h + 2 * p - s + 1);
  int64_t left = gen.randint(w + 2 * p - s + 1);
  Shape shape = x.shape();
  shape[shape.size() - 2] = s;
  shape[shape.size() - 1] = s;
  Tensor out = empty(shape, x.dtype());
  std::memset(out.data_ptr(), 0, out.nbytes());  // all-zero bytes are 0 in every dtype
  int64_t planes = h * w == 0 ? 0 : x.numel() / (h * w);
  size_t es = x.element_size();
  // Output column c reads input column left + c - p; only columns inside [0, w) are copied.
  int64_t c0 = std::max<int64_t>(0, p - left), c1 = std::min<int64_t>(s, w + p - left);
  const char* src = static_cast<const char*>(x.data_ptr());
  char* dst = static_cast<char*>(out.data_ptr());
  for (int64_t q = 0; q < planes && c1 > c0; ++q) {
    for (int64_t r = 0; r < s; ++r) {
      int64_t sr = top + r - p;
      if (sr < 0 || sr >= h) continue;
      std::memcpy(dst + ((q * s + r) * s + c0) * es, src + ((q * h + sr) * w + left + c0 - p) * es,
                  static_cast<size_t>(c1 - c0) * es);
    }
  }
  return out;
}

RandomHorizontalFlip::RandomHorizontalFlip(double p) : p_(p) {
  KILN_CHECK(p >= 0.0 && p <= 1.0, "RandomHorizontalFlip", "p must be in [0, 1], got ", p);
}

Tensor RandomHorizontalFlip::operator()(const Tensor& input, SampleGenerator& gen) const {
  Tensor x = cpu_contiguous(input, 1, "RandomHorizontalFlip");
  if (!(gen.uniform() < p_)) return x;
  Tensor out = empty(x.shape(), x.dtype());
  int64_t w = x.size(x.dim() - 1);
  int64_t rows = w == 0 ? 0 : x.numel() / w;
  size_t es = x.element_size();
  const char* src = static_cast<const char*>(x.data_ptr());
  char* dst = static_cast<char*>(out.data_ptr());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < w; ++c) std::memcpy(dst + (r * w + c) * es, src + (r * w + w - 1 - c) * es, es);
  return out;
}

}  // namespace kiln::data::transforms
