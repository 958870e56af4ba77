// The subcommands' flag parser.
#include "tools/kiln/args.h"

#include <cerrno>
#include <cstdlib>

namespace kiln::cli {

Args::Args(const char* command, int argc, char** argv, std::set<std::string> options, std::set<std::string> switches)
    : command_(command) {
  const std::string where = std::string("kiln ") + command;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    KILN_CHECK(a.rfind("--", 0) == 0 && a.size() > 2, where.c_str(), "unexpected argument '", a,
               "' (options start with --; see kiln help)");
    std::string name = a.substr(2), value;
    const size_t eq = name.find('=');
    const bool inline_value = eq != std::string::npos;
    if (inline_value) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    if (switches.count(name)) {
      KILN_CHECK(!inline_value, where.c_str(), "--", name, " takes no value");
      values_[name] = "1";
      continue;
    }
    KILN_CHECK(options.count(name), where.c_str(), "unknown option --", name);
    if (!inline_value) {
      KILN_CHECK(i + 1 < argc, where.c_str(), "--", name, " needs a value");
      value = argv[++i];
    }
    values_[name] = value;
  }
}

std::string Args::get(const std::string& name, const std::string& fallback) const {
  auto it = values_.find(name);
  return it == values_.end() ? fallback : it->second;
}

int64_t Args::get_int(const std::string& name, int64_t fallback, int64_t min) const {
  auto it = values_.find(name);
  if (it == values_.end()) return fallback;
  const std::string where = "kiln " + command_;
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(it->second.c_str(), &end, 10);
  KILN_CHECK(errno == 0 && end && *end == '\0' && !it->second.empty(), where.c_str(), "--", name,
             " expects an integer, got '", it->second, "'");
  KILN_CHECK(v >= min, where.c_str(), "--", name, " must be at least ", min, ", got ", v);
  return v;
}

double Args::get_double(const std::string& name, double fallback) const {
  auto it = values_.find(name);
  if (it == values_.end()) return fallback;
  const std::string where = "kiln " + command_;
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(it->second.c_str(), &end);
  KILN_CHECK(errno == 0 && end && *end == '\0' && !it->second.empty(), where.c_str(), "--", name,
             " expects a number, got '", it->second, "'");
  return v;
}

}  // namespace kiln::cli
