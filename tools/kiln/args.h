// A small command-line parser for the subcommands: --name value, --name=value and switches.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <ostream>
#include <set>
#include <string>

#include "kiln/error.h"

namespace kiln::cli {

// Thrown by Args for --help or -h: the caller prints the subcommand's usage and exits 0.
struct HelpRequested {
  std::string command;
};

class Args {
 public:
  // `options` take a value; `switches` take none. Anything else is an error naming it.
  Args(const char* command, int argc, char** argv, std::set<std::string> options, std::set<std::string> switches);

  bool has(const std::string& name) const { return values_.count(name) > 0; }
  std::string get(const std::string& name, const std::string& fallback) const;
  int64_t get_int(const std::string& name, int64_t fallback, int64_t min,
                  int64_t max = std::numeric_limits<int64_t>::max()) const;
  uint64_t get_unsigned(const std::string& name, uint64_t fallback) const;  // --seed: all 64 bits
  // Finite numbers only: --lr inf or nan is an error.
  double get_double(const std::string& name, double fallback) const;
  const std::string& where() const { return where_; }  // "kiln train"

 private:
  std::string command_, where_;
  std::map<std::string, std::string> values_;
};

// The CPUs this process may run on (its affinity mask).
int available_cpus();

// --threads N (at most available_cpus(): more only oversubscribes the cores, and thousands of
// spinning OpenMP threads never finish) and --memory-limit SIZE, where the command has them.
void apply_runtime_flags(const Args& args);

// After a command that ran ops: the ops that ran on the CPU because their device had no kernel
// for them (or refused the arguments), "fallbacks to the cpu: Op=N ..." on `os`; nothing when none.
void print_fallbacks(std::ostream& os);

}  // namespace kiln::cli
