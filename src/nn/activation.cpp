// The activation modules and Dropout: forward and printing.
#include "kiln/nn/activation.h"

#include "kiln/ops.h"
#include "nn/python_float.h"

namespace kiln::nn {

Tensor ReLUImpl::forward(const Tensor& x) { return kiln::relu(x); }

void ReLUImpl::pretty_print(std::ostream& os) const { os << (inplace ? "ReLU(inplace=True)" : "ReLU()"); }

GELUImpl::GELUImpl(GELUOptions options) : options(std::move(options)) {
  KILN_CHECK(this->options.approximate == "none" || this->options.approximate == "tanh", "GELU",
             "approximate must be \"none\" or \"tanh\", got \"", this->options.approximate, "\"");
}

Tensor GELUImpl::forward(const Tensor& x) { return kiln::gelu(x, options.approximate); }

void GELUImpl::pretty_print(std::ostream& os) const { os << "GELU(approximate='" << options.approximate << "')"; }

LeakyReLUImpl::LeakyReLUImpl(LeakyReLUOptions options) : options(options) {}
Tensor LeakyReLUImpl::forward(const Tensor& x) { return kiln::leaky_relu(x, options.negative_slope); }
void LeakyReLUImpl::pretty_print(std::ostream& os) const {
  os << "LeakyReLU(negative_slope=" << detail::python_float(options.negative_slope) << ")";
}
ELUImpl::ELUImpl(ELUOptions options) : options(options) {}
Tensor ELUImpl::forward(const Tensor& x) { return kiln::elu(x, options.alpha); }
void ELUImpl::pretty_print(std::ostream& os) const { os << "ELU(alpha=" << detail::python_float(options.alpha) << ")"; }
SoftplusImpl::SoftplusImpl(SoftplusOptions options) : options(options) {
  KILN_CHECK(options.beta != 0, "Softplus", "beta must not be 0");
}
Tensor SoftplusImpl::forward(const Tensor& x) { return kiln::softplus(x, options.beta, options.threshold); }
void SoftplusImpl::pretty_print(std::ostream& os) const {
  os << "Softplus(beta=" << detail::python_float(options.beta) << ", threshold=" << detail::python_float(options.threshold)
     << ")";
}
HardtanhImpl::HardtanhImpl(HardtanhOptions options) : options(options) {
  KILN_CHECK(options.min_val <= options.max_val, "Hardtanh", "min_val (", options.min_val,
             ") must not be above max_val (", options.max_val, ")");
}
Tensor HardtanhImpl::forward(const Tensor& x) { return kiln::hardtanh(x, options.min_val, options.max_val); }
void HardtanhImpl::pretty_print(std::ostream& os) const {
  os << "Hardtanh(min_val=" << detail::python_float(options.min_val) << ", max_val=" << detail::python_float(options.max_val)
     << ")";
}
Tensor ReLU6Impl::forward(const Tensor& x) { return kiln::relu6(x); }
void ReLU6Impl::pretty_print(std::ostream& os) const { os << "ReLU6()"; }

Tensor TanhImpl::forward(const Tensor& x) { return kiln::tanh(x); }
void TanhImpl::pretty_print(std::ostream& os) const { os << "Tanh()"; }
Tensor SigmoidImpl::forward(const Tensor& x) { return kiln::sigmoid(x); }
void SigmoidImpl::pretty_print(std::ostream& os) const { os << "Sigmoid()"; }
Tensor SiLUImpl::forward(const Tensor& x) { return kiln::silu(x); }
void SiLUImpl::pretty_print(std::ostream& os) const { os << "SiLU()"; }

Tensor SoftmaxImpl::forward(const Tensor& x) { return kiln::softmax(x, dim); }
void SoftmaxImpl::pretty_print(std::ostream& os) const { os << "Softmax(dim=" << dim << ")"; }
Tensor LogSoftmaxImpl::forward(const Tensor& x) { return kiln::log_softmax(x, dim); }
void LogSoftmaxImpl::pretty_print(std::ostream& os) const { os << "LogSoftmax(dim=" << dim << ")"; }

DropoutImpl::DropoutImpl(double p) : p(p) {
  KILN_CHECK(p >= 0.0 && p <= 1.0, "Dropout", "probability must be in [0, 1], got ", p);
}

Tensor DropoutImpl::forward(const Tensor& x) { return kiln::dropout(x, p, is_training()); }

void DropoutImpl::pretty_print(std::ostream& os) const { os << "Dropout(p=" << detail::python_float(p) << ", inplace=False)"; }

}  // namespace kiln::nn
