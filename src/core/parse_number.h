// Numbers from text with std::from_chars: locale-independent (strtod and std::stod follow
// LC_NUMERIC, so a program that set a German locale read "0.1" as 0) and, unlike strtod,
// subnormals (a decayed learning rate) read without an error.
#pragma once

#include <charconv>
#include <optional>
#include <string_view>

namespace kiln::detail {

// The number at the start of `s` (a '+' sign allowed, as strtod allows it) and how many
// characters it took; nullopt when `s` does not start with one, or its value is out of T's range.
template <class T>
std::optional<T> parse_number_prefix(std::string_view s, size_t* used) {
  const size_t sign = s.size() > 1 && s[0] == '+' && s[1] != '-' ? 1 : 0;
  T v{};
  const auto [end, ec] = std::from_chars(s.data() + sign, s.data() + s.size(), v);
  if (ec != std::errc()) return std::nullopt;
  *used = static_cast<size_t>(end - s.data());
  return v;
}

// The whole of `s` as a number; nullopt when it is anything else.
template <class T>
std::optional<T> parse_number(std::string_view s) {
  size_t used = 0;
  std::optional<T> v = parse_number_prefix<T>(s, &used);
  return v && used == s.size() ? v : std::nullopt;
}

}  // namespace kiln::detail
