// kiln bench's whole invocation: the list of runs from the flags, running them in order (with the
// PyTorch peer alternating when asked), and writing results.jsonl and the chart.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "tools/kiln/bench_runner.h"

namespace kiln::cli::bench {

struct SuiteOptions {
  std::vector<std::string> models{"resnet50", "bert-base", "vgg16"};
  std::vector<std::string> modes{"train", "eval"};
  std::vector<std::string> devices;  // empty: cpu and every cuda:N present
  std::vector<std::string> dtypes{"fp32"};
  int64_t batch = 0;                 // 0: each model's default (the seed's, or --quick's)
  int64_t warmup = -1, steps = 0;    // -1 / 0: the defaults (1 and 3; --quick: 1 and 2)
  int64_t seq = 128;
  bool quick = false;
  bool profile = false;              // print a per-op profile of each run's timed steps
  std::string out_dir = "bench-results";
  bool vs_pytorch = false;
  bool cudnn_benchmark = false;      // cuDNN's algorithms timed, not picked by its heuristics (both sides)
  bool gradient_checkpointing = false;  // BERT's layers checkpointed in training (both sides)
  bool cudnn_nondeterministic = false;  // Kiln's convolutions take cuDNN's first choice (PyTorch's default)
  std::string pytorch_script;        // bench/pytorch_peer.py
  std::string python = "python3";
  int64_t pytorch_timeout_s = 1800;  // a peer run still going after this is stopped (a hung CUDA start)
};

// The seed's batch sizes (resnet50 128, bert-base 64, vgg16 64; other CNNs 64, other BERTs 64),
// or with quick the small ones (CNNs 4, except VGG 2; BERTs 2).
int64_t default_batch(const std::string& model, bool quick);

// Every run the options ask for, validated (model, mode, dtype, device present, batch; with
// vs_pytorch a warm-up of at least one step), in the order they will run: per model and mode, the
// CPU float32 run first so later runs have their speed-up at once. Devices are named as
// Device::str() names them ("cpu", "cuda:0"), each once.
std::vector<RunSpec> plan(const SuiteOptions& options);

// Runs the plan, printing the table to `out` as results arrive and progress to `err`; writes
// out_dir/results.jsonl (a line per run as it ends: measured, failed or skipped), out_dir/chart.svg
// (again after each measured run), and out_dir/chart.png when a converter exists; with vs_pytorch
// also out_dir/pytorch.jsonl (the peer's result lines). A run that fails (kiln::Error: out of
// memory at its batch, a fallback under KILN_FALLBACK=error) is a table row and a JSON line with
// its error, the peer still runs for it, and the others still run; then it throws, naming how
// many failed and the first error. Returns the measured runs.
std::vector<RunResult> run_suite(const SuiteOptions& options, std::ostream& out, std::ostream& err);

// The samples/s of the PyTorch peer's result line, or nullopt (with a message on err) when the
// line is not a JSON object holding that number; only such lines go into pytorch.jsonl.
std::optional<double> peer_samples_per_s(const std::string& line, std::ostream& err);

}  // namespace kiln::cli::bench
