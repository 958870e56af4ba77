// Loss modules (torch::nn::CrossEntropyLoss, NLLLoss, MSELoss, BCELoss, BCEWithLogitsLoss, L1Loss,
// SmoothL1Loss, HuberLoss, KLDivLoss): the functional
// losses with their options kept. A weight (and pos_weight) is a buffer, so module.to(device)
// moves it, as torch's.
#pragma once

#include "kiln/nn/functional.h"
#include "kiln/nn/pimpl.h"

namespace kiln::nn {

using CrossEntropyLossOptions = functional::CrossEntropyFuncOptions;
using NLLLossOptions = functional::NLLLossFuncOptions;
using MSELossOptions = functional::MSELossFuncOptions;
using BCELossOptions = functional::BinaryCrossEntropyFuncOptions;
using BCEWithLogitsLossOptions = functional::BinaryCrossEntropyWithLogitsFuncOptions;
using L1LossOptions = functional::L1LossFuncOptions;
using SmoothL1LossOptions = functional::SmoothL1LossFuncOptions;
using HuberLossOptions = functional::HuberLossFuncOptions;
using KLDivLossOptions = functional::KLDivFuncOptions;

#define KILN_LOSS_MODULE(Name)                                  \
  class Name##Impl : public Module {                            \
   public:                                                      \
    explicit Name##Impl(Name##Options options = {});            \
    Tensor forward(const Tensor& input, const Tensor& target);  \
    void pretty_print(std::ostream& os) const override;         \
                                                                \
    Name##Options options;                                      \
  };                                                            \
  KILN_MODULE(Name)
KILN_LOSS_MODULE(CrossEntropyLoss);
KILN_LOSS_MODULE(NLLLoss);
KILN_LOSS_MODULE(MSELoss);
KILN_LOSS_MODULE(BCELoss);
KILN_LOSS_MODULE(BCEWithLogitsLoss);
KILN_LOSS_MODULE(L1Loss);
KILN_LOSS_MODULE(SmoothL1Loss);
KILN_LOSS_MODULE(HuberLoss);
KILN_LOSS_MODULE(KLDivLoss);
#undef KILN_LOSS_MODULE

}  // namespace kiln::nn
