// kiln::nn::Module (libtorch's torch::nn::Module): registered parameters, buffers and submodules.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <ostream>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "kiln/tensor.h"

namespace kiln::nn {

// Ordered (name, value) pairs, in registration order (PyTorch's order).
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;
class Module;
using NamedModules = std::vector<std::pair<std::string, std::shared_ptr<Module>>>;

// What load_state_dict(strict = false) skipped (PyTorch returns the same two lists).
struct LoadStateDictResult {
  std::vector<std::string> missing_keys;
  std::vector<std::string> unexpected_keys;
};

// Parameters and buffers are Tensor handles shared between the module's registry and its
// members (`lin->weight`). Operations that change a tensor's dtype or device (to()) change the
// tensor behind the handle in place (set_data), so every handle, an optimizer's list included,
// sees the new tensor and a parameter stays the same leaf. Assigning a new Tensor to a member
// after registration does not change the registry (as in libtorch): register it again under its
// name, which replaces it (as Python's register_parameter), e.g. to tie weights:
//   head->weight = head->register_parameter("weight", embedding->weight);
class Module : public std::enable_shared_from_this<Module> {
 public:
  Module() = default;
  // `name` is what printing shows; empty means the class name without "Impl".
  explicit Module(std::string name) : name_(std::move(name)) {}
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // The module's type name for printing, e.g. "Linear".
  const std::string& name() const;

  // Registers a leaf parameter (a non-leaf is detached first) and returns its handle; a
  // parameter (buffer) of that name is replaced. An undefined tensor is allowed (an absent bias)
  // and is skipped by every listing.
  Tensor register_parameter(const std::string& name, Tensor tensor, bool requires_grad = true);
  // A non-persistent buffer (persistent = false: a table computed at construction, as rotary
  // frequencies) moves with the module but is not in state_dict(), as in PyTorch.
  Tensor register_buffer(const std::string& name, Tensor tensor, bool persistent = true);
  // Registers a submodule; returns what it was given (a holder or a shared_ptr).
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module) {
    add_child(name, module, false);
    return module;
  }
  template <class Holder>
    requires requires(const Holder& h) { h.ptr(); typename Holder::ContainedType; }
  Holder register_module(const std::string& name, Holder holder) {
    add_child(name, holder.ptr(), false);
    return holder;
  }
  // Puts `module` in the place of the registered submodule `name` (libtorch's replace_module),
  // and returns it: assign it to the member too (net->fc = net->replace_module("fc", Linear(4, 2))).
  // Assigning the member alone leaves the old one registered: parameters(), state_dict() and
  // to() would act on it while forward uses the new one.
  template <class M>
  std::shared_ptr<M> replace_module(const std::string& name, std::shared_ptr<M> module) {
    add_child(name, module, true);
    return module;
  }
  template <class Holder>
    requires requires(const Holder& h) { h.ptr(); typename Holder::ContainedType; }
  Holder replace_module(const std::string& name, Holder holder) {
    add_child(name, holder.ptr(), true);
    return holder;
  }

  // Each tensor (or module) once, under its first name, as PyTorch's remove_duplicate: a module
  // registered under two names, or a parameter registered again elsewhere, is listed once, so an
  // optimizer or gradient clipping sees it once. state_dict() still lists every name.
  std::vector<Tensor> parameters(bool recurse = true) const;
  NamedTensors named_parameters(bool recurse = true) const;
  std::vector<Tensor> buffers(bool recurse = true) const;
  NamedTensors named_buffers(bool recurse = true) const;
  // Direct submodules, each once under its first name (a module registered under two names is
  // listed once, as PyTorch's).
  std::vector<std::shared_ptr<Module>> children() const;
  NamedModules named_children() const;
  // This module (when owned by a shared_ptr) and every descendant, depth first, each once.
  std::vector<std::shared_ptr<Module>> modules(bool include_self = true);
  NamedModules named_modules(const std::string& prefix = "", bool include_self = true);

