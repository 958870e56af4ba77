// Recording ops on the tape: saved tensors, edges, in-place checks and broadcast reduction.
#include <atomic>

#include "autograd/node.h"
#include "core/tensor_util.h"
#include "kiln/ops.h"

namespace kiln::autograd {

uint64_t next_sequence_nr() {
  static std::atomic<uint64_t> counter{0};
  return counter.fetch_add(1, std::memory_order_relaxed);
}

SavedTensor::SavedTensor(const Tensor& t) {
  if (!t.defined()) return;
  tensor_ = alias_detached(t);
  version_ = t.version();
}

Tensor SavedTensor::get(const char* node) const {
  if (tensor_.defined() && tensor_.version() != version_)
    KILN_FAIL("backward", "a tensor that ", node, " saved for the backward pass was modified in place "
              "afterwards (its version is ", tensor_.version(), ", expected ", version_,
              "); use an out-of-place op or clone() it first");
  return tensor_;
}

bool needs_grad(std::initializer_list<const Tensor*> inputs) {
  if (!is_grad_enabled()) return false;
  for (const Tensor* t : inputs)
    if (t->defined() && t->requires_grad()) return true;
  return false;
}

bool needs_grad(const std::vector<Tensor>& inputs) {
  if (!is_grad_enabled()) return false;
  for (const Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

Edge gradient_edge(const Tensor& t) {
  if (!t.defined() || !t.requires_grad()) return {};
  AutogradMeta& meta = t.impl()->autograd_meta();
  if (meta.grad_fn) return {meta.grad_fn, meta.output_nr};
  std::shared_ptr<Node> acc = meta.grad_accumulator.lock();
  if (!acc) {
    acc = std::make_shared<AccumulateGrad>(t.impl_ptr());
    meta.grad_accumulator = acc;
  }
  return {acc, 0};
}

namespace {
void check_view_current(const Tensor& t, const char* name) {
  const TensorImpl& impl = *t.impl();
  if (impl.is_view && impl.autograd && impl.autograd->grad_fn && impl.view_version != t.version())
    KILN_FAIL(name, "an input is a view whose base was modified in place after the view was taken; "
              "autograd cannot give its gradient. Take the view again after the in-place op");
}

void attach(const std::shared_ptr<FunctionNode>& node, const Tensor& output) {
  AutogradMeta& meta = output.impl()->autograd_meta();
  // After an in-place op, a tensor that retains its grad keeps the gradient of its new value
  // (as in PyTorch): its retain_grad hook moves to the new node.
  if (auto* old = meta.retains_grad ? dynamic_cast<FunctionNode*>(meta.grad_fn.get()) : nullptr) {
    node->pre_hooks = std::move(old->pre_hooks);
    old->pre_hooks.clear();
  }
  meta.requires_grad = true;
  meta.grad_fn = node;
  meta.output_nr = 0;
  output.impl()->view_version = output.version();
}
}  // namespace

void record(const char* name, std::initializer_list<const Tensor*> inputs, const Tensor& output,
            BackwardFn backward) {
  auto node = std::make_shared<FunctionNode>(name, std::move(backward));
  node->next_edges.reserve(inputs.size());
  for (const Tensor* t : inputs) {
    if (t->defined() && t->requires_grad()) check_view_current(*t, name);
    node->next_edges.push_back(gradient_edge(*t));
  }
  attach(node, output);
}

void record(const char* name, const std::vector<Tensor>& inputs, const Tensor& output, BackwardFn backward) {
  auto node = std::make_shared<FunctionNode>(name, std::move(backward));
  node->next_edges.reserve(inputs.size());
  for (const Tensor& t : inputs) {
    if (t.defined() && t.requires_grad()) check_view_current(t, name);
    node->next_edges.push_back(gradient_edge(t));
  }
  attach(node, output);
}

void check_inplace(const Tensor& self, const char* op, bool will_record) {
  if (is_grad_enabled() && self.requires_grad() && self.is_leaf())
    KILN_FAIL(op, "a leaf tensor that requires grad cannot be changed in place while grad mode is on "
              "(use kiln::NoGradGuard, or an out-of-place op)");
  if (will_record && self.impl()->is_view)
    KILN_FAIL(op, "in-place changes to a view are not recorded by autograd in this version; "
              "use the out-of-place op, or make the change under kiln::NoGradGuard");
}

Tensor sum_to(const Tensor& grad, const Shape& shape) {
  if (grad.shape() == shape) return grad;
  const int64_t lead = grad.dim() - static_cast<int64_t>(shape.size());
  Shape dims;
  for (int64_t d = 0; d < grad.dim(); ++d)
    if (d < lead || (shape[d - lead] == 1 && grad.shape()[d] != 1)) dims.push_back(d);
  Tensor r = dims.empty() ? grad : sum(grad, dims, /*keepdim=*/true);
  return lead > 0 || r.shape() != shape ? r.reshape(shape) : r;
}

Tensor grad_for(const Tensor& grad, const Tensor& input) {
  Tensor g = sum_to(grad, input.shape());
  return g.dtype() == input.dtype() ? g : g.to(input.dtype());
}

}  // namespace kiln::autograd
