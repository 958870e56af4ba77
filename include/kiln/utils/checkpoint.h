// Activation checkpointing (torch.utils.checkpoint, use_reentrant=False): a region's activations
// are not kept for the backward pass but computed again when backward reaches the region.
#pragma once

#include <functional>
#include <vector>

#include "kiln/nn/container.h"
#include "kiln/tensor.h"

namespace kiln::utils {

using CheckpointFunction = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

// Runs fn(inputs) and returns its outputs with their history, like fn(inputs) itself, but the
// tensors fn's ops save for backward are not kept: when backward first needs one of them it runs
// fn again on the same inputs (grad mode on, the autocast state of the first call, and with
// preserve_rng_state the same random numbers: dropout draws the same mask) and takes the tensors
// that run saves. Parameters inside fn get their gradients as they would without checkpointing;
// autograd::grad and create_graph work through it, and inside fn. Costs one more forward of fn per
// backward; saves the memory of what fn's ops saved, which for a model's blocks is most of its
// activations. The outputs may be changed in place afterwards (nothing of them is kept).
//
// fn must run the same ops each time (the recomputation is checked: as many tensors saved, of the
// same shapes, dtypes and devices, else a kiln::Error in backward naming the first that differs),
// and is kept until the graph is freed: what it captures by reference must live that long. An
// input changed in place before backward is an error there, and so is an op of fn changing what an
// earlier op of fn saved. Under NoGradGuard it is fn(inputs).
std::vector<Tensor> checkpoint(const CheckpointFunction& fn, const std::vector<Tensor>& inputs,
                               bool preserve_rng_state = true);
// One tensor in, one out.
Tensor checkpoint(const std::function<Tensor(const Tensor&)>& fn, const Tensor& input, bool preserve_rng_state = true);

// torch.utils.checkpoint.checkpoint_sequential: `seq`'s modules in `segments` consecutive groups
// (the sizes as torch's: size / segments each, the last taking the rest), each checkpointed but
// the last, which runs as usual (its activations are needed at once).
Tensor checkpoint_sequential(const nn::Sequential& seq, int64_t segments, const Tensor& input,
                             bool preserve_rng_state = true);

}  // namespace kiln::utils
