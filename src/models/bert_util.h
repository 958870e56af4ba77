// What bert.cpp, bert_heads.cpp and bert_pretrained.cpp share: the activation by HF's name and HF's initialisation.
#pragma once

#include "kiln/models/bert.h"

namespace kiln::models::detail {

// "gelu" -> GELU (erf), "gelu_new" / "gelu_pytorch_tanh" -> GELUTanh, "relu" -> ReLU.
Activation bert_activation(const std::string& hidden_act);

// "int64 [2, 3]", for error messages.
std::string describe(const Tensor& t);
// Throws "[BertModel] <what> must be in [0, <limit_name> <limit>), got values in [lo, hi]".
void check_ids(const Tensor& ids, int64_t limit, const char* what, const char* limit_name);

// HF's BertPreTrainedModel._init_weights over every submodule of `model`.
void init_bert_weights(nn::Module& model, const BertConfig& config);

}  // namespace kiln::models::detail