  // Calls fn on this module and every descendant, depth first (libtorch's order), each module
  // once, as named_modules lists them (for custom initialisation).
  void apply(const std::function<void(Module&)>& fn);
  void apply(const std::function<void(const std::string& name, Module&)>& fn, const std::string& prefix = "");

  // Sets training mode here and in every descendant.
  virtual void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }

  // Moves parameters and buffers (and gradients) to a device ("cuda": the current one); to(dtype)
  // converts only the floating-point ones, as PyTorch does. Handles keep referring to the
  // converted tensors (an optimizer made before the move updates the moved ones). non_blocking:
  // as Tensor::to.
  void to(Device device, bool non_blocking = false);
  void to(ScalarType dtype);
  void to(Device device, ScalarType dtype, bool non_blocking = false);
  // Lays out every 4-D floating-point parameter and buffer (and its gradient) in `format`, as
  // PyTorch's module.to(memory_format=...): after to(MemoryFormat::ChannelsLast) convolutions
  // read their weights, and write their weight gradients, as cuDNN's NHWC kernels want them
  // (no copy per call); the optimizers keep their state in the same layout.
  void to(MemoryFormat format);

  // Clears the gradients of all parameters: to undefined (set_to_none) or to zeros.
  void zero_grad(bool set_to_none = true);

  // Parameters and persistent buffers under their dotted names (detached, sharing storage).
  std::map<std::string, Tensor> state_dict() const;
  // The same entries in PyTorch's state_dict order (each module's parameters, then its
  // buffers, then its children).
  NamedTensors ordered_state_dict() const;
  // Copies values into the registered tensors under NoGradGuard. Names, shapes and dtypes are
  // checked and all problems are reported in one kiln::Error. With strict = false, missing
  // and unexpected keys are returned instead (shape and dtype mismatches are still errors). A
  // value of another floating-point (or integer) dtype is cast, as PyTorch's copy_ does; a float
  // for an integer or bool tensor, or the other way round, is a dtype mismatch.
  // A missing "num_batches_tracked" is not an error (older checkpoints lack it, as in PyTorch).
  LoadStateDictResult load_state_dict(const std::map<std::string, Tensor>& state, bool strict = true);

  // The part of the repr inside the brackets' line, e.g. "Linear(in_features=2, ...)".
  virtual void pretty_print(std::ostream& os) const;

  // The named parameter/buffer/child of this module only, or null/undefined.
  Tensor* find_parameter(const std::string& name);
  Tensor* find_buffer(const std::string& name);

 private:
  friend std::ostream& operator<<(std::ostream& os, const Module& module);
  static void print_tree(std::ostream& os, const Module& m, int indent);
  void add_child(const std::string& name, std::shared_ptr<Module> module, bool replace);
  // persistent_only: the buffers state_dict holds.
  void collect(NamedTensors& out, const std::string& prefix, bool params, bool bufs, bool recurse,
               bool persistent_only = false) const;
  // Replaces every parameter and buffer (and its gradient) by fn(it), here and in every
  // descendant, keeping the handles; fn returns an undefined tensor for "unchanged".
  void convert_tensors(const std::function<Tensor(const Tensor&)>& fn);

  mutable std::string name_;
  mutable std::once_flag name_once_;
  bool training_ = true;
  NamedTensors parameters_;
  NamedTensors buffers_;
  std::set<std::string> non_persistent_;  // names in buffers_ that state_dict leaves out
  NamedModules children_;
};

// PyTorch's repr: "Sequential(\n  (0): Linear(in_features=2, out_features=3, bias=True)\n)".
std::ostream& operator<<(std::ostream& os, const Module& module);

namespace detail {
// Replaces the tensor behind `t`'s handle by `data` (same TensorImpl, new storage, shape,
// strides, dtype); autograd state (requires_grad, the leaf's accumulator) stays. libtorch's set_data.
void set_data(Tensor& t, const Tensor& data);
}  // namespace detail

}  // namespace kiln::nn
