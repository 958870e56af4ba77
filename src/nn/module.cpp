// kiln::nn::Module: registration, listings, train/eval, to(), zero_grad and printing.
#include "kiln/nn/module.h"

#include <cxxabi.h>

#include <cstdlib>
#include <sstream>
#include <typeinfo>
#include <unordered_set>

#include "kiln/autograd.h"

namespace kiln::nn {
namespace {

// "kiln::nn::LinearImpl" -> "Linear", "kiln::models::BasicBlockImpl" -> "BasicBlock".
std::string type_name(const std::type_info& info) {
  int status = 0;
  char* demangled = abi::__cxa_demangle(info.name(), nullptr, nullptr, &status);
  std::string name = status == 0 && demangled ? demangled : info.name();
  std::free(demangled);
  if (auto pos = name.rfind("::"); pos != std::string::npos) name = name.substr(pos + 2);
  if (name.size() > 4 && name.ends_with("Impl")) name.resize(name.size() - 4);
  return name;
}

bool taken(const auto& list, const std::string& name) {
  for (const auto& [n, v] : list)
    if (n == name) return true;
  return false;
}

// `name` is free for a new entry of one kind: not empty, no '.', and not taken by an entry of
// another kind (`others`). Taken by the same kind, a parameter or buffer is replaced (as
// Python's register_parameter and register_buffer do), a submodule is an error.
template <class... Lists>
void check_name(const std::string& name, const char* where, const Lists&... others) {
  KILN_CHECK(!name.empty(), where, "the name must not be empty");
  KILN_CHECK(name.find('.') == std::string::npos, where, "the name must not contain '.', got \"", name, "\"");
  KILN_CHECK(!(taken(others, name) || ...), where, "\"", name, "\" is already registered");
}

// PyTorch's remove_duplicate: a tensor registered under several names (a shared module, or
// register_parameter("w", other->weight)) is listed once, under the first name, so that an
// optimizer, zero_grad or gradient clipping sees it once. Identity is the TensorImpl, as in the
// optimizer's "appears more than once" check.
NamedTensors without_duplicates(NamedTensors all) {
  std::unordered_set<const TensorImpl*> seen;
  NamedTensors out;
  for (auto& [n, t] : all)
    if (seen.insert(t.impl()).second) out.emplace_back(std::move(n), std::move(t));
  return out;
}

// named_modules' walk, depth first; `memo` holds the modules already listed, so a module
// registered under two names (or reachable along two paths) keeps its first name.
void add_descendants(Module& m, const std::string& prefix, std::unordered_set<const Module*>& memo,
                     NamedModules& out) {
  for (const auto& [n, c] : m.named_children()) {
    if (!memo.insert(c.get()).second) continue;
    const std::string name = prefix.empty() ? n : prefix + "." + n;
    out.emplace_back(name, c);
    add_descendants(*c, name, memo, out);
  }
}

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& s : items) out += (out.empty() ? "" : ", ") + s;
  return out;
}

}  // namespace

namespace detail {
void set_data(Tensor& t, const Tensor& data) {
  KILN_CHECK(t.defined() && data.defined(), "set_data", "both tensors must be defined");
  TensorImpl* dst = t.impl();
  const TensorImpl* src = data.impl();
  dst->storage = src->storage;
  dst->sizes = src->sizes;
  dst->strides = src->strides;
  dst->offset = src->offset;
  dst->numel = src->numel;
  dst->dtype = src->dtype;
  dst->is_view = false;
  dst->view_base.reset();
  dst->view_history = src->storage->history.load();
}
}  // namespace detail

const std::string& Module::name() const {
  // Once, also when threads sharing the module ask at the same time (a const call that writes).
  std::call_once(name_once_, [this] {
    if (name_.empty()) name_ = type_name(typeid(*this));
  });
  return name_;
}

Tensor Module::register_parameter(const std::string& name, Tensor tensor, bool requires_grad) {
  check_name(name, "register_parameter", buffers_, children_);
  if (tensor.defined()) {
    if (!tensor.is_leaf()) tensor = tensor.detach();
    if (requires_grad || tensor.requires_grad()) tensor.requires_grad_(requires_grad);
  }
  if (Tensor* old = find_parameter(name)) *old = tensor;
  else parameters_.emplace_back(name, tensor);
  return tensor;
}

Tensor Module::register_buffer(const std::string& name, Tensor tensor, bool persistent) {
  check_name(name, "register_buffer", parameters_, children_);
  if (Tensor* old = find_buffer(name)) *old = tensor;
  else buffers_.emplace_back(name, tensor);
  if (persistent) non_persistent_.erase(name);
  else non_persistent_.insert(name);
  return tensor;
}

