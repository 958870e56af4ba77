// AnyModule, Sequential and ModuleList (torch::nn's containers).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "kiln/nn/pimpl.h"

namespace kiln::nn {

namespace detail {
template <class T>
struct impl_of {
  using type = T;
};
template <class T>
struct impl_of<std::shared_ptr<T>> {
  using type = T;
};
template <class T>
  requires requires { typename T::ContainedType; }
struct impl_of<T> {
  using type = typename T::ContainedType;
};
template <class M>
std::shared_ptr<typename impl_of<std::decay_t<M>>::type> module_ptr(M&& m) {
  if constexpr (requires { m.ptr(); }) {
    return m.ptr();
  } else {
    return m;
  }
}
}  // namespace detail

// Any module with a `Tensor forward(Tensor)`, type-erased (torch::nn::AnyModule): `m(x)`
// runs its forward, `m->parameters()` reaches the Module, `m.get<LinearImpl>()` the concrete type.
class AnyModule {
 public:
  AnyModule() = default;
  template <class M>
    requires(!std::is_same_v<std::decay_t<M>, AnyModule>) && requires(M m, Tensor x) {
      { detail::module_ptr(m)->forward(x) } -> std::convertible_to<Tensor>;
    }
  AnyModule(M&& module) {
    auto p = detail::module_ptr(std::forward<M>(module));
    KILN_CHECK(p != nullptr, "AnyModule", "the module is empty");
    module_ = p;
    forward_ = [raw = p.get()](const Tensor& x) -> Tensor { return raw->forward(x); };
  }

  Tensor forward(const Tensor& x) const {
    KILN_CHECK(module_ != nullptr, "AnyModule::forward", "the AnyModule is empty");
    return forward_(x);
  }
  Tensor operator()(const Tensor& x) const { return forward(x); }
  Module* operator->() const { return get_module(); }
  Module& operator*() const { return *get_module(); }
  const std::shared_ptr<Module>& ptr() const { return module_; }
  bool is_empty() const { return module_ == nullptr; }
  // The concrete module, or null when it is not a T.
  template <class T>
  T* get() const {
    return dynamic_cast<T*>(module_.get());
  }

 private:
  Module* get_module() const {
    KILN_CHECK(module_ != nullptr, "AnyModule", "the AnyModule is empty");
    return module_.get();
  }
  std::shared_ptr<Module> module_;
  std::function<Tensor(const Tensor&)> forward_;
};

inline std::ostream& operator<<(std::ostream& os, const AnyModule& m) {
  return m.is_empty() ? (os << "(empty AnyModule)") : (os << *m);
}

// Runs its modules in order; they are registered as "0", "1", ... (torch::nn::Sequential).
class SequentialImpl : public Module {
 public:
  SequentialImpl() = default;
  template <class... Modules>
    requires(sizeof...(Modules) > 0)
  explicit SequentialImpl(Modules&&... modules) {
    (push_back(AnyModule(std::forward<Modules>(modules))), ...);
  }

  void push_back(AnyModule module);
  void push_back(const std::string& name, AnyModule module);
  Tensor forward(const Tensor& x);

  size_t size() const { return modules_.size(); }
  bool is_empty() const { return modules_.empty(); }
  const AnyModule& operator[](size_t index) const;
  // The module at index as a T (e.g. Conv2dImpl); throws if it is not one.
  template <class T>
  std::shared_ptr<T> ptr(size_t index) const {
    auto p = std::dynamic_pointer_cast<T>((*this)[index].ptr());
    KILN_CHECK(p != nullptr, "Sequential::ptr", "module ", index, " is a ", (*this)[index]->name());
    return p;
  }
  auto begin() const { return modules_.begin(); }
  auto end() const { return modules_.end(); }

 private:
  std::vector<AnyModule> modules_;
};
KILN_MODULE(Sequential);

// Holds modules as registered children "0", "1", ...; no forward (torch::nn::ModuleList).
class ModuleListImpl : public Module {
 public:
  ModuleListImpl() = default;
  template <class... Modules>
    requires(sizeof...(Modules) > 0)
  explicit ModuleListImpl(Modules&&... modules) {
    (push_back(detail::module_ptr(std::forward<Modules>(modules))), ...);
  }

  void push_back(std::shared_ptr<Module> module);
  template <class Holder>
    requires requires(const Holder& h) { h.ptr(); typename Holder::ContainedType; }
  void push_back(const Holder& holder) {
    push_back(std::shared_ptr<Module>(holder.ptr()));
  }

  size_t size() const { return modules_.size(); }
  bool is_empty() const { return modules_.empty(); }
  const std::shared_ptr<Module>& operator[](size_t index) const;
  template <class T>
  std::shared_ptr<T> ptr(size_t index) const {
    auto p = std::dynamic_pointer_cast<T>((*this)[index]);
    KILN_CHECK(p != nullptr, "ModuleList::ptr", "module ", index, " is a ", (*this)[index]->name());
    return p;
  }
  auto begin() const { return modules_.begin(); }
  auto end() const { return modules_.end(); }

 private:
  std::vector<std::shared_ptr<Module>> modules_;
};
KILN_MODULE(ModuleList);

// Holds modules under names, in the order inserted, as registered children of those names; no
// forward (torch::nn::ModuleDict).
class ModuleDictImpl : public Module {
 public:
  using Item = std::pair<std::string, std::shared_ptr<Module>>;
  ModuleDictImpl() = default;
  explicit ModuleDictImpl(const std::vector<Item>& modules);

  // Adds `module` under `key`, or replaces the one there in its place (torch's dict[key] = m).
  void insert(const std::string& key, std::shared_ptr<Module> module);
  template <class Holder>
    requires requires(const Holder& h) { h.ptr(); typename Holder::ContainedType; }
  void insert(const std::string& key, const Holder& holder) {
    insert(key, std::shared_ptr<Module>(holder.ptr()));
  }
  bool contains(const std::string& key) const;
  const std::shared_ptr<Module>& operator[](const std::string& key) const;
  template <class T>
  std::shared_ptr<T> ptr(const std::string& key) const {
    auto p = std::dynamic_pointer_cast<T>((*this)[key]);
    KILN_CHECK(p != nullptr, "ModuleDict::ptr", "module \"", key, "\" is a ", (*this)[key]->name());
    return p;
  }
  std::vector<std::string> keys() const;
  size_t size() const { return items_.size(); }
  bool is_empty() const { return items_.empty(); }
  auto begin() const { return items_.begin(); }
  auto end() const { return items_.end(); }

 private:
  size_t index_of(const std::string& key) const;  // size() when absent

  std::vector<Item> items_;
};
KILN_MODULE(ModuleDict);

}  // namespace kiln::nn
