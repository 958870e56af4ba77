// kiln bench's runner: one model x mode x device x dtype run timed, and its JSON line.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace kiln::cli::bench {

struct RunSpec {
  std::string model, mode, device, dtype;  // device as written ("cpu", "cuda:0"); dtype "fp32"/"bf16"
  int64_t batch = 1, warmup = 1, steps = 1, seq = 128;
  bool profile = false;  // record a per-op profile of the timed steps
};

// The machine and build, the same for every run of one invocation.
struct Environment {
  std::string cpu;          // /proc/cpuinfo's model name
  int threads = 0;
  std::string version;      // Kiln's
  std::string commit;       // build_commit()
  std::optional<std::string> onednn, cuda, cudnn;  // versions; null when not built or not known
};
Environment environment();
// The commit this build was made from, "+dirty" with uncommitted changes to tracked files, or
// "unknown" (generated at every build by cmake/KilnCommit.cmake).
const char* build_commit();

struct RunResult {
  RunSpec spec;
  std::string device_name;          // the CPU model, or the GPU's name
  std::optional<std::string> gpu;   // the GPU's name, null on the CPU
  std::string optimizer;            // "sgd", "adamw" or "none"
  std::vector<double> step_s;       // each timed step
  double median_s = 0, min_s = 0, max_s = 0, samples_per_s = 0;
  // The median time until a step's call returned, its work queued (on a GPU) or done (on the
  // CPU): a GPU step whose host_s is about its median_s is bound by the host, not the GPU.
  double host_s = 0;
  std::optional<double> tflops;     // from the profiler's FLOP count of one extra step
  int64_t peak_bytes = 0;           // the allocator's high-water mark over the timed steps
  std::optional<double> speedup_vs_cpu_fp32;
  std::optional<double> pytorch_samples_per_s, vs_pytorch;  // with --vs-pytorch
  std::string profile;  // with spec.profile: kiln::profiler's table for the timed steps
};

// Called before each timed step with (step, steps), for a progress line.
using Progress = std::function<void(int64_t, int64_t)>;

// Why a run cannot happen on this build ("autocast not available"), or empty when it can.
std::string skip_reason(const RunSpec& spec);

// Builds the workload, runs the warm-up and timed steps (synchronising a CUDA device before each
// clock read) and one extra step under the profiler. Errors are kiln::Error; an allocation failure
// becomes "[kiln bench] batch N does not fit on DEVICE ...".
RunResult run(const RunSpec& spec, const Progress& progress = {});

// The median of a non-empty list.
double median(std::vector<double> v);

// One line of results.jsonl (no trailing newline).
std::string to_json(const RunResult& r, const Environment& env);

}  // namespace kiln::cli::bench
