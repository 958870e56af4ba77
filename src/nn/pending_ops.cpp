// TEMPORARY (branch nn only): weak stand-ins for the nn ops declared in ops.h until their real
// definitions land on main; a strong definition replaces each. Delete after `git merge main`.
#include "kiln/ops.h"

#define KILN_WEAK __attribute__((weak))

namespace kiln {

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
