// kiln::Error construction.
#include "kiln/error.h"

namespace kiln::detail {
void throw_error(const char* where, const std::string& msg) {
  throw Error(std::string("[") + where + "] " + msg);
}

void rethrow_naming(const char* where, const std::string& what, const Error& e) {
  const std::string msg = e.what();
  const size_t close = msg.starts_with("[") ? msg.find("] ") : std::string::npos;
  throw_error(where, what + ": " + (close == std::string::npos ? msg : msg.substr(close + 2)));
}
}  // namespace kiln::detail
