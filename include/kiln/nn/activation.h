// Activation modules (torch::nn::ReLU, GELU, Tanh, Sigmoid, SiLU, Softmax, LogSoftmax) and Dropout.
#pragma once

#include <string>

#include "kiln/nn/pimpl.h"

namespace kiln::nn {

// `inplace` is accepted for PyTorch compatibility and printed; the result is always a new tensor.
class ReLUImpl : public Module {
 public:
  explicit ReLUImpl(bool inplace = false) : inplace(inplace) {}
  Tensor forward(const Tensor& x);
  void pretty_print(std::ostream& os) const override;

  bool inplace;
};
KILN_MODULE(ReLU);

struct GELUOptions {
  std::string approximate = "none";  // "none" (the erf form) or "tanh"
};

class GELUImpl : public Module {
 public:
  explicit GELUImpl(GELUOptions options = {});
  Tensor forward(const Tensor& x);
  void pretty_print(std::ostream& os) const override;

  GELUOptions options;
};

class GELU : public ModuleHolder<GELUImpl> {
 public:
  using ModuleHolder<GELUImpl>::ModuleHolder;
  GELU(GELUOptions options) : ModuleHolder(std::make_shared<GELUImpl>(std::move(options))) {}
};

// Elementwise functions without options: Tanh(), Sigmoid(), SiLU() (x * sigmoid(x)).
#define KILN_ELEMENTWISE_MODULE(Name)                \
  class Name##Impl : public Module {                  \
   public:                                            \
    Tensor forward(const Tensor& x);                  \
    void pretty_print(std::ostream& os) const override; \
  };                                                  \
  KILN_MODULE(Name)
KILN_ELEMENTWISE_MODULE(Tanh);
KILN_ELEMENTWISE_MODULE(Sigmoid);
KILN_ELEMENTWISE_MODULE(SiLU);
#undef KILN_ELEMENTWISE_MODULE

// softmax (log_softmax) along `dim`, as torch::nn::Softmax(dim) and LogSoftmax(dim).
#define KILN_ALONG_DIM_MODULE(Name)                     \
  class Name##Impl : public Module {                    \
   public:                                              \
    explicit Name##Impl(int64_t dim) : dim(dim) {}      \
    Tensor forward(const Tensor& x);                    \
    void pretty_print(std::ostream& os) const override; \
                                                        \
    int64_t dim;                                        \
  };                                                    \
  KILN_MODULE(Name)
KILN_ALONG_DIM_MODULE(Softmax);
KILN_ALONG_DIM_MODULE(LogSoftmax);
#undef KILN_ALONG_DIM_MODULE

// Zeroes elements with probability p in training mode; the identity in eval mode.
class DropoutImpl : public Module {
 public:
  explicit DropoutImpl(double p = 0.5);
  Tensor forward(const Tensor& x);
  void pretty_print(std::ostream& os) const override;

  double p;
};
KILN_MODULE(Dropout);

}  // namespace kiln::nn
