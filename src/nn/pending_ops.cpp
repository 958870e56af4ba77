// TEMPORARY (branch nn only): weak stand-ins for the nn ops declared in ops.h until their real
// definitions land on main; a strong definition replaces each. Delete after `git merge main`.
#include "kiln/ops.h"

#define KILN_WEAK __attribute__((weak))

namespace kiln {

KILN_WEAK Tensor conv2d(const Tensor&, const Tensor&, const Tensor&, const Shape&, const Shape&, const Shape&,
                        int64_t) {
  KILN_FAIL("conv2d", "not merged into this branch yet");
}
KILN_WEAK Tensor max_pool2d(const Tensor&, const Shape&, const Shape&, const Shape&, const Shape&, bool) {
  KILN_FAIL("max_pool2d", "not merged into this branch yet");
}
KILN_WEAK Tensor avg_pool2d(const Tensor&, const Shape&, const Shape&, const Shape&, bool, bool) {
  KILN_FAIL("avg_pool2d", "not merged into this branch yet");
}
KILN_WEAK Tensor adaptive_avg_pool2d(const Tensor&, const Shape&) {
  KILN_FAIL("adaptive_avg_pool2d", "not merged into this branch yet");
}
KILN_WEAK Tensor batch_norm(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, bool, double,
                            double) {
  KILN_FAIL("batch_norm", "not merged into this branch yet");
}
KILN_WEAK Tensor dropout(const Tensor& x, double p, bool training) {
  if (!training || p == 0) return x;
  return x * (rand_like(x) >= p).to(x.dtype()) / (1.0 - p);
}
KILN_WEAK Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  Tensor y = matmul(x, weight.t());
  return bias.defined() ? y + bias : y;
}
KILN_WEAK Tensor nll_loss(const Tensor& input, const Tensor& target, const Tensor&, Reduction, int64_t) {
  return -gather(input, 1, target.unsqueeze(1)).mean();
}
KILN_WEAK Tensor cross_entropy(const Tensor& input, const Tensor& target, const Tensor& w, Reduction r, int64_t i,
                               double) {
  return nll_loss(log_softmax(input, 1), target, w, r, i);
}

}  // namespace kiln
