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

// gradcheck's body. `constant_ok`: an output that does not require grad has a Jacobian of 0, to
// be confirmed by finite differences (gradgradcheck's first derivative of a piecewise-linear op).
bool check_jacobians(const std::function<Tensor(const std::vector<Tensor>&)>& fn, const std::vector<Tensor>& inputs,
                     GradcheckOptions o, const char* where, bool constant_ok) {
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& x = inputs[i];
    if (!x.defined() || !x.requires_grad()) continue;
    KILN_CHECK(x.dtype() == kFloat64 && x.device().is_cpu(), where, "input ", i,
               " must be a float64 CPU tensor for finite differences, got ", x.dtype(), " on ", x.device());
  }
  Tensor y = fn(inputs);
  KILN_CHECK(y.defined() && (y.requires_grad() || constant_ok), where, "the function's output does not require grad");
  const bool constant = !y.requires_grad();
  const int64_t ny = y.numel();
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& x = inputs[i];
    if (!x.defined() || !x.requires_grad()) continue;
    const int64_t nx = x.numel();
    // Analytical: one backward per output element.
    std::vector<double> analytic(static_cast<size_t>(nx * ny), 0.0);
    for (int64_t k = 0; k < ny && !constant; ++k) {
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
          KILN_FAIL(where, "gradient mismatch for input ", i, " element ", j, " and output element ",
                    k, ": numerical ", num, ", analytical ", ana);
        }
      }
    }
  }
  return true;
}

}  // namespace

bool gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& fn, const std::vector<Tensor>& inputs,
               GradcheckOptions o) {
  return check_jacobians(fn, inputs, o, "gradcheck", false);
}

bool gradgradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& fn, const std::vector<Tensor>& inputs,
                   GradcheckOptions o) {
  Tensor y = fn(inputs);
  KILN_CHECK(y.defined() && y.requires_grad(), "gradgradcheck", "the function's output does not require grad");
  std::vector<Tensor> all = inputs;
  all.push_back(randn(y.shape(), kFloat64).requires_grad_());  // the output's gradient, as torch's
  // fn's gradients for the given output gradient, flattened into one vector: recorded when the
  // caller records (gradcheck's analytical side), plain values for its finite differences.
  auto first_order = [&fn, n = inputs.size()](const std::vector<Tensor>& a) {
    const bool outer = is_grad_enabled();
    AutoGradMode on(true);
    const std::vector<Tensor> ins(a.begin(), a.begin() + static_cast<std::ptrdiff_t>(n));
    std::vector<Tensor> wrt;
    for (const Tensor& t : ins)
      if (t.defined() && t.requires_grad()) wrt.push_back(t);
    const std::vector<Tensor> g = grad({fn(ins)}, wrt, {a.back()}, false, /*allow_unused=*/true, outer);
    std::vector<Tensor> parts;
    for (size_t i = 0; i < g.size(); ++i) parts.push_back(g[i].defined() ? g[i].reshape({-1}) : zeros({wrt[i].numel()}, kFloat64));
    Tensor flat = cat(parts);
    return outer ? flat : flat.detach();
  };
  return check_jacobians(first_order, all, o, "gradgradcheck", true);
}

}  // namespace kiln::autograd
