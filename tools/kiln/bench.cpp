// kiln bench: the seed's benchmark (ResNet-50, BERT-base, VGG-16; train and eval; every device and
// precision) with a table, results.jsonl and a chart; optionally beside PyTorch.
#include <algorithm>
#include <iostream>
#include <sstream>

#include "kiln/kiln.h"
#include "tools/kiln/args.h"
#include "tools/kiln/bench_suite.h"
#include "tools/kiln/bench_workloads.h"
#include "tools/kiln/commands.h"

#ifndef KILN_SOURCE_DIR
#define KILN_SOURCE_DIR "."
#endif

namespace kiln::cli {
namespace {
// --models a,b: each item once (a repeat would run again, as a second row in the table and chart).
std::vector<std::string> list(const Args& args, const char* name) {
  const std::string text = args.get(name, "");
  std::vector<std::string> out;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');) {
    if (item.empty()) continue;
    KILN_CHECK(std::find(out.begin(), out.end(), item) == out.end(), args.where().c_str(), "--", name, " names '",
               item, "' twice (", text, ")");
    out.push_back(item);
  }
  KILN_CHECK(!out.empty(), args.where().c_str(), "--", name, " must name at least one, got '", text, "'");
  return out;
}
}  // namespace

int bench_command(int argc, char** argv) {
  Args args("bench", argc, argv,
            {"models", "modes", "devices", "dtypes", "batch", "steps", "warmup", "threads", "memory-limit",
             "gpu-memory-limit", "seq", "out", "pytorch-script", "python", "pytorch-timeout"},
            {"quick", "vs-pytorch", "profile", "cudnn-benchmark", "cudnn-nondeterministic", "gradient-checkpointing"});
  bench::SuiteOptions o;
  for (auto [name, items] : {std::pair{"models", &o.models}, {"modes", &o.modes}, {"devices", &o.devices},
                             {"dtypes", &o.dtypes}})
    if (args.has(name)) *items = list(args, name);
  // Flags that would change nothing are errors, not silently ignored.
  for (const char* f : {"pytorch-script", "python", "pytorch-timeout"})
    KILN_CHECK(!args.has(f) || args.has("vs-pytorch"), args.where().c_str(), "--", f, " goes with --vs-pytorch");
  KILN_CHECK(!args.has("seq") || std::any_of(o.models.begin(), o.models.end(), bench::takes_seq),
             args.where().c_str(), "--seq applies to BERT and sdpa, and no model in --models takes it");
  o.batch = args.get_int("batch", 0, 1);
  o.steps = args.get_int("steps", 0, 1);
  o.warmup = args.get_int("warmup", -1, 0);
  o.seq = args.get_int("seq", 128, 1);
  o.quick = args.has("quick");
  o.profile = args.has("profile");
  o.out_dir = args.get("out", "bench-results");
  o.vs_pytorch = args.has("vs-pytorch");
  o.cudnn_benchmark = args.has("cudnn-benchmark");
  o.cudnn_nondeterministic = args.has("cudnn-nondeterministic");
  o.gradient_checkpointing = args.has("gradient-checkpointing");
  KILN_CHECK(!o.gradient_checkpointing || std::any_of(o.models.begin(), o.models.end(), bench::is_bert),
             args.where().c_str(), "--gradient-checkpointing applies to BERT, and no model in --models is one");
  o.pytorch_script = args.get("pytorch-script", std::string(KILN_SOURCE_DIR) + "/bench/pytorch_peer.py");
  o.python = args.get("python", "python3");
  o.pytorch_timeout_s = args.get_int("pytorch-timeout", o.pytorch_timeout_s, 1);
  apply_runtime_flags(args);
  bench::run_suite(o, std::cout, std::cerr);
  print_fallbacks(std::cout);
  return 0;
}

}  // namespace kiln::cli
