// gradcheck: backward() against central finite differences, element by element.
#include <cmath>
#include <sstream>

#include "kiln/autograd.h"
#include "kiln/ops.h"

namespace kiln::autograd {
namespace {

int64_t element_offset(const Tensor& t, int64_t flat) {
  int64_t off = 0;
  for (int64_t d = t.dim() - 1; d >= 0; --d) {
    off += (flat % t.shape()[d]) * t.strides()[d];
    flat /= t.shape()[d];
  }
  return off;
}

// All outputs of fn flattened into one float64 vector.
std::vector<double> flat_output(const Tensor& y) { return y.to_vector<double>(); }

}  // namespace

bool gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& fn, const std::vector<Tensor>& inputs,
               GradcheckOptions o) {
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& x = inputs[i];
    if (!x.defined() || !x.requires_grad()) continue;
    KILN_CHECK(x.dtype() == kFloat64 && x.device().is_cpu(), "gradcheck", "input ", i,
               " must be a float64 CPU tensor for finite differences, got ", x.dtype(), " on ", x.device());
  }
  Tensor y = fn(inputs);
  KILN_CHECK(y.defined() && y.requires_grad(), "gradcheck", "the function's output does not require grad");
  const int64_t ny = y.numel();
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& x = inputs[i];
    if (!x.defined() || !x.requires_grad()) continue;
    const int64_t nx = x.numel();
    // Analytical: one backward per output element.
    std::vector<double> analytic(static_cast<size_t>(nx * ny), 0.0);
    for (int64_t k = 0; k < ny; ++k) {
      Tensor e = zeros(y.shape(), y.options());
      e.flatten().select(0, k).fill_(1.0);
      Tensor yk = fn(inputs);
      auto g = grad({yk}, {x}, {e}, false, true);
      if (!g[0].defined()) continue;
      auto gv = g[0].to_vector<double>();
      for (int64_t j = 0; j < nx; ++j) analytic[j * ny + k] = gv[j];
    }
    // Numerical: perturb each element of x in place (raw memory; restored after).
    double* base = static_cast<double*>(x.data_ptr());
    for (int64_t j = 0; j < nx; ++j) {
      double* p = base + element_offset(x, j);
      const double orig = *p;
      std::vector<double> plus, minus;
      {
        NoGradGuard ng;
        *p = orig + o.eps;
        plus = flat_output(fn(inputs));
        *p = orig - o.eps;
        minus = flat_output(fn(inputs));
        *p = orig;
      }
      for (int64_t k = 0; k < ny; ++k) {
        double num = (plus[k] - minus[k]) / (2 * o.eps);
        double ana = analytic[j * ny + k];
        if (std::abs(num - ana) > o.atol + o.rtol * std::abs(num) || std::isnan(num) != std::isnan(ana)) {
          if (!o.raise_exception) return false;
          KILN_FAIL("gradcheck", "gradient mismatch for input ", i, " element ", j, " and output element ",
                    k, ": numerical ", num, ", analytical ", ana);
        }
      }
    }
  }
  return true;
}

}  // namespace kiln::autograd
