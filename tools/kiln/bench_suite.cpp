// kiln bench's invocation: plan, run (Kiln and the PyTorch peer alternately), write the results.
#include "tools/kiln/bench_suite.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sys/wait.h>

#include "kiln/kiln.h"
#include "src/io/json.h"
#include "tools/kiln/bench_report.h"
#include "tools/kiln/bench_workloads.h"

namespace kiln::cli::bench {

namespace {
std::string quote(const std::string& p) {
  std::string q = "'";
  for (char c : p) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

void check_pytorch(const SuiteOptions& o) {
  KILN_CHECK(std::filesystem::is_regular_file(o.pytorch_script), "kiln bench", "--vs-pytorch: the PyTorch script ",
             o.pytorch_script, " does not exist (--pytorch-script PATH)");
  const int rc = std::system((quote(o.python) + " -c 'import torch' >/dev/null 2>&1").c_str());
  KILN_CHECK(rc == 0, "kiln bench", "--vs-pytorch needs ", o.python,
             " with PyTorch installed (`", o.python, " -c \"import torch\"` failed; pip install torch torchvision)");
}

// Runs the peer for one spec; its JSON line, or "" when it could not run this spec (a message
// goes to err).
std::string run_peer(const SuiteOptions& o, const RunSpec& s, int threads, std::ostream& err) {
  std::string cmd = quote(o.python) + " " + quote(o.pytorch_script) + " --model " + quote(s.model) + " --mode " +
                    s.mode + " --device " + quote(s.device) + " --dtype " + s.dtype +
                    " --batch " + std::to_string(s.batch) + " --steps " + std::to_string(s.steps) + " --warmup " +
                    std::to_string(s.warmup) + " --threads " + std::to_string(threads);
  if (takes_seq(s.model)) cmd += " --seq " + std::to_string(s.seq);
  if (o.cudnn_benchmark) cmd += " --cudnn-benchmark";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) {
    err << "kiln bench: could not start " << o.python << "\n";
    return "";
  }
  std::string text;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, p)) text.append(buf, n);
  const int status = pclose(p);
  const int rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  if (rc != 0) {
    err << "kiln bench: PyTorch peer " << (rc == 3 ? "does not support " : "failed on ") << s.model << " " << s.mode
        << " " << s.device << " " << s.dtype << " (exit " << rc << ")\n";
    return "";
  }
  // The last non-empty line is the result.
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  const size_t nl = text.rfind('\n');
  return nl == std::string::npos ? text : text.substr(nl + 1);
}

std::optional<double> samples_per_s(const std::string& line, std::ostream& err) {
  try {
    io::json::Value v = io::json::parse(line, "kiln bench", "PyTorch peer output: ");
    for (const auto& m : v.members)
      if (m.key == "samples_per_s" && m.value.kind == io::json::Value::Kind::Number)
        return std::strtod(m.value.text.c_str(), nullptr);
    err << "kiln bench: the PyTorch peer's line has no samples_per_s\n";
  } catch (const Error& e) {
    err << "kiln bench: " << e.what() << "\n";
  }
  return std::nullopt;
}

void write_text(const std::filesystem::path& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << text;
  KILN_CHECK(f.good(), "kiln bench", "could not write ", path.string());
}
}  // namespace

int64_t default_batch(const std::string& model, bool quick) {
  if (quick) return takes_seq(model) || model.rfind("vgg", 0) == 0 ? 2 : 4;
  return model == "resnet50" || is_cnn_op(model) ? 128 : 64;
}

std::vector<RunSpec> plan(const SuiteOptions& o) {
  const char* where = "kiln bench";
  KILN_CHECK(!o.models.empty() && !o.modes.empty() && !o.dtypes.empty(), where, "--models, --modes and --dtypes must not be empty");
  for (const auto& m : o.models) check_model(m);
  for (const auto& m : o.modes) KILN_CHECK(m == "train" || m == "eval", where, "unknown mode '", m, "' (train or eval)");
  for (const auto& d : o.dtypes) check_dtype(d);
  KILN_CHECK(o.batch >= 0, where, "--batch must be at least 1, got ", o.batch);
  std::vector<std::string> devices = o.devices;
  if (devices.empty()) {
    devices.push_back("cpu");
    for (int i = 0; i < cuda::device_count(); ++i) devices.push_back("cuda:" + std::to_string(i));
  }
  for (const auto& d : devices) {
    Device dev(d);
    KILN_CHECK(!dev.is_cuda() || dev.index < cuda::device_count(), where, "device ", d, " is not present (",
               cuda::device_count(), " CUDA device(s) found)");
  }
  // The baseline first: cpu before the accelerators, fp32 before bf16.
  std::stable_partition(devices.begin(), devices.end(), [](const std::string& d) { return Device(d).is_cpu(); });
  std::vector<std::string> dtypes = o.dtypes;
  std::stable_partition(dtypes.begin(), dtypes.end(), [](const std::string& d) { return d == "fp32"; });
  std::vector<RunSpec> specs;
  for (const auto& model : o.models)
    for (const auto& mode : o.modes)
      for (const auto& device : devices)
        for (const auto& dtype : dtypes) {
          RunSpec s{model, mode, device, dtype};
          s.batch = o.batch > 0 ? o.batch : default_batch(model, o.quick);
          s.warmup = o.warmup >= 0 ? o.warmup : 1;
          s.steps = o.steps > 0 ? o.steps : (o.quick ? 2 : 3);
          s.seq = o.seq;
          s.profile = o.profile;
          specs.push_back(s);
        }
  return specs;
}

