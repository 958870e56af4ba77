// kiln info: version, devices, CPU features, thread count, and which backends (compute and
// distributed) are built.
#include <fstream>
#include <iostream>
#include <string>

#include "kiln/kiln.h"
#include "tools/kiln/args.h"
#include "tools/kiln/commands.h"

namespace kiln::cli {

int info(int argc, char** argv) {
  Args args("info", argc, argv, {}, {});
  BuildInfo b = build_info();
  std::cout << "kiln " << b.version << "\n"
            << "cpu:      " << b.cpu_model << "\n"
            << "features: " << (b.cpu_features.empty() ? "none beyond x86-64" : b.cpu_features) << "\n"
            << "threads:  " << get_num_threads() << "\n"
            << "oneDNN:   " << (b.onednn ? "built, version " + b.onednn_version : std::string("not built")) << "\n"
            << "CUDA:     " << (b.cuda ? "built" : "not built");
  if (b.cuda) {
    std::cout << ", runtime " << cuda::runtime_version() << ", cuBLAS " << cuda::cublas_version() << ", cuDNN "
              << (cuda::cudnn_version().empty() ? std::string("not built") : cuda::cudnn_version()) << "; "
              << cuda::device_count() << " device(s) present; GPU code:";
    for (const std::string& a : cuda::get_arch_list()) std::cout << " " << a;
  }
  std::cout << "\n";
  std::cout << "devices:  cpu";
  for (int i = 0; i < cuda::device_count(); ++i) std::cout << ", cuda:" << i;
  std::cout << "\n";
  for (int i = 0; i < cuda::device_count(); ++i) {
    const cuda::DeviceProperties p = cuda::get_device_properties(i);
    std::cout << "cuda:" << i << ":   " << p.name << ", " << (p.total_memory >> 20) << " MiB, compute capability "
              << p.major << "." << p.minor << ", " << p.multiprocessors << " SMs\n";
    if (!p.incompatible.empty()) std::cout << "          not usable: " << p.incompatible << "\n";
  }
  std::cout << "distributed: " << distributed::transports() << "\n";
  MemoryStats m = memory_stats(Device::cpu());
  std::cout << "memory:   " << total_memory() / (1 << 20) << " MiB, limit "
            << (m.limit ? std::to_string(m.limit >> 20) + " MiB" : std::string("none")) << "\n";
  return 0;
}
}  // namespace kiln::cli
