// kiln bench's invocation: plan, run (Kiln and the PyTorch peer alternately), write the results.
#include "tools/kiln/bench_suite.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <sys/wait.h>

#include "kiln/kiln.h"
#include "src/core/parse_number.h"
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

// What the peer said of one spec: its JSON line, or why it has none.
struct PeerOutput {
  std::string line, error;
};

// Runs the peer for one spec (its stderr read with its stdout: the last line of a failed run says
// why, and goes to err too).
PeerOutput run_peer(const SuiteOptions& o, const RunSpec& s, int threads, std::ostream& err) {
  std::string cmd = quote(o.python) + " " + quote(o.pytorch_script) + " --model " + quote(s.model) + " --mode " +
                    s.mode + " --device " + quote(s.device) + " --dtype " + s.dtype +
                    " --batch " + std::to_string(s.batch) + " --steps " + std::to_string(s.steps) + " --warmup " +
                    std::to_string(s.warmup) + " --threads " + std::to_string(threads);
  if (takes_seq(s.model)) cmd += " --seq " + std::to_string(s.seq);
  if (o.cudnn_benchmark) cmd += " --cudnn-benchmark";
  if (s.gradient_checkpointing) cmd += " --gradient-checkpointing";
  // coreutils' timeout, where there is one: a peer that hangs ends as a failed row, not the suite.
  static const bool has_timeout = std::system("command -v timeout >/dev/null 2>&1") == 0;
  if (has_timeout) cmd = "timeout -k 10 " + std::to_string(o.pytorch_timeout_s) + " " + cmd;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) {
    err << "kiln bench: could not start " << o.python << "\n";
    return {"", "could not start " + o.python};
  }
  std::string text;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, p)) text.append(buf, n);
  const int status = pclose(p);
  const int rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  // The last line that is a JSON object is the result; a failed run's last non-empty line says why.
  std::string last, result;
  std::stringstream lines(text);
  for (std::string l; std::getline(lines, l);) {
    while (!l.empty() && (l.back() == '\r' || l.back() == ' ')) l.pop_back();
    if (l.empty()) continue;
    last = l;
    if (l.front() == '{') result = l;
  }
  if (rc == 0 && !result.empty()) return {result, ""};
  const bool timed_out = has_timeout && (rc == 124 || rc == 137);
  const std::string why = timed_out ? "timed out after " + std::to_string(o.pytorch_timeout_s) + " s (--pytorch-timeout)"
                                    : (rc == 3 ? "does not support it (exit 3" : "failed (exit " + std::to_string(rc)) +
                                          ")" + (last.empty() ? "" : ": " + last.substr(0, 300));
  err << "kiln bench: PyTorch peer on " << s.model << " " << s.mode << " " << s.device << " " << s.dtype << " " << why
      << "\n";
  return {"", why};
}

// Written whole or not at all (through a temporary and a rename): a bench killed while writing
// the chart leaves the last one.
void write_text(const std::filesystem::path& path, const std::string& text) {
  const std::filesystem::path tmp = path.string() + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f << text;
    KILN_CHECK(f.good(), "kiln bench", "could not write ", tmp.string());
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  KILN_CHECK(!ec, "kiln bench", "could not write ", path.string(), " (", ec.message(), ")");
}

// The devices as Device::str() spells them ("cpu:0" is "cpu", "cuda" the current device: "cuda:0"
// unless set), each once, in the order given: the peer and the JSON lines then agree, and "cpu" is
// recognised as the baseline.
std::vector<std::string> normalised(const std::vector<std::string>& devices) {
  std::vector<std::string> out;
  for (const auto& d : devices) {
    const std::string name = Device(d).resolved().str();
    if (std::find(out.begin(), out.end(), name) == out.end()) out.push_back(name);
  }
  return out;
}
}  // namespace

