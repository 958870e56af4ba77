// Sequential, ModuleList and ModuleDict: registration of their children and Sequential's forward.
#include "kiln/nn/container.h"

#include <algorithm>
#include <typeinfo>

#include "kiln/nn/activation.h"
#include "kiln/nn/batchnorm.h"

namespace kiln::nn {

void SequentialImpl::push_back(AnyModule module) { push_back(std::to_string(modules_.size()), std::move(module)); }

void SequentialImpl::push_back(const std::string& name, AnyModule module) {
  KILN_CHECK(!module.is_empty(), "Sequential::push_back", "the module is empty");
  register_module(name, module.ptr());
  modules_.push_back(std::move(module));
}

namespace {
template <class T>
T* exactly(const AnyModule& m) {
  return typeid(*m) == typeid(T) ? static_cast<T*>(m.operator->()) : nullptr;
}
}  // namespace

// A BatchNorm2d followed by a ReLU runs as batch_norm_relu: the same output and gradients, one
// pass over the activation instead of two (only for these exact types, whose forwards are known).
Tensor SequentialImpl::forward(const Tensor& x) {
  Tensor y = x;
  for (size_t i = 0; i < modules_.size(); ++i) {
    if (auto* bn = exactly<BatchNorm2dImpl>(modules_[i]);
        bn && i + 1 < modules_.size() && exactly<ReLUImpl>(modules_[i + 1])) {
      y = bn->forward_relu(y);
      ++i;
      continue;
    }
    y = modules_[i](y);
  }
  return y;
}

const AnyModule& SequentialImpl::operator[](size_t index) const {
  KILN_CHECK(index < modules_.size(), "Sequential", "index ", index, " is out of range for ", modules_.size(),
             " modules");
  return modules_[index];
}

void ModuleListImpl::push_back(std::shared_ptr<Module> module) {
  KILN_CHECK(module != nullptr, "ModuleList::push_back", "the module is empty");
  register_module(std::to_string(modules_.size()), module);
  modules_.push_back(std::move(module));
}

ModuleDictImpl::ModuleDictImpl(const std::vector<Item>& modules) {
  for (const auto& [key, module] : modules) insert(key, module);
}

void ModuleDictImpl::insert(const std::string& key, std::shared_ptr<Module> module) {
  KILN_CHECK(module != nullptr, "ModuleDict::insert", "the module for \"", key, "\" is empty");
  const size_t i = index_of(key);
  if (i == items_.size()) {
    register_module(key, module);
    items_.emplace_back(key, std::move(module));
  } else {
    replace_module(key, module);
    items_[i].second = std::move(module);
  }
}

size_t ModuleDictImpl::index_of(const std::string& key) const {
  return static_cast<size_t>(
      std::find_if(items_.begin(), items_.end(), [&](const Item& i) { return i.first == key; }) - items_.begin());
}

bool ModuleDictImpl::contains(const std::string& key) const { return index_of(key) < items_.size(); }

const std::shared_ptr<Module>& ModuleDictImpl::operator[](const std::string& key) const {
  const size_t i = index_of(key);
  KILN_CHECK(i < items_.size(), "ModuleDict", "no module \"", key, "\"; it has ", items_.size(), " keys");
  return items_[i].second;
}

std::vector<std::string> ModuleDictImpl::keys() const {
  std::vector<std::string> out;
  for (const Item& i : items_) out.push_back(i.first);
  return out;
}

const std::shared_ptr<Module>& ModuleListImpl::operator[](size_t index) const {
  KILN_CHECK(index < modules_.size(), "ModuleList", "index ", index, " is out of range for ", modules_.size(),
             " modules");
  return modules_[index];
}

}  // namespace kiln::nn
