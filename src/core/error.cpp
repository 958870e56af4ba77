// kiln::Error construction.
#include "kiln/error.h"

namespace kiln::detail {
void throw_error(const char* where, const std::string& msg) {
  throw Error(std::string("[") + where + "] " + msg);
}
}  // namespace kiln::detail