std::optional<double> peer_samples_per_s(const std::string& line, std::ostream& err) {
  try {
    const io::json::Value v = io::json::parse(line, "kiln bench", "PyTorch peer output: ");
    for (const auto& m : v.members)
      if (m.key == "samples_per_s" && m.value.kind == io::json::Value::Kind::Number) {
        if (auto x = kiln::detail::parse_number<double>(m.value.text)) return x;  // whatever the locale
      }
    err << "kiln bench: the PyTorch peer's line has no samples_per_s: " << line.substr(0, 200) << "\n";
  } catch (const Error& e) {
    err << "kiln bench: " << e.what() << " (the line: " << line.substr(0, 200) << ")\n";
  }
  return std::nullopt;
}

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
  // PyTorch's peer always runs an untimed first step: Kiln timing its cold first step (plan
  // creation, allocator growth) beside it would not be the same measurement.
  KILN_CHECK(!o.vs_pytorch || o.warmup != 0, where,
             "--vs-pytorch needs --warmup 1 or more (PyTorch's peer always warms up), got --warmup 0");
  std::vector<std::string> devices = o.devices;
  if (devices.empty()) {
    devices.push_back("cpu");
    for (int i = 0; i < cuda::device_count(); ++i) devices.push_back("cuda:" + std::to_string(i));
  }
  for (const auto& d : devices) {
    const Device dev = Device(d).resolved();
    KILN_CHECK(!dev.is_cuda() || dev.index < cuda::device_count(), where, "device ", d, " is not present (",
               cuda::device_count(), " CUDA device(s) found)");
  }
  devices = normalised(devices);
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
          s.gradient_checkpointing = o.gradient_checkpointing && is_bert(model) && mode == "train";
          s.profile = o.profile;
          specs.push_back(s);
        }
  return specs;
}

namespace {
// One invocation's state: the output files, the CPU float32 baselines, the runs so far.
class Suite {
 public:
  Suite(const SuiteOptions& o, std::ostream& out, std::ostream& err) : o_(o), out_(out), err_(err), dir_(o.out_dir) {
    std::error_code ec;
    std::filesystem::create_directories(dir_, ec);
    KILN_CHECK(!ec && std::filesystem::is_directory(dir_), "kiln bench", "cannot create the output directory ",
               o.out_dir, ec ? " (" + ec.message() + ")" : std::string());
    jsonl_.open(dir_ / "results.jsonl", std::ios::trunc);
    KILN_CHECK(jsonl_.good(), "kiln bench", "could not write ", (dir_ / "results.jsonl").string());
    if (o.vs_pytorch) peer_jsonl_.open(dir_ / "pytorch.jsonl", std::ios::trunc);
    out_ << "kiln " << env_.version << " (" << env_.commit << "), " << env_.cpu << ", " << env_.threads << " threads\n";
    if (env_.shadowed) out_ << "KILN_SHADOW is on: every GPU op runs again on the CPU, so GPU times are not Kiln's\n";
    out_ << table_header(o.vs_pytorch) << "\n"
         << std::flush;
  }

  // Runs one spec (or skips it) and records it: a JSON line and a table row whatever happened,
  // PyTorch's peer beside it (a failed Kiln run included: its baseline is the one most wanted).
  void run(const RunSpec& s) {
    RunResult r;
    r.spec = s;
    r.skipped = skip_reason(s);
    if (r.skipped.empty()) measure(r);
    if (o_.vs_pytorch && r.skipped.empty()) add_peer(r);
    record(r);
  }

  // The chart again and, where a converter exists, its PNG; the line naming the files.
  void finish() {
    if (results.empty()) return;
    write_chart();
    const std::string tool = write_png((dir_ / "chart.svg").string(), (dir_ / "chart.png").string());
    out_ << "wrote " << (dir_ / "results.jsonl").string() << ", " << (dir_ / "chart.svg").string()
         << (tool.empty() ? "" : ", " + (dir_ / "chart.png").string() + " (" + tool + ")") << "\n";
  }

  void clear_progress() {
    if (tty_) err_ << "\r\033[K" << std::flush;
  }

  std::vector<RunResult> results;      // the measured runs
  std::vector<std::string> failures;  // the failed runs' errors

 private:
  void progress(const std::string& what) {
    if (tty_) err_ << "\r\033[K  " << what << std::flush;
  }

