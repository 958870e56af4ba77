// Activation modules (torch::nn::ReLU, GELU, LeakyReLU, ELU, Softplus, Hardtanh, ReLU6, Tanh, Sigmoid,
// SiLU, Softmax, LogSoftmax) and Dropout.
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

// Activations with parameters, as torch::nn's (their formulas are kiln::leaky_relu's etc., ops.h).
// Options are aggregates: LeakyReLU(LeakyReLUOptions{0.2}), Softplus({.beta = 2}).
struct LeakyReLUOptions {
  double negative_slope = 0.01;
};
struct ELUOptions {
  double alpha = 1.0;
};
struct SoftplusOptions {
  double beta = 1.0, threshold = 20.0;
};
struct HardtanhOptions {
  double min_val = -1.0, max_val = 1.0;
};
#define KILN_OPTIONS_MODULE(Name, Options)                                                              \
  class Name##Impl : public Module {                                                                    \
   public:                                                                                              \
    explicit Name##Impl(Options options = {});                                                          \
    Tensor forward(const Tensor& x);                                                                    \
    void pretty_print(std::ostream& os) const override;                                                 \
                                                                                                        \
    Options options;                                                                                    \
  };                                                                                                    \
  class Name : public ModuleHolder<Name##Impl> {                                                        \
   public:                                                                                              \
    using ModuleHolder<Name##Impl>::ModuleHolder;                                                       \
    Name(Options options) : ModuleHolder(std::make_shared<Name##Impl>(std::move(options))) {}          \
  }
KILN_OPTIONS_MODULE(LeakyReLU, LeakyReLUOptions);
KILN_OPTIONS_MODULE(ELU, ELUOptions);
KILN_OPTIONS_MODULE(Softplus, SoftplusOptions);
KILN_OPTIONS_MODULE(Hardtanh, HardtanhOptions);
#undef KILN_OPTIONS_MODULE

// Elementwise functions without options: Tanh(), Sigmoid(), SiLU() (x * sigmoid(x)), ReLU6().
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
KILN_ELEMENTWISE_MODULE(ReLU6);
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