void Module::add_child(const std::string& name, std::shared_ptr<Module> module, bool replace) {
  const char* where = replace ? "replace_module" : "register_module";
  KILN_CHECK(module != nullptr, where, "submodule \"", name, "\" is empty");
  KILN_CHECK(module.get() != this, where, "a module cannot be its own child (\"", name, "\")");
  if (replace) {
    for (auto& [n, c] : children_)
      if (n == name) {
        c = std::move(module);
        return;
      }
    std::vector<std::string> names;
    for (const auto& [n, c] : children_) names.push_back(n);
    KILN_FAIL(where, "no submodule \"", name, "\" to replace (it has: ", names.empty() ? "none" : join(names), ")");
  }
  check_name(name, where, parameters_, buffers_, children_);
  children_.emplace_back(name, std::move(module));
}

Tensor* Module::find_parameter(const std::string& name) {
  for (auto& [n, t] : parameters_)
    if (n == name) return &t;
  return nullptr;
}

Tensor* Module::find_buffer(const std::string& name) {
  for (auto& [n, t] : buffers_)
    if (n == name) return &t;
  return nullptr;
}

// Own parameters, own buffers, then each child's: PyTorch's state_dict order, and (with only
// one kind) its named_parameters / named_buffers order. Every name is listed, a shared tensor
// under each of its names (as state_dict does); the listings drop the repeats.
void Module::collect(NamedTensors& out, const std::string& prefix, bool params, bool bufs, bool recurse,
                     bool persistent_only) const {
  if (params)
    for (const auto& [n, t] : parameters_)
      if (t.defined()) out.emplace_back(prefix + n, t);
  if (bufs)
    for (const auto& [n, t] : buffers_)
      if (t.defined() && !(persistent_only && non_persistent_.count(n))) out.emplace_back(prefix + n, t);
  if (recurse)
    for (const auto& [n, child] : children_) child->collect(out, prefix + n + ".", params, bufs, true, persistent_only);
}

NamedTensors Module::named_parameters(bool recurse) const {
  NamedTensors out;
  collect(out, "", true, false, recurse);
  return without_duplicates(std::move(out));
}

std::vector<Tensor> Module::parameters(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& [n, t] : named_parameters(recurse)) out.push_back(t);
  return out;
}

NamedTensors Module::named_buffers(bool recurse) const {
  NamedTensors out;
  collect(out, "", false, true, recurse);
  return without_duplicates(std::move(out));
}

std::vector<Tensor> Module::buffers(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& [n, t] : named_buffers(recurse)) out.push_back(t);
  return out;
}

std::vector<std::shared_ptr<Module>> Module::children() const {
  std::vector<std::shared_ptr<Module>> out;
  for (const auto& [n, c] : named_children()) out.push_back(c);
  return out;
}

NamedModules Module::named_children() const {
  std::unordered_set<const Module*> seen;
  NamedModules out;
  for (const auto& [n, c] : children_)
    if (seen.insert(c.get()).second) out.emplace_back(n, c);
  return out;
}

NamedModules Module::named_modules(const std::string& prefix, bool include_self) {
  NamedModules out;
  if (include_self) {
    auto self = weak_from_this().lock();
    KILN_CHECK(self != nullptr, "named_modules",
               "include_self needs the module to be owned by a shared_ptr or holder");
    out.emplace_back(prefix, self);
  }
  std::unordered_set<const Module*> memo{this};
  add_descendants(*this, prefix, memo, out);
  return out;
}

std::vector<std::shared_ptr<Module>> Module::modules(bool include_self) {
  std::vector<std::shared_ptr<Module>> out;
  for (auto& [n, m] : named_modules("", include_self)) out.push_back(m);
  return out;
}

void Module::apply(const std::function<void(Module&)>& fn) {
  apply([&fn](const std::string&, Module& m) { fn(m); });
}

void Module::apply(const std::function<void(const std::string&, Module&)>& fn, const std::string& prefix) {
  fn(prefix, *this);
  std::unordered_set<const Module*> memo{this};
  NamedModules all;
  add_descendants(*this, prefix, memo, all);
  for (auto& [n, m] : all) fn(n, *m);
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [n, c] : children_) c->train(on);
}

void Module::convert_tensors(const std::function<Tensor(const Tensor&)>& fn) {
  NoGradGuard no_grad;
  auto convert = [&](Tensor& t) {
    if (!t.defined()) return;
    const Tensor converted = fn(t.detach());
    if (!converted.defined()) return;
    const Tensor grad = t.grad();
    detail::set_data(t, converted);
    if (grad.defined()) {
      const Tensor g = fn(grad);
      t.set_grad(g.defined() ? g : grad);
    }
  };
  for (auto& [n, t] : parameters_) convert(t);
  for (auto& [n, t] : buffers_) convert(t);
  for (auto& [n, c] : children_) c->convert_tensors(fn);
}