  static std::string describe(const RunSpec& s) {
    return s.model + " " + s.mode + " " + s.device + " " + s.dtype + " batch " + std::to_string(s.batch);
  }

  void measure(RunResult& r) {
    const RunSpec s = r.spec;
    progress(describe(s) + ": warm-up (" + std::to_string(s.warmup) + " steps)");
    try {
      r = bench::run(s, [&](int64_t i, int64_t n) {
        progress(describe(s) + ": timing step " + std::to_string(i + 1) + "/" + std::to_string(n));
      });
    } catch (const std::exception& e) {
      // One workload that fails (out of memory at its batch, an op that would fall back under
      // KILN_FALLBACK=error) is a row of the table; the others still run, and the suite fails
      // at the end naming it.
      const std::string message = e.what();
      failures.push_back(message);
      r.error = message.substr(0, message.find('\n'));
    }
    clear_progress();
    if (!r.measured()) return;
    const std::string key = s.model + "|" + s.mode;
    if (s.device == "cpu" && s.dtype == "fp32") cpu_fp32_[key] = r.samples_per_s;
    if (cpu_fp32_.count(key)) r.speedup_vs_cpu_fp32 = r.samples_per_s / cpu_fp32_[key];
  }

  void add_peer(RunResult& r) {
    // The run's model is gone, but the caching allocator still holds its memory: hand it back so
    // PyTorch, in its own process, has the machine's memory as Kiln had.
    empty_cache(Device::cpu());
    if (Device d(r.spec.device); d.is_cuda()) empty_cache(d);
    progress(describe(r.spec) + ": PyTorch");
    const PeerOutput peer = run_peer(o_, r.spec, env_.threads, err_);
    clear_progress();
    r.pytorch_error = peer.error;
    if (peer.line.empty()) return;
    const std::string& line = peer.line;
    r.pytorch_samples_per_s = peer_samples_per_s(line, err_);
    if (!r.pytorch_samples_per_s) {  // not a result line: not saved
      r.pytorch_error = "its line has no samples_per_s: " + line.substr(0, 200);
      return;
    }
    peer_jsonl_ << line << "\n" << std::flush;
    if (r.measured() && *r.pytorch_samples_per_s > 0) r.vs_pytorch = r.samples_per_s / *r.pytorch_samples_per_s;
  }

  void record(RunResult& r) {
    jsonl_ << to_json(r, env_) << "\n" << std::flush;
    out_ << table_row(r, o_.vs_pytorch) << "\n" << std::flush;
    if (!r.measured()) return;
    if (!r.profile.empty()) out_ << r.profile << "\n" << std::flush;
    results.push_back(std::move(r));
    write_chart();  // after every run: a bench stopped by a signal keeps the chart of what it ran
  }

  void write_chart() { write_text(dir_ / "chart.svg", chart_svg(results)); }

  const SuiteOptions& o_;
  std::ostream &out_, &err_;
  const std::filesystem::path dir_;
  const Environment env_ = environment();
  const bool tty_ = isatty(STDERR_FILENO);
  std::ofstream jsonl_, peer_jsonl_;
  std::map<std::string, double> cpu_fp32_;  // model|mode -> samples/s
};
}  // namespace

std::vector<RunResult> run_suite(const SuiteOptions& o, std::ostream& out, std::ostream& err) {
  const std::vector<RunSpec> specs = plan(o);
  if (o.vs_pytorch) check_pytorch(o);
  if (o.cudnn_benchmark) cudnn::set_benchmark(true);
  if (o.cudnn_nondeterministic) cudnn::set_deterministic(false);
  Suite suite(o, out, err);
  try {
    for (const auto& s : specs) suite.run(s);
  } catch (...) {
    suite.clear_progress();
    suite.finish();  // what ran so far still gets its chart
    throw;
  }
  suite.finish();
  KILN_CHECK(suite.failures.empty(), "kiln bench", suite.failures.size(), " of ", specs.size(),
             " runs failed; the first: ", suite.failures.front());
  return std::move(suite.results);
}

}  // namespace kiln::cli::bench
