// kiln info: version, devices, CPU features, thread count, and which backends are built.
#include <fstream>
#include <iostream>
#include <string>

#include "kiln/kiln.h"
#include "tools/kiln/commands.h"

namespace kiln::cli {
namespace {
std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown";
}
}  // namespace

int info(int argc, char** argv) {
  if (argc > 1) {
    std::cerr << "kiln info: takes no arguments, got '" << argv[1] << "'\n";
    return 2;
  }
  BuildInfo b = build_info();
  std::cout << "kiln " << b.version << "\n"
            << "cpu:      " << cpu_model() << "\n"
            << "features: " << (b.cpu_features.empty() ? "none beyond x86-64" : b.cpu_features) << "\n"
            << "threads:  " << get_num_threads() << "\n"
            << "oneDNN:   " << (b.onednn ? "built, version " + b.onednn_version : std::string("not built")) << "\n"
            << "CUDA:     " << (b.cuda ? "built" : "not built");
  if (b.cuda) std::cout << ", " << cuda::device_count() << " device(s) present";
  std::cout << "\n";
  std::cout << "devices:  cpu";
  for (int i = 0; i < cuda::device_count(); ++i) std::cout << ", cuda:" << i;
  std::cout << "\n";
  MemoryStats m = memory_stats(Device::cpu());
  std::cout << "cpu memory: " << m.allocated << " bytes allocated, " << m.reserved << " reserved\n";
  auto fb = fallback_counts();
  if (!fb.empty()) {
    std::cout << "fallbacks to the cpu:";
    for (auto& [op, n] : fb) std::cout << " " << op << "=" << n;
    std::cout << "\n";
  }
  return 0;
}
}  // namespace kiln::cli
