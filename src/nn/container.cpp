// Sequential and ModuleList: registration under "0", "1", ... and Sequential's forward.
#include "kiln/nn/container.h"

namespace kiln::nn {

void SequentialImpl::push_back(AnyModule module) { push_back(std::to_string(modules_.size()), std::move(module)); }

void SequentialImpl::push_back(const std::string& name, AnyModule module) {
  KILN_CHECK(!module.is_empty(), "Sequential::push_back", "the module is empty");
  register_module(name, module.ptr());
  modules_.push_back(std::move(module));
}

Tensor SequentialImpl::forward(const Tensor& x) {
  Tensor y = x;
  for (const auto& m : modules_) y = m(y);
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
