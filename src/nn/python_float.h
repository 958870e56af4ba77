// A number as Python's repr writes a float, for module printing that matches PyTorch's:
// 0.0, 1e-05, 0.1, 100000.0 (the shortest text that reads back the same, with ".0" on a whole number).
#pragma once

#include <charconv>
#include <string>

namespace kiln::nn::detail {

inline std::string python_float(double v) {
  char buf[64];
  // The shortest digits in scientific form; Python writes them in fixed form for decimal exponents
  // in [-4, 16): 100000.0, 0.0001, 1e-05, 1e+16.
  auto text = [&](std::chars_format f) {
    const std::to_chars_result r = std::to_chars(buf, buf + sizeof buf, v, f);
    return std::string(buf, r.ec == std::errc() ? r.ptr : buf);
  };
  std::string s = text(std::chars_format::scientific);
  const size_t e = s.find('e');
  // (else Python's 1e-05 and 1e+16, two exponent digits at least, as to_chars writes them)
  if (e != std::string::npos && std::stoi(s.substr(e + 1)) >= -4 && std::stoi(s.substr(e + 1)) < 16)
    s = text(std::chars_format::fixed);
  if (s.find_first_of(".en") == std::string::npos) s += ".0";  // not 1e-05, inf or nan
  return s;
}

}  // namespace kiln::nn::detail
