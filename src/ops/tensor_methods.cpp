// Tensor's op methods: each forwards to the free function of the same name.
#include "kiln/ops.h"

namespace kiln {

#define KILN_METHOD_BINARY(name)                                                 \
  Tensor Tensor::name(const Tensor& o) const { return kiln::name(*this, o); } \
  Tensor Tensor::name(Scalar o) const { return kiln::name(*this, o); }
KILN_METHOD_BINARY(add)
KILN_METHOD_BINARY(sub)
KILN_METHOD_BINARY(mul)
KILN_METHOD_BINARY(div)
KILN_METHOD_BINARY(pow)
KILN_METHOD_BINARY(eq)
KILN_METHOD_BINARY(ne)
KILN_METHOD_BINARY(lt)
KILN_METHOD_BINARY(le)
KILN_METHOD_BINARY(gt)
KILN_METHOD_BINARY(ge)
#undef KILN_METHOD_BINARY

#define KILN_METHOD_UNARY(name) \
  Tensor Tensor::name() const { return kiln::name(*this); }
KILN_METHOD_UNARY(neg)
KILN_METHOD_UNARY(abs)
KILN_METHOD_UNARY(sign)
KILN_METHOD_UNARY(exp)
KILN_METHOD_UNARY(log)
KILN_METHOD_UNARY(log1p)
KILN_METHOD_UNARY(expm1)
KILN_METHOD_UNARY(sqrt)
KILN_METHOD_UNARY(rsqrt)
KILN_METHOD_UNARY(square)
KILN_METHOD_UNARY(reciprocal)
KILN_METHOD_UNARY(tanh)
KILN_METHOD_UNARY(sigmoid)
KILN_METHOD_UNARY(relu)
KILN_METHOD_UNARY(sin)
KILN_METHOD_UNARY(cos)
KILN_METHOD_UNARY(logical_not)
KILN_METHOD_UNARY(erf)
KILN_METHOD_UNARY(log2)
KILN_METHOD_UNARY(log10)
KILN_METHOD_UNARY(exp2)
KILN_METHOD_UNARY(floor)
KILN_METHOD_UNARY(ceil)
KILN_METHOD_UNARY(round)
KILN_METHOD_UNARY(trunc)
KILN_METHOD_UNARY(isnan)
KILN_METHOD_UNARY(isinf)
KILN_METHOD_UNARY(isfinite)
KILN_METHOD_UNARY(max)
KILN_METHOD_UNARY(min)
#undef KILN_METHOD_UNARY

Tensor Tensor::maximum(const Tensor& o) const { return kiln::maximum(*this, o); }
Tensor Tensor::minimum(const Tensor& o) const { return kiln::minimum(*this, o); }
Tensor Tensor::div(const Tensor& o, std::string_view mode) const { return kiln::div(*this, o, mode); }
Tensor Tensor::div(Scalar o, std::string_view mode) const { return kiln::div(*this, o, mode); }
Tensor Tensor::floor_divide(const Tensor& o) const { return kiln::floor_divide(*this, o); }
Tensor Tensor::floor_divide(Scalar o) const { return kiln::floor_divide(*this, o); }
Tensor Tensor::remainder(const Tensor& o) const { return kiln::remainder(*this, o); }
Tensor Tensor::remainder(Scalar o) const { return kiln::remainder(*this, o); }
Tensor Tensor::fmod(const Tensor& o) const { return kiln::fmod(*this, o); }
Tensor Tensor::fmod(Scalar o) const { return kiln::fmod(*this, o); }
Tensor Tensor::atan2(const Tensor& o) const { return kiln::atan2(*this, o); }
Tensor Tensor::bitwise_and(const Tensor& o) const { return kiln::bitwise_and(*this, o); }
Tensor Tensor::bitwise_and(Scalar o) const { return kiln::bitwise_and(*this, o); }
Tensor Tensor::bitwise_or(const Tensor& o) const { return kiln::bitwise_or(*this, o); }
Tensor Tensor::bitwise_or(Scalar o) const { return kiln::bitwise_or(*this, o); }
Tensor Tensor::bitwise_xor(const Tensor& o) const { return kiln::bitwise_xor(*this, o); }
Tensor Tensor::bitwise_xor(Scalar o) const { return kiln::bitwise_xor(*this, o); }
Tensor Tensor::bitwise_not() const { return kiln::bitwise_not(*this); }
Tensor Tensor::outer(const Tensor& o) const { return kiln::outer(*this, o); }
Tensor Tensor::addmm(const Tensor& m1, const Tensor& m2, Scalar beta, Scalar alpha) const {
  return kiln::addmm(*this, m1, m2, beta, alpha);
}
Tensor Tensor::baddbmm(const Tensor& b1, const Tensor& b2, Scalar beta, Scalar alpha) const {
  return kiln::baddbmm(*this, b1, b2, beta, alpha);
}
Tensor Tensor::logical_and(const Tensor& o) const { return kiln::logical_and(*this, o); }
Tensor Tensor::logical_or(const Tensor& o) const { return kiln::logical_or(*this, o); }
Tensor Tensor::clamp(std::optional<Scalar> lo, std::optional<Scalar> hi) const { return kiln::clamp(*this, lo, hi); }
Tensor Tensor::masked_fill(const Tensor& mask, Scalar v) const { return kiln::masked_fill(*this, mask, v); }
Tensor Tensor::masked_fill(const Tensor& mask, const Tensor& v) const { return kiln::masked_fill(*this, mask, v); }
Tensor Tensor::addcmul(const Tensor& a, const Tensor& b, Scalar v) const { return kiln::addcmul(*this, a, b, v); }
Tensor Tensor::addcdiv(const Tensor& a, const Tensor& b, Scalar v) const { return kiln::addcdiv(*this, a, b, v); }
Tensor Tensor::lerp(const Tensor& end, Scalar w) const { return kiln::lerp(*this, end, w); }
Tensor Tensor::lerp(const Tensor& end, const Tensor& w) const { return kiln::lerp(*this, end, w); }
Tensor Tensor::sum() const { return kiln::sum(*this); }
Tensor Tensor::sum(const Shape& dims, bool keepdim) const { return kiln::sum(*this, dims, keepdim); }
Tensor Tensor::mean() const { return kiln::mean(*this); }
Tensor Tensor::mean(const Shape& dims, bool keepdim) const { return kiln::mean(*this, dims, keepdim); }
Tensor Tensor::var(const Shape& dims, int64_t c, bool keepdim) const { return kiln::var(*this, dims, c, keepdim); }
Tensor Tensor::std(const Shape& dims, int64_t c, bool keepdim) const { return kiln::std(*this, dims, c, keepdim); }
Tensor Tensor::prod() const { return kiln::prod(*this); }
Tensor Tensor::prod(int64_t dim, bool keepdim) const { return kiln::prod(*this, {dim}, keepdim); }
std::tuple<Tensor, Tensor> Tensor::max(int64_t dim, bool keepdim) const { return kiln::max(*this, dim, keepdim); }
std::tuple<Tensor, Tensor> Tensor::min(int64_t dim, bool keepdim) const { return kiln::min(*this, dim, keepdim); }
Tensor Tensor::amax(const Shape& dims, bool keepdim) const { return kiln::amax(*this, dims, keepdim); }
Tensor Tensor::amin(const Shape& dims, bool keepdim) const { return kiln::amin(*this, dims, keepdim); }
Tensor Tensor::argmax(std::optional<int64_t> dim, bool keepdim) const { return kiln::argmax(*this, dim, keepdim); }
Tensor Tensor::flip(const Shape& dims) const { return kiln::flip(*this, dims); }
Tensor Tensor::roll(const Shape& shifts, const Shape& dims) const { return kiln::roll(*this, shifts, dims); }
Tensor Tensor::repeat(const Shape& repeats) const { return kiln::repeat(*this, repeats); }
std::tuple<Tensor, Tensor> Tensor::sort(int64_t dim, bool descending) const { return kiln::sort(*this, dim, descending); }
Tensor Tensor::cumsum(int64_t dim, std::optional<ScalarType> dtype) const { return kiln::cumsum(*this, dim, dtype); }
std::tuple<Tensor, Tensor> Tensor::kthvalue(int64_t k, int64_t dim, bool keepdim) const {
  return kiln::kthvalue(*this, k, dim, keepdim);
}
Tensor Tensor::median() const { return kiln::median(*this); }
std::tuple<Tensor, Tensor> Tensor::median(int64_t dim, bool keepdim) const { return kiln::median(*this, dim, keepdim); }
Tensor Tensor::nanmedian() const { return kiln::nanmedian(*this); }
std::tuple<Tensor, Tensor> Tensor::nanmedian(int64_t dim, bool keepdim) const {
  return kiln::nanmedian(*this, dim, keepdim);
}
Tensor Tensor::argsort(int64_t dim, bool descending) const { return kiln::argsort(*this, dim, descending); }
std::tuple<Tensor, Tensor> Tensor::topk(int64_t k, int64_t dim, bool largest, bool sorted) const {
  return kiln::topk(*this, k, dim, largest, sorted);
}
Tensor Tensor::argmin(std::optional<int64_t> dim, bool keepdim) const { return kiln::argmin(*this, dim, keepdim); }
Tensor Tensor::logsumexp(const Shape& dims, bool keepdim) const { return kiln::logsumexp(*this, dims, keepdim); }
Tensor Tensor::all() const { return kiln::all(*this); }
Tensor Tensor::any() const { return kiln::any(*this); }
Tensor Tensor::norm(double p) const { return kiln::norm(*this, p); }
Tensor Tensor::softmax(int64_t dim) const { return kiln::softmax(*this, dim); }
Tensor Tensor::log_softmax(int64_t dim) const { return kiln::log_softmax(*this, dim); }
Tensor Tensor::matmul(const Tensor& o) const { return kiln::matmul(*this, o); }
Tensor Tensor::index_select(int64_t dim, const Tensor& i) const { return kiln::index_select(*this, dim, i); }
Tensor Tensor::gather(int64_t dim, const Tensor& i) const { return kiln::gather(*this, dim, i); }
Tensor Tensor::scatter_add(int64_t dim, const Tensor& i, const Tensor& s) const { return kiln::scatter_add(*this, dim, i, s); }
Tensor Tensor::tril(int64_t k) const { return kiln::tril(*this, k); }
Tensor Tensor::triu(int64_t k) const { return kiln::triu(*this, k); }
Tensor Tensor::nonzero() const { return kiln::nonzero(*this); }
Tensor Tensor::repeat_interleave(int64_t repeats, std::optional<int64_t> dim) const {
  return kiln::repeat_interleave(*this, repeats, dim);
}
Tensor Tensor::repeat_interleave(const Tensor& repeats, std::optional<int64_t> dim) const {
  return kiln::repeat_interleave(*this, repeats, dim);
}
Tensor Tensor::argwhere() const { return kiln::argwhere(*this); }
Tensor Tensor::masked_select(const Tensor& mask) const { return kiln::masked_select(*this, mask); }
Tensor Tensor::count_nonzero(const Shape& dims) const { return kiln::count_nonzero(*this, dims); }
std::vector<Tensor> Tensor::split(int64_t size, int64_t dim) const { return kiln::split(*this, size, dim); }
std::vector<Tensor> Tensor::chunk(int64_t chunks, int64_t dim) const { return kiln::chunk(*this, chunks, dim); }

}  // namespace kiln
