// The node classes the engine runs: a recorded op's backward function, and gradient accumulation into a leaf.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "autograd/function.h"
#include "autograd/streams.h"

namespace kiln::autograd {

uint64_t next_sequence_nr();

// A register_hook hook; removed ones stay where they are listed, skipped. output_nr: which output
// of its node the hooked tensor is (0 but for a multi-output custom function's).
struct TensorHook {
  uint64_t id = 0;
  uint32_t output_nr = 0;
  std::function<Tensor(const Tensor&)> fn;
  std::atomic<bool> removed{false};
};

// `g`, the gradient of output `output_nr`, through that output's hooks in order, each result
// checked against g's shape, dtype and device.
Tensor run_tensor_hooks(const std::vector<std::shared_ptr<TensorHook>>& hooks, Tensor g, uint32_t output_nr = 0);

class FunctionNode final : public Node {
 public:
  FunctionNode(const char* name, BackwardFn fn) : name_(name), fn_(std::move(fn)) {
    sequence_nr = next_sequence_nr();
  }
  // A node with several outputs (a custom function's): apply gets one gradient per output,
  // undefined for those that got none.
  FunctionNode(const char* name, MultiBackwardFn fn, uint32_t outputs)
      : num_outputs(outputs), name_(name), multi_fn_(std::move(fn)) {
    sequence_nr = next_sequence_nr();
  }
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override;
  std::string name() const override { return name_; }
  // Frees the closure with the tensors it saved. A node that saved none (a view's, add's, sum's)
  // keeps it, so a later backward may pass through it again, as in PyTorch. Under the node's lock,
  // as apply runs: two threads backpropagating through one graph cannot free a closure running.
  void release_saved() override {
    if (!saves_tensors) return;
    std::lock_guard lock(mutex_);
    fn_ = nullptr;
    multi_fn_ = nullptr;
  }
  // Whether the backward function holds saved tensors (record() tells, from the SavedTensors
  // made since the last node was recorded on this thread; a stray one only keeps this true).
  bool saves_tensors = true;
  // A view op's node (record_view): its one edge leads to the tensor the view was taken of.
  bool is_view = false;
  // How many outputs its op made (the engine's gradient slots; Edge::input_nr picks one).
  const uint32_t num_outputs = 1;
  // The stream its forward op ran on (current on the output's device when it was recorded):
  // backward runs the node there.
  StreamPlace place;
  // register_hook's hooks of the tensors this node made, run first on the incoming gradient of
  // their output, and hooks called with that gradient (after them) before apply (retain_grad).
  // Added and read under the node's hook lock: a thread may add one while another backpropagates
  // through the node.
  struct PreHook {
    uint32_t output_nr = 0;
    std::function<void(const Tensor&)> fn;
  };
  void add_tensor_hook(std::shared_ptr<TensorHook> hook);
  void add_pre_hook(PreHook hook);
  // Copies, so that a hook may add hooks; without a lock while the node has none (the usual case).
  std::vector<std::shared_ptr<TensorHook>> tensor_hooks() const;
  std::vector<PreHook> pre_hooks() const;
  // Moves output `output_nr`'s pre-hooks to output `to_nr` of `to` (after an in-place op,
  // retain_grad follows the new value).
  void move_pre_hooks(uint32_t output_nr, FunctionNode& to, uint32_t to_nr);

 private:
  const char* name_;
  std::mutex mutex_;  // held while fn_ runs or is freed
  BackwardFn fn_;
  MultiBackwardFn multi_fn_;
  mutable std::mutex hooks_mutex_;
  std::atomic<bool> has_hooks_{false};
  std::vector<std::shared_ptr<TensorHook>> tensor_hooks_;
  std::vector<PreHook> pre_hooks_;
};

class AccumulateGrad final : public Node {
 public:
  explicit AccumulateGrad(std::shared_ptr<TensorImpl> leaf) : leaf_(std::move(leaf)) {
    sequence_nr = UINT64_MAX;  // runs as soon as ready (its gradient is final then), as PyTorch's
  }
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override;
  std::string name() const override { return "AccumulateGrad"; }
  const std::shared_ptr<TensorImpl>& leaf() const { return leaf_; }

 private:
  std::shared_ptr<TensorImpl> leaf_;
};

// The edge a gradient for t flows along: its grad_fn, or its leaf's accumulator.
Edge gradient_edge(const Tensor& t);

}  // namespace kiln::autograd