std::vector<RunResult> run_suite(const SuiteOptions& o, std::ostream& out, std::ostream& err) {
  const std::vector<RunSpec> specs = plan(o);
  if (o.vs_pytorch) check_pytorch(o);
  if (o.cudnn_benchmark) cudnn::set_benchmark(true);
  const std::filesystem::path dir(o.out_dir);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  KILN_CHECK(!ec && std::filesystem::is_directory(dir), "kiln bench", "cannot create the output directory ", o.out_dir,
             ec ? " (" + ec.message() + ")" : std::string());
  const Environment env = environment();
  std::ofstream jsonl(dir / "results.jsonl", std::ios::trunc);
  KILN_CHECK(jsonl.good(), "kiln bench", "could not write ", (dir / "results.jsonl").string());
  std::ofstream peer_jsonl;
  if (o.vs_pytorch) peer_jsonl.open(dir / "pytorch.jsonl", std::ios::trunc);
  const bool tty = isatty(STDERR_FILENO);

  out << "kiln " << env.version << " (" << env.commit << "), " << env.cpu << ", " << env.threads << " threads\n"
      << table_header(o.vs_pytorch) << "\n";
  out.flush();
  std::vector<RunResult> results;
  std::vector<std::string> failures;
  std::map<std::string, double> cpu_fp32;  // model|mode -> samples/s
  auto finish = [&] {
    if (results.empty()) return;
    write_text(dir / "chart.svg", chart_svg(results));
    const std::string tool = write_png((dir / "chart.svg").string(), (dir / "chart.png").string());
    out << "wrote " << (dir / "results.jsonl").string() << ", " << (dir / "chart.svg").string()
        << (tool.empty() ? "" : ", " + (dir / "chart.png").string() + " (" + tool + ")") << "\n";
  };
  try {
    for (const auto& s : specs) {
      const std::string skip = skip_reason(s);
      if (!skip.empty()) {
        out << table_note(s, "skipped (" + skip + ")") << "\n";
        continue;
      }
      const std::string what = s.model + " " + s.mode + " " + s.device + " " + s.dtype + " batch " + std::to_string(s.batch);
      if (tty) err << "\r\033[K  " << what << ": warm-up (" << s.warmup << " steps)" << std::flush;
      std::optional<RunResult> ran;
      try {
        ran = run(s, [&](int64_t i, int64_t n) {
          if (tty) err << "\r\033[K  " << what << ": timing step " << (i + 1) << "/" << n << std::flush;
        });
      } catch (const Error& e) {
        // One workload that fails (out of memory at its batch, an op that would fall back under
        // KILN_FALLBACK=error) is a row of the table; the others still run, and the suite fails
        // at the end naming it.
        if (tty) err << "\r\033[K" << std::flush;
        const std::string message = e.what();
        out << table_note(s, "failed: " + message.substr(0, message.find('\n'))) << "\n" << std::flush;
        failures.push_back(message);
        continue;
      }
      if (tty) err << "\r\033[K" << std::flush;
      RunResult& r = *ran;
      const std::string key = s.model + "|" + s.mode;
      if (s.device == "cpu" && s.dtype == "fp32") cpu_fp32[key] = r.samples_per_s;
      if (cpu_fp32.count(key)) r.speedup_vs_cpu_fp32 = r.samples_per_s / cpu_fp32[key];
      if (o.vs_pytorch) {
        // The run's model is gone, but the caching allocator still holds its memory: hand it back
        // so PyTorch, in its own process, has the machine's memory as Kiln had.
        empty_cache(Device::cpu());
        if (Device d(s.device); d.is_cuda()) empty_cache(d);
        if (tty) err << "  " << what << ": PyTorch" << std::flush;
        const std::string line = run_peer(o, s, env.threads, err);
        if (tty) err << "\r\033[K" << std::flush;
        if (!line.empty()) {
          peer_jsonl << line << "\n" << std::flush;
          r.pytorch_samples_per_s = samples_per_s(line, err);
          if (r.pytorch_samples_per_s && *r.pytorch_samples_per_s > 0)
            r.vs_pytorch = r.samples_per_s / *r.pytorch_samples_per_s;
        }
      }
      jsonl << to_json(r, env) << "\n" << std::flush;
      out << table_row(r, o.vs_pytorch) << "\n" << std::flush;
      if (!r.profile.empty()) out << r.profile << "\n" << std::flush;
      results.push_back(std::move(r));
    }
  } catch (...) {
    if (tty) err << "\r\033[K" << std::flush;
    finish();  // what ran so far still gets its chart
    throw;
  }
  finish();
  KILN_CHECK(failures.empty(), "kiln bench", failures.size(), " of ", specs.size(), " runs failed; the first: ",
             failures.front());
  return results;
}

}  // namespace kiln::cli::bench
