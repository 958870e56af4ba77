// What ops use to record themselves on the tape: saved tensors with version checks, and record().
#pragma once

#include <functional>
#include <initializer_list>
#include <memory>
#include <vector>

#include "kiln/autograd.h"
#include "kiln/tensor.h"

namespace kiln::autograd {

// A tensor kept for backward, with the version it had, so that a later in-place change is caught.
// Backward formulas normally get it without history. In grad mode (a backward pass with
// create_graph) they get it with its history, as torch's SavedVariable, so that the formula's own
// ops are recorded through it: an input's own history, or, for an output of the op that saved
// it, that op's node (held weakly: no cycle); for a view of what an in-place op changed, its
// region of that op's output.
class SavedTensor {
 public:
  SavedTensor() = default;
  explicit SavedTensor(const Tensor& t);
  // Throws kiln::Error naming `node` if the tensor was changed in place since it was saved.
  Tensor get(const char* node) const;
  bool defined() const { return state_ != nullptr; }

 private:
  std::shared_ptr<SavedState> state_;
};

using BackwardFn = std::function<std::vector<Tensor>(const Tensor& grad)>;
// A multi-output op's: one gradient per output in (undefined for those that got none).
using MultiBackwardFn = std::function<std::vector<Tensor>(std::vector<Tensor>&& grads)>;

// True when grad mode is on and some input requires grad.
bool needs_grad(std::initializer_list<const Tensor*> inputs);
bool needs_grad(const std::vector<Tensor>& inputs);

// Records `output` as the result of a differentiable op. `backward` maps the output's gradient
// to one gradient per input (undefined for inputs that need none), each already in the input's
// shape and dtype. Only inputs that require grad get an edge.
void record(const char* name, std::initializer_list<const Tensor*> inputs, const Tensor& output,
            BackwardFn backward);
void record(const char* name, const std::vector<Tensor>& inputs, const Tensor& output, BackwardFn backward);
// record() for a view op (view, slice, permute, ...): `view` shares `source`'s storage, and its
// node says so, so that check_inplace finds a leaf that requires grad however many views lie
// between (a parameter that is itself a view of another tensor).
void record_view(const char* name, const Tensor& source, const Tensor& view, BackwardFn backward);

// For in-place ops: the tensor being changed must not have elements that share memory, nor (in
// grad mode) be a leaf that requires grad, a view of one, or a view taken under NoGradGuard of a
// base that requires grad. A stale view is refreshed first (by requires_grad()).
void check_inplace(const Tensor& self, const char* op);

// PyTorch's view regeneration. A view taken in grad mode whose base has since been changed in
// place with autograd recording (or which has no history while its base requires grad: taken
// before the base had any) would carry the base's old history, or none, while its values are
// the base's current ones: its history becomes "its region of the base as the base is now".
// Tensor::requires_grad() calls it (so needs_grad, record, check_inplace and the roots of
// backward all see the regenerated history); views taken under NoGradGuard stay without
// history, as in PyTorch.
void refresh_view(const Tensor& t);

// Records an in-place op on `self`. `inputs` are self's value before the op (its old history)
// and the other operands; `backward` maps the gradient of self's new value to theirs. When self
// is a view, the change is recorded on its base too, so gradients through the base stay right.
void record_inplace(const char* name, const Tensor& self, std::initializer_list<const Tensor*> inputs,
                    BackwardFn backward);

// Reduces a broadcast gradient back to `shape` (sums over the broadcast dims).
Tensor sum_to(const Tensor& grad, const Shape& shape);
// What a gradient must become for one input: summed over broadcast dims to its shape, cast to its
// dtype and moved to its device; kept by backward functions instead of the input itself.
struct InputMeta {
  Shape shape;
  ScalarType dtype;
  Device device;
  bool needs;  // the input requires grad; otherwise operator() gives an undefined tensor
  explicit InputMeta(const Tensor& t)
      : shape(t.shape()), dtype(t.dtype()), device(t.device()), needs(t.requires_grad()) {}
  Tensor operator()(const Tensor& grad) const;
};

}  // namespace kiln::autograd
