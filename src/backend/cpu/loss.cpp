// CPU kernels for cross_entropy on [N, C] logits with class targets: log-softmax and the picked
// log-probability in one pass per row (no [N, C] log-probabilities kept), and a backward that
// writes softmax - onehot straight into the gradient (one [N, C] tensor in all).
#include <cmath>
#include <limits>

#include "backend/cpu/loops.h"
#include "backend/cpu/softmax_rows.h"
#include "backend/dispatch.h"

namespace kiln::backend::cpu {
namespace {

// Targets in [0, C) or ignore_index, checked before any thread starts (an error cannot leave a
// parallel region).
void check_targets(const int64_t* t, int64_t n, int64_t classes, int64_t ignore_index) {
  for (int64_t i = 0; i < n; ++i)
    if (t[i] != ignore_index && (t[i] < 0 || t[i] >= classes)) [[unlikely]]
      KILN_FAIL("cross_entropy", "target ", t[i], " is out of range for ", classes, " classes");
}

int64_t row_grain(int64_t c) { return std::max<int64_t>(1, 32768 / std::max<int64_t>(c, 1)); }

// {logits [N, C], target [N], weight [C]?} -> {loss [N], stats [N, 2]: max and log(sum(exp(x - max)))}
void cross_entropy_forward(KernelArgs& a) {
  const auto& at = *static_cast<const CrossEntropyAttrs*>(a.attrs);
  const Tensor& x = a.inputs[0];
  const int64_t n = x.size(0), c = x.size(1);
  const int64_t* t = a.inputs[1].data_ptr<int64_t>();
  check_targets(t, n, c, at.ignore_index);
  visit_float_dtype(x.dtype(), "cross_entropy", [&]<class T>() {
    using A = compute_t<T>;
    const T* xp = x.data_ptr<T>();
    const T* w = at.has_weight ? a.inputs[2].data_ptr<T>() : nullptr;
    T* loss = a.outputs[0].data_ptr<T>();
    A* stats = a.outputs[1].data_ptr<A>();
    parallel_for(n, row_grain(c), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        if (t[r] == at.ignore_index) {
          loss[r] = T(0);
          stats[2 * r] = stats[2 * r + 1] = A(0);
          continue;
        }
        const T* row = xp + r * c;
        A mx = row_max<T, A>(row, c);
        // All -inf: the sum is 0 and the loss NaN; a +inf logit stays, so that exp(inf - inf) makes
        // the loss NaN, as torch's cross_entropy (through log_softmax) gives.
        if (mx == -std::numeric_limits<A>::infinity()) mx = A(0);
        // log(sum) - (x_t - max), as torch's log_softmax: (max + log(sum)) - x_t rounded log(sum)
        // at the size of the largest logit (a loss of 1.2e-4 at logits near 3000 came out 0).
        const A log_sum = std::log(row_sum_exp<T, A>(row, c, mx));
        stats[2 * r] = mx;
        stats[2 * r + 1] = log_sum;
        loss[r] = static_cast<T>((log_sum - (static_cast<A>(row[t[r]]) - mx)) * (w ? static_cast<A>(w[t[r]]) : A(1)));
      }
    });
  });
}

// {grad [N], logits, target, stats, weight?} -> {grad_logits [N, C]}: softmax as exp(x - max) / sum,
// not exp(x - lse) with lse = max + log(sum) rounded at the size of the largest logit (at logits
// near 3000 that put a relative error of 1e-4 in every gradient).
void cross_entropy_backward(KernelArgs& a) {
  const auto& at = *static_cast<const CrossEntropyAttrs*>(a.attrs);
  const Tensor& x = a.inputs[1];
  const int64_t n = x.size(0), c = x.size(1);
  const int64_t* t = a.inputs[2].data_ptr<int64_t>();
  visit_float_dtype(x.dtype(), "cross_entropy_backward", [&]<class T>() {
    using A = compute_t<T>;
    const T* g = a.inputs[0].data_ptr<T>();
    const T* xp = x.data_ptr<T>();
    const A* stats = a.inputs[3].data_ptr<A>();
    const T* w = at.has_weight ? a.inputs[4].data_ptr<T>() : nullptr;
    T* gx = a.outputs[0].data_ptr<T>();
    parallel_for(n, row_grain(c), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        T* grow = gx + r * c;
        if (t[r] == at.ignore_index) {
          std::fill_n(grow, c, T(0));
          continue;
        }
        const A scale = static_cast<A>(g[r]) * (w ? static_cast<A>(w[t[r]]) : A(1));
        row_scaled_softmax<T, A>(xp + r * c, grow, c, stats[2 * r], scale * std::exp(-stats[2 * r + 1]));
        grow[t[r]] = static_cast<T>(static_cast<A>(grow[t[r]]) - scale);
      }
    });
  });
}

constexpr DeviceType kCpu = DeviceType::CPU;
KILN_REGISTER_KERNEL(Op::CrossEntropy, kCpu, cross_entropy_forward);
KILN_REGISTER_KERNEL(Op::CrossEntropyBackward, kCpu, cross_entropy_backward);

}  // namespace
}  // namespace kiln::backend::cpu