namespace {

// Module::to's conversion: integer and bool tensors (num_batches_tracked) keep their dtype, as in PyTorch.
std::function<Tensor(const Tensor&)> moved(std::optional<Device> device, std::optional<ScalarType> dtype,
                                           bool non_blocking = false) {
  if (device) device = device->resolved();
  return [=](const Tensor& t) {
    const ScalarType want = dtype && t.is_floating_point() ? *dtype : t.dtype();
    const Device where = device.value_or(t.device());
    return want == t.dtype() && where == t.device() ? Tensor() : t.to(where, want, non_blocking);
  };
}

void check_float(ScalarType dtype) {
  KILN_CHECK(kiln::is_floating_point(dtype), "Module::to", "only floating-point dtypes are accepted, got ", dtype);
}

}  // namespace

void Module::to(Device device, bool non_blocking) { convert_tensors(moved(device, std::nullopt, non_blocking)); }
void Module::to(ScalarType dtype) {
  check_float(dtype);
  convert_tensors(moved(std::nullopt, dtype));
}
void Module::to(Device device, ScalarType dtype, bool non_blocking) {
  check_float(dtype);
  convert_tensors(moved(device, dtype, non_blocking));
}
void Module::to(MemoryFormat format) {
  convert_tensors([format](const Tensor& t) {
    const bool applies = t.dim() == 4 && t.is_floating_point() && !t.is_contiguous(format);
    return applies ? t.contiguous(format) : Tensor();
  });
}

void Module::zero_grad(bool set_to_none) {
  NoGradGuard no_grad;
  for (auto& t : parameters()) {
    Tensor g = t.grad();
    if (!g.defined()) continue;
    if (set_to_none) {
      t.set_grad(Tensor());
    } else {
      g.zero_();
    }
  }
}

NamedTensors Module::ordered_state_dict() const {
  NamedTensors out;
  collect(out, "", true, true, true, true);
  for (auto& [n, t] : out) t = t.detach();
  return out;
}

std::map<std::string, Tensor> Module::state_dict() const {
  std::map<std::string, Tensor> out;
  for (auto& [n, t] : ordered_state_dict()) out.emplace(n, t);
  return out;
}

LoadStateDictResult Module::load_state_dict(const std::map<std::string, Tensor>& state, bool strict) {
  NamedTensors own;
  collect(own, "", true, true, true, true);
  LoadStateDictResult result;
  std::vector<std::string> mismatches;
  std::map<std::string, bool> expected;
  for (auto& [name, t] : own) {
    expected[name] = true;
    auto it = state.find(name);
    if (it == state.end()) {
      if (!name.ends_with("num_batches_tracked")) result.missing_keys.push_back(name);
      continue;
    }
    const Tensor& v = it->second;
    if (!v.defined()) {
      mismatches.push_back(kiln::detail::cat("undefined tensor for ", name));
    } else if (v.shape() != t.shape()) {
      mismatches.push_back(kiln::detail::cat("shape mismatch for ", name, ": expected ", t.shape(), ", got ", v.shape()));
    } else if (v.dtype() != t.dtype() && (v.is_floating_point() != t.is_floating_point() || v.dtype() == kBool ||
                                          t.dtype() == kBool)) {
      // Another float type is cast (PyTorch's copy_: a float16 checkpoint loads into a float32
      // model), an integer one likewise; a float for an integer (or bool) is another tensor.
      mismatches.push_back(kiln::detail::cat("dtype mismatch for ", name, ": expected ", t.dtype(), ", got ", v.dtype()));
    }
  }
  for (const auto& [name, v] : state)
    if (!expected.count(name)) result.unexpected_keys.push_back(name);

  std::vector<std::string> problems;
  if (strict && !result.missing_keys.empty()) problems.push_back("missing keys: " + join(result.missing_keys));
  if (strict && !result.unexpected_keys.empty())
    problems.push_back("unexpected keys: " + join(result.unexpected_keys));
  problems.insert(problems.end(), mismatches.begin(), mismatches.end());
  if (!problems.empty()) {
    std::string msg;
    for (const auto& p : problems) msg += (msg.empty() ? "" : "; ") + p;
    KILN_FAIL("load_state_dict", msg);
  }
  // Everything was checked first, so a failed load changes nothing.
  NoGradGuard no_grad;
  for (auto& [name, t] : own) {
    auto it = state.find(name);
    if (it != state.end()) t.copy_(it->second);
  }
  return result;
}

void Module::pretty_print(std::ostream& os) const { os << name() << "()"; }

// Every registered name, a shared child under each (as PyTorch's repr).
void Module::print_tree(std::ostream& os, const Module& m, int indent) {
  if (m.children_.empty()) {
    m.pretty_print(os);
    return;
  }
  os << m.name() << "(\n";
  std::string pad(indent + 2, ' ');
  for (const auto& [n, c] : m.children_) {
    os << pad << "(" << n << "): ";
    print_tree(os, *c, indent + 2);
    os << "\n";
  }
  os << std::string(indent, ' ') << ")";
}

std::ostream& operator<<(std::ostream& os, const Module& module) {
  Module::print_tree(os, module, 0);
  return os;
}

}  // namespace kiln::nn
