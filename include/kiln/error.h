// kiln::Error, the one exception Kiln throws, and the checks that build its messages.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace kiln {

// Every message starts with the op or function name in brackets: "[matmul] shapes ...".
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// An allocation past a device's memory limit, or one the system or driver refused
// (torch.OutOfMemoryError): "[cpu] out of memory: asked 5.61 GiB, limit 21.6 GiB, ...".
class OutOfMemoryError : public Error {
 public:
  using Error::Error;
};

namespace detail {
template <class... Args>
std::string cat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
[[noreturn]] void throw_error(const char* where, const std::string& msg);

// Runs f; a kiln::Error from it is thrown again naming `what` (a file), "[where] <what>: <its
// message without its own [op]>"; an OutOfMemoryError goes on unchanged.
[[noreturn]] void rethrow_naming(const char* where, const std::string& what, const Error& e);
template <class F>
decltype(auto) naming(const char* where, const std::string& what, F&& f) {
  try {
    return f();
  } catch (const OutOfMemoryError&) {
    throw;
  } catch (const Error& e) {
    rethrow_naming(where, what, e);
  }
}
}  // namespace detail

}  // namespace kiln

#define KILN_CHECK(cond, where, ...)                                          \
  do {                                                                        \
    if (!(cond)) [[unlikely]]                                                 \
      ::kiln::detail::throw_error((where), ::kiln::detail::cat(__VA_ARGS__)); \
  } while (0)

#define KILN_FAIL(where, ...) ::kiln::detail::throw_error((where), ::kiln::detail::cat(__VA_ARGS__))
