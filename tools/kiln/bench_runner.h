// kiln bench's runner: one model x mode x device x dtype run timed, and its JSON line.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kiln/device.h"

namespace kiln::cli::bench {

struct RunSpec {
  std::string model, mode, device, dtype;  // device as Device::str() spells it ("cpu", "cuda:0"); dtype "fp32"/"bf16"
  int64_t batch = 1, warmup = 1, steps = 1, seq = 128;
  bool gradient_checkpointing = false;  // BERT training: each encoder layer checkpointed
  bool profile = false;  // record a per-op profile of the timed steps (their times then include the profiler's)
};

// The machine and build, the same for every run of one invocation.
struct Environment {
  std::string cpu;          // /proc/cpuinfo's model name
  int threads = 0;
  std::string version;      // Kiln's
  std::string commit;       // build_commit()
  std::optional<std::string> onednn, cuda, cudnn;  // versions; null when not built or not known
  // KILN_SHADOW is on: every op on a GPU also ran on the CPU, so GPU times are not Kiln's.
  bool shadowed = false;
};
Environment environment();
// The commit this build was made from, "+dirty" with uncommitted changes to tracked files, or
// "unknown" (generated at every build by cmake/KilnCommit.cmake).
const char* build_commit();

struct RunResult {
  RunSpec spec;
  // Why the run has no numbers (they are null in its JSON line): the first line of the error it
  // failed with, or why it was skipped. Both empty for a measured run.
  std::string error, skipped;
  std::string device_name;          // the CPU model, or the GPU's name ("" for a run that did not run)
  std::optional<std::string> gpu;   // the GPU's name, null on the CPU
  std::string optimizer;            // "sgd", "adamw" or "none" ("" for a run that did not run)
  std::vector<double> step_s;       // each timed step
  double median_s = 0, min_s = 0, max_s = 0, samples_per_s = 0;
  // The median time until a step's call returned, its work queued (on a GPU) or done (on the
  // CPU): a GPU step whose host_s is about its median_s is bound by the host, not the GPU.
  double host_s = 0;
  std::optional<double> flops_per_step;  // the profiler's FLOP count of one step (see measure())
  int64_t peak_bytes = 0;           // the allocator's high-water mark over the timed steps
  int64_t peak_reserved_bytes = 0;  // its reserved bytes' high-water mark: what the run needs of the device
  std::optional<double> speedup_vs_cpu_fp32;
  std::optional<double> pytorch_samples_per_s, vs_pytorch;  // with --vs-pytorch
  std::string pytorch_error;  // with --vs-pytorch: why the peer gave no number ("" when it did)
  std::string profile;  // with spec.profile: kiln::profiler's table for the timed steps
  // Its steps ran under a timing profiler session: --profile, or KILN_PROFILE's for the process.
  bool profiled = false;
  // The ops that ran on the CPU instead of the run's device (no kernel there, or one that refused
  // the arguments), with how often over the run: its times are then not the device's alone.
  std::map<std::string, uint64_t> fallbacks;

  bool measured() const { return error.empty() && skipped.empty(); }
  std::optional<double> tflops() const {  // flops_per_step / median_s
    if (!flops_per_step || median_s <= 0) return std::nullopt;
    return *flops_per_step / median_s / 1e12;
  }
};

// Called before each timed step with (step, steps), for a progress line.
using Progress = std::function<void(int64_t, int64_t)>;

// Why a run is not worth making on this machine ("this CPU has no bfloat16 instructions"), or
// empty when it is.
std::string skip_reason(const RunSpec& spec);

// Builds the workload and measure()s its step in the run's dtype. Errors are kiln::Error; an
// allocation failure becomes "[kiln bench] batch N does not fit on DEVICE ...".
RunResult run(const RunSpec& spec, const Progress& progress = {});

// Times `step` on `device` into r: spec.warmup untimed steps, the first of them under the
// profiler's FLOP count, then spec.steps timed ones (a CUDA device synchronised before each clock
// read), with the allocator's peak reset between; without warm-up, one more step after the timed
// ones for the FLOP count. With spec.profile the timed steps run under a timing profiler session.
void measure(const RunSpec& spec, Device device, const std::function<void()>& step, RunResult& r,
             const Progress& progress = {});

// The median of a non-empty list.
double median(std::vector<double> v);

// One line of results.jsonl (no trailing newline). A run that failed or was skipped has null
// numbers and an "error" or "skipped" string; "profiled" says whether its steps were timed under
// the profiler, "fallbacks" which ops ran on the CPU instead ({} when none) and "shadowed"
// whether KILN_SHADOW ran every GPU op again on the CPU.
std::string to_json(const RunResult& r, const Environment& env);

}  // namespace kiln::cli::bench
