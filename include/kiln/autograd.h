// Autograd's public face: graph nodes, grad mode, autograd::grad and gradcheck.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kiln/tensor.h"

namespace kiln {

namespace autograd {

class Node;
struct Edge {
  std::shared_ptr<Node> fn;
  uint32_t input_nr = 0;
  bool valid() const { return fn != nullptr; }
};

// One recorded op: turns the gradient of its output into gradients of its inputs.
class Node {
 public:
  virtual ~Node() = default;
  virtual std::vector<Tensor> apply(std::vector<Tensor>&& grad_outputs) = 0;
  virtual std::string name() const = 0;
  virtual void release_saved() {}

  std::vector<Edge> next_edges;  // one per differentiable input
  uint64_t sequence_nr = 0;      // creation order; later nodes run first
};

bool is_grad_enabled();
void set_grad_enabled(bool enabled);

// Gradients of outputs with respect to inputs (which may be leaves or intermediate tensors),
// without touching any .grad(). grad_outputs default to ones for one-element outputs.
std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs = {}, bool retain_graph = false,
                         bool allow_unused = false);

// Compares backward() with central finite differences, input by input, element by element.
// Inputs should be float64. Throws kiln::Error describing the first mismatch when
// raise_exception is set; otherwise returns false.
struct GradcheckOptions {
  double eps = 1e-6;
  double atol = 1e-5;
  double rtol = 1e-3;
  bool raise_exception = true;
};
bool gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
               const std::vector<Tensor>& inputs, GradcheckOptions options = {});

}  // namespace autograd

// Disables recording while alive (torch::NoGradGuard).
class NoGradGuard {
 public:
  NoGradGuard() : prev_(autograd::is_grad_enabled()) { autograd::set_grad_enabled(false); }
  ~NoGradGuard() { autograd::set_grad_enabled(prev_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

// Enables or disables recording while alive (torch::AutoGradMode).
class AutoGradMode {
 public:
  explicit AutoGradMode(bool enabled) : prev_(autograd::is_grad_enabled()) {
    autograd::set_grad_enabled(enabled);
  }
  ~AutoGradMode() { autograd::set_grad_enabled(prev_); }
  AutoGradMode(const AutoGradMode&) = delete;
  AutoGradMode& operator=(const AutoGradMode&) = delete;

 private:
  bool prev_;
};

}  // namespace kiln
