// conv2d through cuDNN's graph (backend) API, the API PyTorch's convolutions use, opt-in with
// KILN_CUDNN_API=graph (the default, "legacy", is conv.cpp's cudnnConvolution* path). Not yet run on
// a GPU: scripts/gpu-check.sh compares it with the legacy path.
#pragma once

#include <cudnn.h>

#include "backend/cuda/conv_plan.h"

namespace kiln::backend::cuda {

// One convolution as the graph API is given it: its three operands dense in `layout` and 16-byte
// aligned (conv.cpp's prepare()), sizes in logical NCHW order (w: C_out, C_in / groups, kH, kW).
struct GraphConv {
  conv_plan::Kind kind;
  ScalarType dtype;  // float32, float16 or bfloat16
  conv_plan::Layout layout;
  conv_plan::Dims x, w, y;
  void *xp = nullptr, *wp = nullptr, *yp = nullptr;
  const ConvAttrs* attrs = nullptr;
  bool allow_tf32 = false;
  bool deterministic = true;  // deterministic engines first (kiln::cudnn::deterministic())
};

// Whether KILN_CUDNN_API asks for the graph API: "graph" yes, "legacy" or unset no; anything else
// is an error naming the variable (read once).
bool graph_api_enabled();

// Runs `c` on `h`'s stream: the operation graph, the engine configs of heuristics mode A in
// conv_plan::engine_order, the first whose plan finalizes and runs kept per plan key and handle
// (so planned once per cuDNN handle: one per thread convolving at the same time). False when no
// engine takes the case, or none whose workspace memory is to be had (the caller runs the legacy
// API, for this geometry from now on; a warning says so once, with cuDNN's last refusal), or when
// the kept engine refuses this call; a failure other than a refusal throws naming the cuDNN call.
bool run_conv_graph(cudnnHandle_t h, const GraphConv& c, const conv_plan::PlanKey& key);

// Whether the graph API is known to have no engine for `key`'s geometry (then the caller need not
// prepare channels-last operands for it).
bool graph_has_no_engine(const conv_plan::PlanKey& key);

}  // namespace kiln::backend::cuda
