// A number as Python's repr writes a float, for module printing that matches PyTorch's:
// 0.0, 1e-05, 0.1 (the shortest text that reads back the same, with ".0" on a whole number).
#pragma once

#include <charconv>
#include <string>

namespace kiln::nn::detail {

inline std::string python_float(double v) {
  char buf[64];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  std::string s(buf, ec == std::errc() ? end : buf);
  if (s.find_first_of(".en") == std::string::npos) s += ".0";  // not 1e-05, inf or nan
  return s;
}

}  // namespace kiln::nn::detail
