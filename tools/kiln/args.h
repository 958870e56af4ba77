// A small command-line parser for the subcommands: --name value, --name=value and switches.
#pragma once

#include <map>
#include <set>
#include <string>

#include "kiln/error.h"

namespace kiln::cli {

class Args {
 public:
  // `options` take a value; `switches` take none. Anything else is an error naming it.
  Args(const char* command, int argc, char** argv, std::set<std::string> options, std::set<std::string> switches);

  bool has(const std::string& name) const { return values_.count(name) > 0; }
  std::string get(const std::string& name, const std::string& fallback) const;
  int64_t get_int(const std::string& name, int64_t fallback, int64_t min) const;
  double get_double(const std::string& name, double fallback) const;

 private:
  std::string command_;
  std::map<std::string, std::string> values_;
};

}  // namespace kiln::cli
