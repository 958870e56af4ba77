// Sequential and ModuleList: registration under "0", "1", ... and Sequential's forward.
#include "kiln/nn/container.h"

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

const std::shared_ptr<Module>& ModuleListImpl::operator[](size_t index) const {
  KILN_CHECK(index < modules_.size(), "ModuleList", "index ", index, " is out of range for ", modules_.size(),
             " modules");
  return modules_[index];
}

}  // namespace kiln::nn
