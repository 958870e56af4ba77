// The subcommands' flag parser, and the flags every subcommand shares.
#include "tools/kiln/args.h"

#include <sched.h>

#include <cmath>
#include <cstdlib>

#include "kiln/runtime.h"
#include "src/core/parse_number.h"

namespace kiln::cli {

Args::Args(const char* command, int argc, char** argv, std::set<std::string> options, std::set<std::string> switches)
    : command_(command), where_(std::string("kiln ") + command) {
  const char* where = where_.c_str();
  // Help wins over any other problem, but only where a flag stands: `--data -h` names a file.
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") throw HelpRequested{command_};
    if (a.rfind("--", 0) == 0 && a.find('=') == std::string::npos && options.count(a.substr(2))) ++i;
  }
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    KILN_CHECK(a.rfind("--", 0) == 0 && a.size() > 2, where, "unexpected argument '", a,
               "' (options start with --; see kiln ", command_, " --help)");
    std::string name = a.substr(2), value;
    const size_t eq = name.find('=');
    const bool inline_value = eq != std::string::npos;
    if (inline_value) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    const bool is_switch = switches.count(name) > 0;
    KILN_CHECK(is_switch || options.count(name), where, "unknown option --", name, " (see kiln ", command_, " --help)");
    if (is_switch) {
      KILN_CHECK(!values_.count(name), where, "--", name, " is given twice");
      KILN_CHECK(!inline_value, where, "--", name, " takes no value");
      values_[name] = "1";
      continue;
    }
    if (!inline_value) {
      KILN_CHECK(i + 1 < argc, where, "--", name, " needs a value");
      value = argv[++i];
      // A flag where the value belongs was swallowed as the value (`--checkpoint-dir --resume`
      // made a directory named --resume and lost the switch). --name=--x passes such a value.
      const std::string next = value.rfind("--", 0) == 0 ? value.substr(2, value.find('=') - 2) : "";
      KILN_CHECK(!options.count(next) && !switches.count(next) && next != "help", where, "--", name,
                 " needs a value, got the flag ", value, " (write --", name, "=", value,
                 " for a value that starts with --)");
    }
    KILN_CHECK(!value.empty(), where, "--", name, " needs a value, got an empty one");
    // The last of two would win unseen (a long command line with --lr twice).
    KILN_CHECK(!values_.count(name), where, "--", name, " is given twice ('", values_[name], "', then '", value,
               "')");
    values_[name] = value;
  }
}

std::string Args::get(const std::string& name, const std::string& fallback) const {
  auto it = values_.find(name);
  return it == values_.end() ? fallback : it->second;
}

int64_t Args::get_int(const std::string& name, int64_t fallback, int64_t min, int64_t max) const {
  auto it = values_.find(name);
  if (it == values_.end()) return fallback;
  const std::optional<int64_t> parsed = kiln::detail::parse_number<int64_t>(it->second);
  KILN_CHECK(parsed, where_.c_str(), "--", name, " expects an integer, got '", it->second, "'");
  const int64_t v = *parsed;
  KILN_CHECK(v >= min, where_.c_str(), "--", name, " must be at least ", min, ", got ", v);
  KILN_CHECK(v <= max, where_.c_str(), "--", name, " must be at most ", max, ", got ", v);
  return v;
}

uint64_t Args::get_unsigned(const std::string& name, uint64_t fallback) const {
  auto it = values_.find(name);
  if (it == values_.end()) return fallback;
  const std::optional<uint64_t> v = kiln::detail::parse_number<uint64_t>(it->second);
  KILN_CHECK(v, where_.c_str(), "--", name, " expects an integer from 0 to 18446744073709551615, got '",
             it->second, "'");
  return *v;
}

double Args::get_double(const std::string& name, double fallback) const {
  auto it = values_.find(name);
  if (it == values_.end()) return fallback;
  const std::optional<double> v = kiln::detail::parse_number<double>(it->second);  // whatever the locale
  KILN_CHECK(v && std::isfinite(*v), where_.c_str(), "--", name, " expects a finite number, got '", it->second, "'");
  return *v;
}

int available_cpus() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1, get_num_threads());
}

void apply_runtime_flags(const Args& args) {
  if (args.has("threads")) {
    const int cpus = available_cpus();
    const int64_t n = args.get_int("threads", 1, 1);
    KILN_CHECK(n <= cpus, args.where().c_str(), "--threads ", n, " is more than the ", cpus,
               " CPU(s) this process may run on");
    set_num_threads(static_cast<int>(n));
  }
  if (args.has("memory-limit")) {
    const std::string flag = args.where() + " --memory-limit";
    set_memory_limit(Device::cpu(), parse_memory_limit(args.get("memory-limit", ""), total_memory(), flag.c_str()));
  }
  // Each GPU's (a share, "80%", of each one's memory); past it an allocation is the out-of-memory
  // error naming the device, the size asked and the limit, as with cuda::set_memory_limit.
  if (args.has("gpu-memory-limit")) {
    const std::string flag = args.where() + " --gpu-memory-limit";
    const std::string text = args.get("gpu-memory-limit", "");
    const int n = cuda::device_count();
    // 0 (no limit, the default) is fine on any machine: a script may pass it everywhere.
    KILN_CHECK(n > 0 || parse_memory_limit(text, total_memory(), flag.c_str()) == 0, flag.c_str(),
               "there is no GPU to limit (", build_info().cuda ? "CUDA finds none" : "this build has no CUDA", ")");
    for (int i = 0; i < n; ++i)
      set_memory_limit(Device::cuda(i), parse_memory_limit(text, total_memory(Device::cuda(i)), flag.c_str()));
  }
}

void print_fallbacks(std::ostream& os) {
  const auto counts = fallback_counts();
  if (counts.empty()) return;
  os << "fallbacks to the cpu:";
  for (const auto& [op, n] : counts) os << " " << op << "=" << n;
  os << "\n";
}

}  // namespace kiln::cli
