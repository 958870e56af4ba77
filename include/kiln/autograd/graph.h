// torch.autograd.graph's saved-tensor hooks: what the graph keeps of each tensor an op saves for
// its backward pass, chosen by the code that runs the forward.
#pragma once

#include <any>
#include <functional>
#include <memory>

#include "kiln/tensor.h"

namespace kiln::autograd::graph {

// pack(t) is called for each tensor an op recorded on this thread saves for backward while the
// guard is alive, and the graph keeps what it returns instead of the tensor; unpack(that) is
// called when backward needs the tensor and must give back one of the same values, shape, dtype
// and device (torch.autograd.graph.saved_tensors_hooks). Guards nest: the innermost applies. A
// tensor is packed by the hooks in effect when it was saved, whatever is in effect when it is
// unpacked. In a backward pass with create_graph the tensor unpacked takes the saved tensor's
// history, as without hooks. pack gets the tensor's values without its history, when its op is
// recorded. An in-place change to a saved tensor after it was packed is not checked (as in torch):
// what pack keeps should be a copy (SaveOnCpu's off the CPU) or made again (checkpoint's). An
// exception from a hook propagates from the op or from backward. Tensors saved by a custom
// function's ctx->save_for_backward are packed too.
class SavedTensorsHooks {
 public:
  using PackHook = std::function<std::any(const Tensor&)>;
  using UnpackHook = std::function<Tensor(const std::any&)>;
  SavedTensorsHooks(PackHook pack, UnpackHook unpack);
  ~SavedTensorsHooks();
  SavedTensorsHooks(const SavedTensorsHooks&) = delete;
  SavedTensorsHooks& operator=(const SavedTensorsHooks&) = delete;

 private:
  const void* pushed_ = nullptr;  // its hooks on this thread's stack
};

// torch.autograd.graph.save_on_cpu: while alive, tensors saved for backward are kept in host
// memory (page-locked with pin_memory, so that the copies go asynchronously) and copied back to
// their device when backward needs them: a model's activations off the GPU's memory, for the
// price of two copies each.
class SaveOnCpu {
 public:
  explicit SaveOnCpu(bool pin_memory = false);

 private:
  SavedTensorsHooks hooks_;
};

}  // namespace kiln::autograd::graph
