// kiln bench's runner: warm-up (the first step's FLOPs counted), timed steps, the environment, the JSON line.
#include "tools/kiln/bench_runner.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <fstream>
#include <new>

#include "kiln/kiln.h"
#include "kiln/train/device_choice.h"
#include "src/backend/dispatch.h"
#include "src/core/device_runtime.h"
#include "src/io/json.h"
#include "tools/kiln/bench_workloads.h"

namespace kiln::cli::bench {

namespace {
void sync(Device d) {
  if (d.is_cuda()) cuda::synchronize(d.index);
}

// JSON pieces. Non-finite numbers have no JSON spelling: null.
// std::to_chars, not printf: "%.6g" would write a decimal comma under a locale that has one.
std::string num(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[64];
  const auto end = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::general, 6).ptr;
  return std::string(buf, end);
}
std::string num(const std::optional<double>& v) { return v ? num(*v) : "null"; }
std::string str(const std::string& s) {
  std::string out;
  io::json::append_string(out, s);
  return out;
}
std::string str(const std::optional<std::string>& s) { return s ? str(*s) : "null"; }
}  // namespace

Environment environment() {
  Environment env;
  BuildInfo b = build_info();
  env.cpu = build_info().cpu_model;
  env.threads = get_num_threads();
  env.version = b.version;
  env.commit = build_commit();
  if (b.onednn) env.onednn = b.onednn_version;
  if (b.cuda) {
    env.cuda = cuda::runtime_version();
    if (!cuda::cudnn_version().empty()) env.cudnn = cuda::cudnn_version();
  }
  env.shadowed = backend::shadow_mode() != backend::ShadowMode::Off;
  return env;
}

