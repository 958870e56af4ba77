// ModuleHolder and KILN_MODULE (libtorch's TORCH_MODULE): `Linear` is a shared pointer to a LinearImpl.
#pragma once

#include <concepts>
#include <cstddef>
#include <memory>
#include <ostream>
#include <type_traits>
#include <utility>

#include "kiln/error.h"
#include "kiln/nn/module.h"

namespace kiln::nn {

template <class Impl>
class ModuleHolder;

namespace detail {
template <class T>
struct is_holder_or_ptr : std::false_type {};
template <class T>
struct is_holder_or_ptr<std::shared_ptr<T>> : std::true_type {};
template <>
struct is_holder_or_ptr<std::nullptr_t> : std::true_type {};
// False for a single argument that is a holder, a shared_ptr or nullptr (those have their own
// constructors), so copying a holder never tries to construct an Impl from it.
template <class Impl, class... Args>
struct forwards_to_impl : std::is_constructible<Impl, Args...> {};
template <class Impl, class Arg>
struct forwards_to_impl<Impl, Arg>
    : std::bool_constant<!is_holder_or_ptr<std::decay_t<Arg>>::value &&
                         !std::is_base_of_v<ModuleHolder<Impl>, std::decay_t<Arg>> &&
                         std::is_constructible_v<Impl, Arg>> {};
}  // namespace detail

// Shares ownership of one Impl. Copies of a holder are the same module (as in libtorch).
// `Holder{nullptr}` is empty; `Holder(args...)` constructs Impl(args...); the default
// constructor constructs Impl() when Impl has a default constructor.
template <class Impl>
class ModuleHolder {
 public:
  using ContainedType = Impl;

  ModuleHolder()
    requires std::default_initializable<Impl>
      : impl_(std::make_shared<Impl>()) {}
  ModuleHolder(std::nullptr_t) {}
  ModuleHolder(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
  template <class... Args>
    requires(sizeof...(Args) > 0 && detail::forwards_to_impl<Impl, Args...>::value)
  explicit ModuleHolder(Args&&... args) : impl_(std::make_shared<Impl>(std::forward<Args>(args)...)) {}

  Impl* operator->() const { return get(); }
  Impl& operator*() const { return *get(); }
  Impl* get() const {
    KILN_CHECK(impl_ != nullptr, "ModuleHolder", "accessing an empty module holder (constructed with nullptr)");
    return impl_.get();
  }
  const std::shared_ptr<Impl>& ptr() const { return impl_; }
  bool is_empty() const { return impl_ == nullptr; }
  explicit operator bool() const { return impl_ != nullptr; }
  operator std::shared_ptr<Module>() const { return impl_; }

  // Forwards to Impl::operator[] (Sequential, ModuleList).
  template <class Arg>
  decltype(auto) operator[](Arg&& arg) const {
    return (*get())[std::forward<Arg>(arg)];
  }

  // Calls Impl::forward.
  template <class... Args>
  decltype(auto) operator()(Args&&... args) const {
    return get()->forward(std::forward<Args>(args)...);
  }

 private:
  std::shared_ptr<Impl> impl_;
};

template <class Impl>
std::ostream& operator<<(std::ostream& os, const ModuleHolder<Impl>& holder) {
  return holder.is_empty() ? (os << "(empty module holder)") : (os << static_cast<const Module&>(*holder));
}

}  // namespace kiln::nn

// Declares `Name`, a ModuleHolder<NameImpl> with NameImpl's constructors.
#define KILN_MODULE(Name)                                            \
  class Name : public ::kiln::nn::ModuleHolder<Name##Impl> {         \
   public:                                                           \
    using ::kiln::nn::ModuleHolder<Name##Impl>::ModuleHolder;        \
  }
