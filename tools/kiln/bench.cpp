// kiln bench: the seed's benchmark (ResNet-50, BERT-base, VGG-16; train and eval; every device and
// precision) with a table, results.jsonl and a chart; optionally beside PyTorch.
#include <iostream>
#include <sstream>

#include "kiln/kiln.h"
#include "tools/kiln/args.h"
#include "tools/kiln/bench_suite.h"
#include "tools/kiln/commands.h"

#ifndef KILN_SOURCE_DIR
#define KILN_SOURCE_DIR "."
#endif

namespace kiln::cli {
namespace {
std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}
}  // namespace

int bench_command(int argc, char** argv) {
  Args args("bench", argc, argv,
            {"models", "modes", "devices", "dtypes", "batch", "steps", "warmup", "threads", "memory-limit",
             "gpu-memory-limit", "seq", "out", "pytorch-script", "python"},
            {"quick", "vs-pytorch", "profile", "cudnn-benchmark"});
  bench::SuiteOptions o;
  if (args.has("models")) o.models = split(args.get("models", ""));
  if (args.has("modes")) o.modes = split(args.get("modes", ""));
  if (args.has("devices")) o.devices = split(args.get("devices", ""));
  if (args.has("dtypes")) o.dtypes = split(args.get("dtypes", ""));
  o.batch = args.get_int("batch", 0, 1);
  o.steps = args.get_int("steps", 0, 1);
  o.warmup = args.get_int("warmup", -1, 0);
  o.seq = args.get_int("seq", 128, 1);
  o.quick = args.has("quick");
  o.profile = args.has("profile");
  o.out_dir = args.get("out", "bench-results");
  o.vs_pytorch = args.has("vs-pytorch");
  o.cudnn_benchmark = args.has("cudnn-benchmark");
  o.pytorch_script = args.get("pytorch-script", std::string(KILN_SOURCE_DIR) + "/bench/pytorch_peer.py");
  o.python = args.get("python", "python3");
  apply_runtime_flags(args);
  bench::run_suite(o, std::cout, std::cerr);
  return 0;
}

}  // namespace kiln::cli