double median(std::vector<double> v) {
  KILN_CHECK(!v.empty(), "kiln bench", "median of no values");
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::string skip_reason(const RunSpec& spec) {
  // Without bfloat16 instructions oneDNN emulates bf16, slower than fp32: not a measurement worth
  // making (PyTorch's peer reports such a run as unsupported too).
  if (!Device(spec.device).is_cpu()) return "";
  const std::string f = build_info().cpu_features;
  if (spec.dtype == "bf16" && f.find("avx512bf16") == std::string::npos && f.find("amx") == std::string::npos)
    return "this CPU has no bfloat16 instructions";
  // Even with AVX512-FP16 a float16 step was 100 to 350 times slower than float32 (Debian's
  // oneDNN 2.6), and PyTorch's peer refuses float16 on the CPU: hours for no comparison.
  if (spec.dtype == "fp16") return "no fast float16 path on the CPU, 100x slower than float32";
  if (spec.dtype == "tf32") return "TF32 is a GPU format (the CPU's fp32 run is the same)";
  return "";
}

void measure(const RunSpec& spec, Device device, const std::function<void()>& step, RunResult& r,
             const Progress& progress) {
  auto counted_step = [&] {
    return count_flops([&] {
      step();
      sync(device);
    });
  };
  // The FLOPs are counted in the first warm-up step (as PyTorch's peer counts them), which still
  // creates the plans and grows the allocator: the profiler only counts, without timing.
  std::optional<double> flops;
  if (spec.warmup > 0) flops = counted_step();
  for (int64_t i = 1; i < spec.warmup; ++i) step();
  sync(device);
  reset_peak_memory_stats(device);  // this run's steady state, not the warm-up's or the last run's
  std::optional<profiler::Session> session;
  if (spec.profile) session.emplace();
  std::vector<double> host_s;
  for (int64_t i = 0; i < spec.steps; ++i) {
    if (progress) progress(i, spec.steps);
    const auto t0 = std::chrono::steady_clock::now();
    step();
    host_s.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    sync(device);
    r.step_s.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  r.host_s = median(host_s);
  const MemoryStats mem = memory_stats(device);
  r.peak_bytes = static_cast<int64_t>(mem.peak);
  r.peak_reserved_bytes = static_cast<int64_t>(mem.peak_reserved);
  if (session) {
    double wall = 0;
    for (double t : r.step_s) wall += t;
    r.profile = profiler::format_table(session->stats(), wall);
    session.reset();
  }
  if (spec.warmup == 0) flops = counted_step();
  r.median_s = median(r.step_s);
  r.min_s = *std::min_element(r.step_s.begin(), r.step_s.end());
  r.max_s = *std::max_element(r.step_s.begin(), r.step_s.end());
  r.samples_per_s = static_cast<double>(spec.batch) / r.median_s;
  if (flops && *flops > 0) r.flops_per_step = *flops;
}

RunResult run(const RunSpec& spec, const Progress& progress) {
  check_dtype(spec.dtype);
  KILN_CHECK(spec.steps >= 1 && spec.warmup >= 0, "kiln bench", "steps must be at least 1 and warm-up at least 0, got ",
             spec.steps, " and ", spec.warmup);
  const Device device = train::parse_device(spec.device, "kiln bench");
  RunResult r;
  r.spec = spec;
  if (device.is_cuda()) {
    r.gpu = find_runtime(kCUDA)->device_name(device.index);
    r.device_name = *r.gpu;
  } else {
    r.device_name = build_info().cpu_model;
  }
  r.profiled = spec.profile || profiler::recording();  // a session of KILN_PROFILE's is alive
  const std::map<std::string, uint64_t> fallbacks_before = fallback_counts();
  try {
    Workload w = make_workload({spec.model, spec.mode, device, spec.batch, spec.seq, spec.dtype, spec.gradient_checkpointing});
    r.optimizer = w.optimizer;
    measure(spec, device, [&] { run_with_dtype(spec.dtype, w.step); }, r, progress);
    for (const auto& [op, n] : fallback_counts()) {
      const auto before = fallbacks_before.find(op);
      const uint64_t earlier = before == fallbacks_before.end() ? 0 : before->second;
      if (n > earlier) r.fallbacks[op] = n - earlier;
    }
  } catch (const OutOfMemoryError& e) {
    KILN_FAIL("kiln bench", "batch ", spec.batch, " does not fit on ", spec.device, " for ", spec.model, " ",
              spec.mode, " (", e.what(), ")");
  } catch (const std::bad_alloc&) {
    KILN_FAIL("kiln bench", "batch ", spec.batch, " does not fit on ", spec.device, " for ", spec.model, " ",
              spec.mode, " (out of host memory)");
  }
  return r;
}

std::string to_json(const RunResult& r, const Environment& env) {
  const RunSpec& s = r.spec;
  const bool measured = r.measured();
  std::string j = "{\"framework\": \"kiln\"";
  auto field = [&](const char* k, const std::string& v) { j += std::string(", \"") + k + "\": " + v; };
  // A number of the measurement: null for a run that failed or was skipped.
  auto measurement = [&](const char* k, const std::string& v) { field(k, measured ? v : "null"); };
  auto name = [&](const char* k, const std::string& v) { field(k, v.empty() ? "null" : str(v)); };
  field("model", str(s.model));
  field("mode", str(s.mode));
  field("device", str(s.device));
  name("device_name", r.device_name);
  field("dtype", str(s.dtype));
  field("batch", std::to_string(s.batch));
  if (takes_seq(s.model)) field("seq", std::to_string(s.seq));
  if (s.gradient_checkpointing) field("gradient_checkpointing", "true");
  name("optimizer", r.optimizer);
  field("warmup", std::to_string(s.warmup));
  field("steps", std::to_string(s.steps));
  if (!r.error.empty()) field("error", str(r.error));
  if (!r.skipped.empty()) field("skipped", str(r.skipped));
  field("profiled", r.profiled ? "true" : "false");
  std::string fallbacks = "{";
  for (const auto& [op, n] : r.fallbacks) fallbacks += (fallbacks.size() > 1 ? ", " : "") + str(op) + ": " + std::to_string(n);
  field("fallbacks", fallbacks + "}");
  field("shadowed", env.shadowed ? "true" : "false");
  measurement("median_s", num(r.median_s));
  measurement("min_s", num(r.min_s));
  measurement("max_s", num(r.max_s));
  measurement("host_s", num(r.host_s));
  measurement("samples_per_s", num(r.samples_per_s));
  // A count: every digit (the peer's is an integer too).
  measurement("flops_per_step", r.flops_per_step ? std::to_string(std::llround(*r.flops_per_step)) : "null");
  measurement("tflops", num(r.tflops()));
  measurement("peak_bytes", std::to_string(r.peak_bytes));
  measurement("peak_reserved_bytes", std::to_string(r.peak_reserved_bytes));
  measurement("speedup_vs_cpu_fp32", num(r.speedup_vs_cpu_fp32));
  if (r.pytorch_samples_per_s || r.vs_pytorch) {
    field("pytorch_samples_per_s", num(r.pytorch_samples_per_s));
    field("vs_pytorch", num(r.vs_pytorch));
  }
  if (!r.pytorch_error.empty()) field("pytorch_error", str(r.pytorch_error));
  field("cpu", str(env.cpu));
  field("threads", std::to_string(env.threads));
  field("gpu", str(r.gpu));
  field("version", str(env.version));
  field("commit", str(env.commit));
  field("onednn", str(env.onednn));
  field("cuda", str(env.cuda));
  field("cudnn", str(env.cudnn));
  if (s.device.rfind("cuda", 0) == 0) {
    field("cudnn_benchmark", cudnn::benchmark() ? "true" : "false");
    field("cudnn_deterministic", cudnn::deterministic() ? "true" : "false");
  }
  return j + "}";
}

}  // namespace kiln::cli::bench
