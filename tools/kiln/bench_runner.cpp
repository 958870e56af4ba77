// kiln bench's runner: warm-up, timed steps, one profiled step, the environment, the JSON line.
#include "tools/kiln/bench_runner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <new>

#include "kiln/kiln.h"
#include "kiln/train/device_choice.h"
#include "src/core/device_runtime.h"
#include "src/io/json.h"
#include "tools/kiln/bench_workloads.h"

namespace kiln::cli::bench {

namespace {
void sync(Device d) {
  if (d.is_cuda()) cuda::synchronize(d.index);
}

// JSON pieces. Non-finite numbers have no JSON spelling: null.
std::string num(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
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
  if (spec.dtype == "fp16" && f.find("avx512fp16") == std::string::npos)
    return "this CPU has no float16 instructions";
  if (spec.dtype == "tf32") return "TF32 is a GPU format (the CPU's fp32 run is the same)";
  return "";
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
  try {
    Workload w = make_workload({spec.model, spec.mode, device, spec.batch, spec.seq, spec.dtype});
    r.optimizer = w.optimizer;
    auto step = [&] { run_with_dtype(spec.dtype, w.step); };
    for (int64_t i = 0; i < spec.warmup; ++i) step();
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
    r.peak_bytes = static_cast<int64_t>(memory_stats(device).peak);
    if (session) {
      double wall = 0;
      for (double t : r.step_s) wall += t;
      r.profile = profiler::format_table(session->stats(), wall);
      session.reset();
    }
    std::optional<double> flops = count_flops([&] {
      step();
      sync(device);
    });
    r.median_s = median(r.step_s);
    r.min_s = *std::min_element(r.step_s.begin(), r.step_s.end());
    r.max_s = *std::max_element(r.step_s.begin(), r.step_s.end());
    r.samples_per_s = static_cast<double>(spec.batch) / r.median_s;
    if (flops && *flops > 0) r.tflops = *flops / r.median_s / 1e12;
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
  std::string j = "{\"framework\": \"kiln\"";
  auto field = [&](const char* k, const std::string& v) { j += std::string(", \"") + k + "\": " + v; };
  field("model", str(s.model));
  field("mode", str(s.mode));
  field("device", str(s.device));
  field("device_name", str(r.device_name));
  field("dtype", str(s.dtype));
  field("batch", std::to_string(s.batch));
  if (takes_seq(s.model)) field("seq", std::to_string(s.seq));
  field("optimizer", str(r.optimizer));
  field("warmup", std::to_string(s.warmup));
  field("steps", std::to_string(s.steps));
  field("median_s", num(r.median_s));
  field("min_s", num(r.min_s));
  field("max_s", num(r.max_s));
  field("host_s", num(r.host_s));
  field("samples_per_s", num(r.samples_per_s));
  field("tflops", num(r.tflops));
  field("peak_bytes", std::to_string(r.peak_bytes));
  field("speedup_vs_cpu_fp32", num(r.speedup_vs_cpu_fp32));
  if (r.pytorch_samples_per_s || r.vs_pytorch) {
    field("pytorch_samples_per_s", num(r.pytorch_samples_per_s));
    field("vs_pytorch", num(r.vs_pytorch));
  }
  field("cpu", str(env.cpu));
  field("threads", std::to_string(env.threads));
  field("gpu", str(r.gpu));
  field("version", str(env.version));
  field("commit", str(env.commit));
  field("onednn", str(env.onednn));
  field("cuda", str(env.cuda));
  field("cudnn", str(env.cudnn));
  if (s.device.rfind("cuda", 0) == 0) field("cudnn_benchmark", cudnn::benchmark() ? "true" : "false");
  return j + "}";
}

}  // namespace kiln::cli::bench
