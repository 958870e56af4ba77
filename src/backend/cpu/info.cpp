// The CPU thread pool settings and build information (oneDNN version, CPU features).
#include <omp.h>

#include <fstream>
#include <map>
#include <string>
#include <thread>

#include "backend/cpu/onednn.h"
#include "kiln/error.h"
#include "kiln/runtime.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace kiln {

namespace {
#if defined(__x86_64__)
bool cpuid7_edx_bit(int bit) {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid_count(7, 0, &a, &b, &c, &d) && ((d >> bit) & 1u);
}
#endif

// The CPU as /proc/cpuinfo names it, with its family and model numbers: virtual machines often
// report only "AMD EPYC" or "Intel(R) Xeon(R) Processor", which tells no generation apart.
std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::map<std::string, std::string> first;  // key -> the first processor's value
  for (std::string line; std::getline(in, line) && !line.empty();) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string key = line.substr(0, colon);
    while (!key.empty() && (key.back() == ' ' || key.back() == '\t')) key.pop_back();
    first.emplace(key, colon + 2 <= line.size() ? line.substr(colon + 2) : "");
  }
  std::string name = first.count("model name") ? first["model name"] : "unknown";
  if (first.count("cpu family") && first.count("model"))
    name += " (family " + first["cpu family"] + ", model " + first["model"] + ")";
  return name;
}
}  // namespace

void set_num_threads(int n) {
  KILN_CHECK(n > 0, "set_num_threads", "the number of threads must be positive, got ", n);
  omp_set_num_threads(n);
}

int get_num_threads() { return omp_get_max_threads(); }

BuildInfo build_info() {
  BuildInfo b;
  b.version = KILN_VERSION;
  b.onednn_version = backend::cpu::onednn_version();
  b.onednn = !b.onednn_version.empty();
  b.cpu_model = cpu_model();
#ifdef KILN_HAVE_CUDA
  b.cuda = true;
#endif
#if defined(__x86_64__)
  __builtin_cpu_init();
  const std::pair<const char*, bool> features[] = {
      {"avx2", __builtin_cpu_supports("avx2")},
      {"fma", __builtin_cpu_supports("fma")},
      {"avx512f", __builtin_cpu_supports("avx512f")},
      {"avx512bw", __builtin_cpu_supports("avx512bw")},
      {"avx512vnni", __builtin_cpu_supports("avx512vnni")},
      {"avx512bf16", __builtin_cpu_supports("avx512bf16")},
      // AMX from CPUID leaf 7 (EDX bits 24 and 22): clang 14's __builtin_cpu_supports lacks it.
      {"amx-tile", cpuid7_edx_bit(24)},
      {"amx-bf16", cpuid7_edx_bit(22)},
      {"avx512fp16", cpuid7_edx_bit(23)},  // float16 arithmetic (Sapphire Rapids and later)
  };
  for (auto [name, has] : features)
    if (has) b.cpu_features += (b.cpu_features.empty() ? "" : " ") + std::string(name);
#endif
  return b;
}

}  // namespace kiln
