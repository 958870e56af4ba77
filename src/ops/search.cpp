// searchsorted and bucketize: a binary search per value (the SearchSorted kernel), with torch's
// checks and its dtype promotion of the sequence and the values.
#include <string>

#include "ops/op_util.h"

namespace kiln {
namespace {

constexpr const char* kOp = "searchsorted";

// torch's side / right pair, as one flag.
bool right_of(bool right, std::optional<std::string_view> side) {
  if (!side) return right;
  KILN_CHECK(*side == "left" || *side == "right", kOp, "side can only be 'left' or 'right' but got ",
             std::string(*side));
  KILN_CHECK(!right || *side == "right", kOp, "side and right can't be set to opposites, got side of ",
             std::string(*side), " while right was true");
  return *side == "right";
}

// The sequence read through sorter (checked as torch checks it: int64, the sequence's shape, in range).
Tensor through_sorter(const Tensor& seq, const Tensor& sorter) {
  if (!sorter.defined()) return seq;
  KILN_CHECK(sorter.dtype() == kInt64, kOp, "sorter must be a tensor of long dtype but got dtype ", sorter.dtype());
  KILN_CHECK(sorter.shape() == seq.shape(), kOp, "boundary and sorter must have the same size, but got boundary "
             "tensor ", seq.shape(), " and got sorter tensor ", sorter.shape());
  if (sorter.device().is_cpu() && seq.numel() > 0) {  // on a GPU gather's kernel checks the range
    const int64_t m = seq.size(-1);
    for (int64_t i : sorter.reshape({-1}).to_vector<int64_t>())
      KILN_CHECK(i >= 0 && i < m, kOp, "sorter index out of range: ", i, " for rows of ", m);
  }
  return gather(seq, -1, sorter);
}

Tensor search(const Tensor& seq_in, const Tensor& values_in, bool out_int32, bool right, const Tensor& sorter) {
  ops::check_defined(seq_in, kOp);
  ops::check_defined(values_in, kOp);
  const Device dev = sorter.defined() ? ops::common_device({&seq_in, &values_in, &sorter}, kOp)
                                      : ops::common_device({&seq_in, &values_in}, kOp);
  KILN_CHECK(seq_in.dim() >= 1 && (seq_in.dim() == 1 || values_in.dim() >= 1), kOp,
             "input value can be a scalar only when boundaries tensor dimension is 1, but we got boundaries tensor "
             "dim(", seq_in.dim(), ") and input value's dim(", values_in.dim(), ") numel(", values_in.numel(), ")");
  if (seq_in.dim() > 1) {
    const Shape& s = seq_in.shape();
    const Shape& v = values_in.shape();
    KILN_CHECK(s.size() == v.size() && std::equal(s.begin(), s.end() - 1, v.begin()), kOp,
               "boundaries tensor should be 1 dimension or the first N-1 dimensions of boundaries tensor and input "
               "value tensor must match, but we got boundaries tensor ", s, " and input value tensor ", v);
  }
  const ScalarType t = promote_types(seq_in.dtype(), values_in.dtype());
  KILN_CHECK(t != kBool, kOp, "bool sequences and values are not supported (torch's neither)");
  const Tensor seq = ops::cast(through_sorter(seq_in, sorter), t);
  const Tensor values = ops::cast(values_in, t);
  const int64_t m = seq.size(-1);
  const int64_t k = values.dim() == 0 ? 1 : values.size(-1);
  const int64_t rows = k == 0 ? 0 : values.numel() / k;
  Tensor out = make_empty(values.shape(), out_int32 ? kInt32 : kInt64, dev);
  if (out.numel() == 0) return out;
  if (m == 0) return out.zero_();
  const Tensor s2 = seq.contiguous().reshape({seq.numel() / m, m});
  const Tensor v2 = values.contiguous().reshape({rows, k});
  Tensor o2 = out.view({rows, k});
  backend::SearchSortedAttrs attrs{right};
  ops::run1(ops::Op::SearchSorted, dev, {s2, v2}, o2, &attrs);
  return out;
}

}  // namespace

Tensor searchsorted(const Tensor& sorted_sequence, const Tensor& values, bool out_int32, bool right,
                    std::optional<std::string_view> side, const Tensor& sorter) {
  return search(sorted_sequence, values, out_int32, right_of(right, side), sorter);
}

Tensor searchsorted(const Tensor& sorted_sequence, Scalar value, bool out_int32, bool right,
                    std::optional<std::string_view> side, const Tensor& sorter) {
  ops::check_defined(sorted_sequence, kOp);
  const Tensor v = ops::wrap_scalar(value, ops::result_type_of(sorted_sequence, value)).to(sorted_sequence.device());
  return searchsorted(sorted_sequence, v, out_int32, right, side, sorter);
}

// bucketize takes one 1-D sequence of boundaries (torch's check).
static const Tensor& boundaries_of(const Tensor& boundaries) {
  ops::check_defined(boundaries, "bucketize");
  KILN_CHECK(boundaries.dim() == 1, "bucketize", "boundaries tensor must be 1 dimension, but got dim(",
             boundaries.dim(), ")");
  return boundaries;
}

Tensor bucketize(const Tensor& input, const Tensor& boundaries, bool out_int32, bool right) {
  return searchsorted(boundaries_of(boundaries), input, out_int32, right);
}

Tensor bucketize(Scalar input, const Tensor& boundaries, bool out_int32, bool right) {
  return searchsorted(boundaries_of(boundaries), input, out_int32, right);
}

}  // namespace kiln
