// The loss modules: each keeps its options (a class weight as a buffer) and calls its function.
#include "kiln/nn/loss.h"

#include <utility>


namespace kiln::nn {

CrossEntropyLossImpl::CrossEntropyLossImpl(CrossEntropyLossOptions options) : options(std::move(options)) {
  KILN_CHECK(this->options.label_smoothing >= 0 && this->options.label_smoothing <= 1, "CrossEntropyLoss",
             "label_smoothing must be in [0, 1], got ", this->options.label_smoothing);
  if (this->options.weight.defined()) this->options.weight = register_buffer("weight", this->options.weight);
}

Tensor CrossEntropyLossImpl::forward(const Tensor& input, const Tensor& target) {
  return functional::cross_entropy(input, target, options);
}

void CrossEntropyLossImpl::pretty_print(std::ostream& os) const { os << "CrossEntropyLoss()"; }

NLLLossImpl::NLLLossImpl(NLLLossOptions options) : options(std::move(options)) {
  if (this->options.weight.defined()) this->options.weight = register_buffer("weight", this->options.weight);
}

Tensor NLLLossImpl::forward(const Tensor& input, const Tensor& target) {
  return functional::nll_loss(input, target, options);
}

void NLLLossImpl::pretty_print(std::ostream& os) const { os << "NLLLoss()"; }

MSELossImpl::MSELossImpl(MSELossOptions options) : options(options) {}

Tensor MSELossImpl::forward(const Tensor& input, const Tensor& target) {
  return functional::mse_loss(input, target, options);
}

void MSELossImpl::pretty_print(std::ostream& os) const { os << "MSELoss()"; }

BCELossImpl::BCELossImpl(BCELossOptions options) : options(std::move(options)) {
  if (this->options.weight.defined()) this->options.weight = register_buffer("weight", this->options.weight);
}

Tensor BCELossImpl::forward(const Tensor& input, const Tensor& target) {
  return functional::binary_cross_entropy(input, target, options);
}

void BCELossImpl::pretty_print(std::ostream& os) const { os << "BCELoss()"; }

BCEWithLogitsLossImpl::BCEWithLogitsLossImpl(BCEWithLogitsLossOptions options) : options(std::move(options)) {
  if (this->options.weight.defined()) this->options.weight = register_buffer("weight", this->options.weight);
  if (this->options.pos_weight.defined())
    this->options.pos_weight = register_buffer("pos_weight", this->options.pos_weight);
}

Tensor BCEWithLogitsLossImpl::forward(const Tensor& input, const Tensor& target) {
  return functional::binary_cross_entropy_with_logits(input, target, options);
}

void BCEWithLogitsLossImpl::pretty_print(std::ostream& os) const { os << "BCEWithLogitsLoss()"; }

L1LossImpl::L1LossImpl(L1LossOptions options) : options(options) {}
Tensor L1LossImpl::forward(const Tensor& input, const Tensor& target) {
  return functional::l1_loss(input, target, options);
}
void L1LossImpl::pretty_print(std::ostream& os) const { os << "L1Loss()"; }

SmoothL1LossImpl::SmoothL1LossImpl(SmoothL1LossOptions options) : options(options) {
  KILN_CHECK(options.beta >= 0, "SmoothL1Loss", "beta must not be negative, got ", options.beta);
}
Tensor SmoothL1LossImpl::forward(const Tensor& input, const Tensor& target) {
  return functional::smooth_l1_loss(input, target, options);
}
void SmoothL1LossImpl::pretty_print(std::ostream& os) const { os << "SmoothL1Loss()"; }

HuberLossImpl::HuberLossImpl(HuberLossOptions options) : options(options) {
  KILN_CHECK(options.delta > 0, "HuberLoss", "delta must be positive, got ", options.delta);
}
Tensor HuberLossImpl::forward(const Tensor& input, const Tensor& target) {
  return functional::huber_loss(input, target, options);
}
void HuberLossImpl::pretty_print(std::ostream& os) const { os << "HuberLoss()"; }

KLDivLossImpl::KLDivLossImpl(KLDivLossOptions options) : options(options) {}
Tensor KLDivLossImpl::forward(const Tensor& input, const Tensor& target) {
  return functional::kl_div(input, target, options);
}
void KLDivLossImpl::pretty_print(std::ostream& os) const { os << "KLDivLoss()"; }

}  // namespace kiln::nn
