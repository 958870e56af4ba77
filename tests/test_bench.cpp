// kiln bench (tools/kiln/bench_*): runs on tiny batches produce JSON lines that parse and carry
// every field, the suite writes results.jsonl and a well-formed chart, and bad requests are errors.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <clocale>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

#include "core/parse_number.h"
#include "io/json.h"
#include "kiln/kiln.h"
#include "test_util.h"
#include "tools/kiln/args.h"
#include "tools/kiln/bench_report.h"
#include "tools/kiln/bench_runner.h"
#include "tools/kiln/bench_suite.h"
#include "tools/kiln/bench_workloads.h"

namespace kiln::cli::bench {
namespace {

using io::json::Value;

const Value& member(const Value& v, std::string_view key) {  // a view: see test_text_tokenizer.cpp
  for (const auto& m : v.members)
    if (m.key == key) return m.value;
  ADD_FAILURE() << "no field " << key;
  static Value none;
  return none;
}
double number(const Value& v) {  // the same under a decimal-comma locale
  EXPECT_EQ(v.kind, Value::Kind::Number) << v.describe();
  return kiln::detail::parse_number<double>(v.text).value_or(NAN);
}

// Every field the issue asks results.jsonl to carry.
// clang-format off
const std::vector<std::string> kFields = {"model", "mode", "device", "device_name", "dtype", "batch", "steps",
                                          "median_s", "min_s", "max_s", "host_s", "samples_per_s", "flops_per_step", "tflops",
                                          "peak_bytes", "peak_reserved_bytes", "speedup_vs_cpu_fp32", "cpu", "threads", "gpu", "version",
                                          "commit", "onednn", "cuda", "cudnn", "warmup", "profiled", "fallbacks", "shadowed"};
// clang-format on

void expect_run_line(const std::string& line, const RunSpec& spec) {
  Value v = io::json::parse(line, "test", "");
  ASSERT_EQ(v.kind, Value::Kind::Object);
  for (const auto& f : kFields) member(v, f);
  EXPECT_EQ(member(v, "model").text, spec.model);
  EXPECT_EQ(member(v, "mode").text, spec.mode);
  EXPECT_EQ(member(v, "device").text, spec.device);
  EXPECT_EQ(member(v, "dtype").text, spec.dtype);
  EXPECT_EQ(member(v, "batch").integer, spec.batch);
  EXPECT_EQ(member(v, "steps").integer, spec.steps);
  EXPECT_EQ(member(v, "profiled").boolean, spec.profile);
  const double med = number(member(v, "median_s")), lo = number(member(v, "min_s")), hi = number(member(v, "max_s"));
  EXPECT_GT(lo, 0);
  EXPECT_LE(lo, med * (1 + 1e-5));
  EXPECT_LE(med, hi * (1 + 1e-5));
  const double host = number(member(v, "host_s"));  // part of a step's time (all of it on the CPU)
  EXPECT_GT(host, 0);
  EXPECT_LE(host, hi * (1 + 1e-5));
  EXPECT_NEAR(number(member(v, "samples_per_s")), spec.batch / med, 1e-4 * spec.batch / med);
  EXPECT_GT(member(v, "peak_bytes").integer, 0);
  EXPECT_GE(member(v, "peak_reserved_bytes").integer, member(v, "peak_bytes").integer);
  EXPECT_EQ(member(v, "threads").integer, get_num_threads());
  EXPECT_EQ(member(v, "gpu").kind, spec.device == "cpu" ? Value::Kind::Null : Value::Kind::String);
  EXPECT_FALSE(member(v, "version").text.empty());
  EXPECT_FALSE(member(v, "commit").text.empty());
  const Value& tflops = member(v, "tflops");
  EXPECT_TRUE(tflops.kind == Value::Kind::Null || number(tflops) > 0) << tflops.describe();
}

RunSpec tiny(const std::string& model, const std::string& mode) {
  RunSpec s{model, mode, "cpu", "fp32"};
  s.batch = 1;
  s.warmup = 0;
  s.steps = 2;
  s.seq = 16;
  return s;
}

void expect_error(const std::function<void()>& fn, const std::string& want) {
  try {
    fn();
    ADD_FAILURE() << "no error; wanted one containing " << want;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).rfind("[kiln bench] ", 0), 0u) << e.what();
  }
}

TEST(Bench, CnnAndBertRunsGiveJsonLinesWithEveryField) {
  const Environment env = environment();
  for (const auto& [model, mode] : std::vector<std::pair<std::string, std::string>>{
           {"resnet18", "eval"}, {"bert-tiny", "train"}, {"bert-tiny", "eval"}, {"sdpa", "train"}, {"sdpa", "eval"},
           {"bn-relu", "train"}, {"bn-relu", "eval"}, {"maxpool", "train"}, {"maxpool", "eval"}}) {
    SCOPED_TRACE(model + " " + mode);
    const RunSpec spec = tiny(model, mode);
    RunResult r = run(spec);
    ASSERT_EQ(r.step_s.size(), 2u);
    const bool op_alone = model == "sdpa" || is_cnn_op(model);
    EXPECT_EQ(r.optimizer, mode == "eval" || op_alone ? "none" : "adamw");
    const std::string line = to_json(r, env);
    expect_run_line(line, spec);
    if (takes_seq(model)) {
      EXPECT_EQ(member(io::json::parse(line, "test", ""), "seq").integer, 16);
    }
    // The attention's FLOPs, counted by the profiler: 4 S^2 E per head forward (QK^T and PV),
    // 2.5 times that with the backward (10 S^2 E: its five products).
    if (model == "sdpa") {
      ASSERT_TRUE(r.tflops().has_value());
      const double fwd = 4.0 * 12 * 16 * 16 * 64, flops = *r.tflops() * 1e12 * r.median_s;
      EXPECT_NEAR(flops, mode == "eval" ? fwd : 3.5 * fwd, 1e-3 * fwd);
      EXPECT_EQ(member(io::json::parse(line, "test", ""), "flops_per_step").integer, mode == "eval" ? fwd : 3.5 * fwd);
    }
  }
}

TEST(Bench, JsonEscapesNamesAndWritesNullForMissingNumbers) {
  RunResult r;
  r.spec = tiny("resnet18", "train");
  r.device_name = "CPU \"quoted\" \\ name\n";
  r.median_s = r.min_s = r.max_s = 0.5;
  r.samples_per_s = 2;
  Environment env = environment();
  env.cpu = "tab\there";
  Value v = io::json::parse(to_json(r, env), "test", "");
  EXPECT_EQ(member(v, "device_name").text, r.device_name);
  EXPECT_EQ(member(v, "cpu").text, env.cpu);
  EXPECT_EQ(member(v, "tflops").kind, Value::Kind::Null);
  EXPECT_EQ(member(v, "speedup_vs_cpu_fp32").kind, Value::Kind::Null);
}

// A run that failed or was skipped still has its line: null numbers and why, escaped.
TEST(Bench, FailedAndSkippedRunsHaveALineWithNullNumbersAndWhy) {
  const Environment env = environment();
  RunResult r;
  r.spec = tiny("resnet18", "train");
  r.error = "[kiln bench] batch 1 does not fit on \"cpu\"\t(x)";
  r.pytorch_samples_per_s = 3;
  Value v = io::json::parse(to_json(r, env), "test", "");
  EXPECT_EQ(member(v, "error").text, r.error);
  for (const char* k : {"median_s", "min_s", "max_s", "host_s", "samples_per_s", "flops_per_step", "tflops", "peak_bytes",
                        "speedup_vs_cpu_fp32", "vs_pytorch", "device_name", "optimizer"})
    EXPECT_EQ(member(v, k).kind, Value::Kind::Null) << k;
  EXPECT_EQ(number(member(v, "pytorch_samples_per_s")), 3);  // the peer ran for it
  r.error.clear();
  r.pytorch_samples_per_s.reset();
  r.skipped = "TF32 is a GPU format";
  v = io::json::parse(to_json(r, env), "test", "");
  EXPECT_EQ(member(v, "skipped").text, r.skipped);
  EXPECT_EQ(member(v, "samples_per_s").kind, Value::Kind::Null);
  EXPECT_EQ(member(v, "peak_bytes").kind, Value::Kind::Null);
  // The table says the same.
  EXPECT_NE(table_row(r, false).find("skipped (TF32 is a GPU format)"), std::string::npos);
  r.skipped.clear();
  r.error = "[kiln bench] out of memory";
  r.pytorch_samples_per_s = 3;
  EXPECT_NE(table_row(r, true).find("failed: [kiln bench] out of memory; PyTorch 3.00 samples/s"), std::string::npos);
}

// Rows timed under the profiler (its CUDA events around every op) say so.
TEST(Bench, ProfiledRunsSaySo) {
  RunResult r;
  r.spec = tiny("resnet18", "eval");
  const Environment env = environment();
  EXPECT_FALSE(member(io::json::parse(to_json(r, env), "test", ""), "profiled").boolean);
  r.profiled = true;
  const Value v = io::json::parse(to_json(r, env), "test", "");
  EXPECT_EQ(member(v, "profiled").kind, Value::Kind::Bool);
  EXPECT_TRUE(member(v, "profiled").boolean);
  EXPECT_NE(table_row(r, false).find("(profiled)"), std::string::npos);
  // A session of the process's own (KILN_PROFILE=1) times the steps as --profile's does.
  profiler::Session session;
  EXPECT_TRUE(run(tiny("resnet18", "eval")).profiled);
}

// A run whose ops ran on the CPU instead of its device says which, in its line and its row.
TEST(Bench, FallbacksOfARunAreInItsLineAndRow) {
  RunResult r;
  r.spec = tiny("resnet18", "eval");
  r.spec.device = "cuda:0";
  r.median_s = r.min_s = r.max_s = 0.5;
  r.fallbacks = {{"Embedding", 2}, {"LayerNormBackward", 4}};
  const Value v = io::json::parse(to_json(r, environment()), "test", "");
  EXPECT_EQ(member(member(v, "fallbacks"), "LayerNormBackward").integer, 4);
  EXPECT_EQ(member(v, "shadowed").kind, Value::Kind::Bool);
  EXPECT_NE(table_row(r, false).find("(ran on the cpu: Embedding x2 LayerNormBackward x4)"), std::string::npos);
  EXPECT_EQ(member(io::json::parse(to_json(run(tiny("resnet18", "eval")), environment()), "test", ""), "fallbacks")
                .members.size(), 0u);
}

// The FLOPs come from the first warm-up step, as PyTorch's peer counts them: no extra step, unless
// there is no warm-up.
TEST(Bench, FlopsAreCountedInTheFirstWarmUpStep) {
  const Tensor a = randn({8, 8}), b = randn({8, 8});
  for (int64_t warmup : {0, 1, 2}) {
    SCOPED_TRACE(warmup);
    RunSpec spec = tiny("resnet18", "eval");
    spec.warmup = warmup;
    spec.steps = 3;
    int steps = 0;
    RunResult r;
    measure(spec, Device::cpu(), [&] {
      ++steps;
      matmul(a, b);
    }, r);
    EXPECT_EQ(steps, warmup + 3 + (warmup == 0 ? 1 : 0));
    ASSERT_EQ(r.step_s.size(), 3u);
    ASSERT_TRUE(r.tflops().has_value());
    EXPECT_NEAR(*r.tflops() * 1e12 * r.median_s, 2.0 * 8 * 8 * 8, 1e-6);
  }
}

TEST(Bench, Median) {
  EXPECT_EQ(median({3, 1, 2}), 2);
  EXPECT_EQ(median({4, 1, 3, 2}), 2.5);
  EXPECT_THROW(median({}), Error);
}

TEST(Bench, PlanPutsTheBaselineFirstAndUsesTheSeedsBatches) {
  SuiteOptions o;
  o.dtypes = {"bf16", "fp32"};
  o.devices = {"cpu"};
  auto specs = plan(o);
  ASSERT_EQ(specs.size(), 3u * 2 * 2);
  EXPECT_EQ(specs[0].model, "resnet50");
  EXPECT_EQ(specs[0].batch, 128);
  EXPECT_EQ(specs[0].dtype, "fp32");
  EXPECT_EQ(specs[1].dtype, "bf16");
  EXPECT_EQ(specs[4].model, "bert-base");
  EXPECT_EQ(specs[4].batch, 64);
  EXPECT_EQ(specs[8].model, "vgg16");
  EXPECT_EQ(specs[8].batch, 64);
  o.quick = true;
  for (const auto& s : plan(o)) {
    EXPECT_LE(s.batch, 4);
    EXPECT_EQ(s.steps, 2);
  }
}

// "cpu:0" is the CPU (the baseline, and the peer's "cpu"), "cuda" is "cuda:0"; each device once.
TEST(Bench, PlanNamesEachDeviceOnceAsDeviceDoes) {
  SuiteOptions o;
  o.models = {"resnet18"};
  o.modes = {"eval"};
  o.devices = {"cpu:0", "cpu"};
  auto specs = plan(o);
  ASSERT_EQ(specs.size(), 1u);
  EXPECT_EQ(specs[0].device, "cpu");
  if (cuda::device_count() > 0) {
    o.devices = {"cuda", "cuda:0", "cpu:0"};
    specs = plan(o);
    ASSERT_EQ(specs.size(), 2u);
    EXPECT_EQ(specs[0].device, "cpu");
    EXPECT_EQ(specs[1].device, "cuda:0");
  }
}

// PyTorch's peer always runs an untimed step first: Kiln's cold first step beside it is refused.
TEST(Bench, VsPytorchNeedsAWarmUp) {
  SuiteOptions o;
  o.models = {"resnet18"};
  o.devices = {"cpu"};
  o.vs_pytorch = true;
  o.warmup = 0;
  expect_error([&] { plan(o); }, "--vs-pytorch needs --warmup 1 or more");
  o.warmup = -1;  // the default: 1
  EXPECT_EQ(plan(o).front().warmup, 1);
  o.vs_pytorch = false;
  o.warmup = 0;
  EXPECT_EQ(plan(o).front().warmup, 0);
}

TEST(Bench, Bf16IsSkippedExactlyOnACpuWithoutBfloat16Instructions) {
  RunSpec s = tiny("resnet18", "eval");
  EXPECT_EQ(skip_reason(s), "");
  s.dtype = "bf16";
  const std::string f = build_info().cpu_features;
  const bool native = f.find("avx512bf16") != std::string::npos || f.find("amx") != std::string::npos;
  EXPECT_EQ(skip_reason(s).empty(), native) << f;
}

TEST(Bench, BadRequestsAreClearErrors) {
  SuiteOptions o;
  o.models = {"resnet7"};
  expect_error([&] { plan(o); }, "unknown model 'resnet7'");
  o.models = {"resnet18"};
  o.devices = {"cpu", "cuda:" + std::to_string(cuda::device_count() + 2)};
  expect_error([&] { plan(o); }, "is not present");
  o.devices = {"cpu"};
  o.modes = {"infer"};
  expect_error([&] { plan(o); }, "unknown mode 'infer'");
  o.modes = {"eval"};
  o.dtypes = {"fp8"};
  expect_error([&] { plan(o); }, "unknown dtype 'fp8'");
  RunSpec s = tiny("resnet18", "eval");
  s.batch = 0;
  expect_error([&] { run(s); }, "batch must be at least 1");
  s.batch = 1;
  s.seq = 1000;
  s.model = "bert-tiny";
  expect_error([&] { run(s); }, "--seq must be in [1, 512]");
}

TEST(Bench, ABatchThatCannotBeAllocatedSaysSo) {
  // 10^5 images of 3x224x224 floats are 60 GB: beyond this machine, and beyond a limit we set.
  const size_t limit = memory_stats(Device::cpu()).limit;
  set_memory_limit(Device::cpu(), size_t{4} << 30);
  RunSpec s = tiny("resnet18", "eval");
  s.batch = 100000;
  expect_error([&] { run(s); }, "batch 100000 does not fit on cpu");
  set_memory_limit(Device::cpu(), limit);
}

// Tags open and close in order; self-closing tags are fine. Enough to say the SVG is well-formed
// for what chart_svg writes (no comments, CDATA or processing instructions).
bool tags_balanced(const std::string& s) {
  std::vector<std::string> stack;
  for (size_t i = s.find('<'); i != std::string::npos; i = s.find('<', i + 1)) {
    const size_t end = s.find('>', i);
    if (end == std::string::npos) return false;
    std::string tag = s.substr(i + 1, end - i - 1);
    if (tag.empty()) return false;
    if (tag.back() == '/') continue;
    if (tag[0] == '/') {
      if (stack.empty() || stack.back() != tag.substr(1)) return false;
      stack.pop_back();
    } else {
      stack.push_back(tag.substr(0, tag.find(' ')));
    }
  }
  return stack.empty();
}

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t i = s.find(what); i != std::string::npos; i = s.find(what, i + 1)) ++n;
  return n;
}

RunResult fake(const std::string& model, const std::string& mode, const std::string& device, double sps) {
  RunResult r;
  r.spec = {model, mode, device, "fp32"};
  r.samples_per_s = sps;
  return r;
}

TEST(Bench, ChartHasABarPerRunInEachKind) {
  // CPU only: samples/s bars and a note.
  std::vector<RunResult> runs = {fake("resnet50", "train", "cpu", 2), fake("resnet50", "eval", "cpu", 6),
                                 fake("bert-base", "train", "cpu", 1)};
  for (auto& r : runs) r.speedup_vs_cpu_fp32 = 1.0;
  std::string svg = chart_svg(runs);
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_TRUE(tags_balanced(svg));
  EXPECT_EQ(count(svg, "class=\"bar\""), 3u);
  EXPECT_NE(svg.find("samples/s instead of speed-ups"), std::string::npos);
  // With an accelerator run: speed-ups.
  runs.push_back(fake("resnet50", "train", "cuda:0", 14));
  runs.back().speedup_vs_cpu_fp32 = 7.0;
  svg = chart_svg(runs);
  EXPECT_TRUE(tags_balanced(svg));
  EXPECT_EQ(count(svg, "class=\"bar\""), 4u);
  EXPECT_NE(svg.find("Speed-up"), std::string::npos);
  EXPECT_NE(svg.find(">7x<"), std::string::npos);
  EXPECT_EQ(svg.find(">n/a<"), std::string::npos);
}

// A run whose CPU float32 baseline failed keeps the others' speed-ups: its place says n/a.
TEST(Bench, ChartMarksARunWithoutABaselineNa) {
  std::vector<RunResult> runs = {fake("resnet50", "train", "cpu", 2), fake("resnet50", "train", "cuda:0", 42),
                                 fake("bert-base", "train", "cuda:0", 9)};
  runs[0].speedup_vs_cpu_fp32 = 1.0;
  runs[1].speedup_vs_cpu_fp32 = 21.0;
  const std::string svg = chart_svg(runs);
  EXPECT_TRUE(tags_balanced(svg));
  EXPECT_NE(svg.find("Speed-up"), std::string::npos);
  EXPECT_EQ(count(svg, "class=\"bar\""), 2u);
  EXPECT_NE(svg.find(">21x<"), std::string::npos);
  EXPECT_EQ(count(svg, ">n/a<"), 1u);
}

// Beside PyTorch: the speed-up over the CPU and, under it, Kiln over PyTorch per run (the GPU
// speed-up did not appear once any PyTorch number existed).
TEST(Bench, ChartShowsTheSpeedUpAndKilnOverPytorch) {
  std::vector<RunResult> runs = {fake("resnet50", "train", "cpu", 2), fake("resnet50", "train", "cuda:0", 14),
                                 fake("resnet50", "eval", "cuda:0", 60)};
  runs[0].speedup_vs_cpu_fp32 = 1.0;
  runs[1].speedup_vs_cpu_fp32 = 7.0;
  runs[0].pytorch_samples_per_s = 1;
  runs[0].vs_pytorch = 2.0;
  runs[1].pytorch_samples_per_s = 20;
  runs[1].vs_pytorch = 0.7;
  const std::string svg = chart_svg(runs);
  EXPECT_TRUE(tags_balanced(svg));
  EXPECT_NE(svg.find("Speed-up over the CPU"), std::string::npos);
  EXPECT_NE(svg.find("Kiln over PyTorch"), std::string::npos);
  EXPECT_LT(svg.find("Speed-up over the CPU"), svg.find("Kiln over PyTorch"));
  EXPECT_EQ(count(svg, "class=\"bar\""), 2u);       // the eval run has no CPU baseline
  EXPECT_EQ(count(svg, "class=\"bar peer\""), 2u);  // ... nor a PyTorch number
  EXPECT_EQ(count(svg, ">n/a<"), 2u);
  EXPECT_NE(svg.find(">0.7x<"), std::string::npos);
  EXPECT_NE(svg.find(">2x<"), std::string::npos);
}

TEST(Bench, ChartLabelsSmallAndLargeRatios) {
  std::vector<RunResult> runs = {fake("vgg16", "eval", "cpu", 10), fake("vgg16", "eval", "cpu", 0.04),
                                 fake("vgg16", "eval", "cuda:0", 1234)};
  runs[1].spec.dtype = "fp16";
  runs[0].speedup_vs_cpu_fp32 = 1.0;
  runs[1].speedup_vs_cpu_fp32 = 0.004;
  runs[2].speedup_vs_cpu_fp32 = 123.4;
  const std::string svg = chart_svg(runs);
  EXPECT_NE(svg.find(">0.004x<"), std::string::npos) << svg;
  EXPECT_NE(svg.find(">123x<"), std::string::npos) << svg;
  EXPECT_EQ(svg.find("0.0x"), std::string::npos);
}

TEST(Bench, ChartEscapesNames) {
  const std::string svg = chart_svg({fake("a<b>&\"c", "eval", "cpu", 1)});
  EXPECT_TRUE(tags_balanced(svg));
  EXPECT_NE(svg.find("a&lt;b&gt;&amp;&quot;c"), std::string::npos);
}

class BenchSuite : public test::TempDirTest {};

std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream f(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(f, line);) lines.push_back(line);
  return lines;
}

TEST_F(BenchSuite, QuickResnet18WritesResultsAndChart) {
  SuiteOptions o;
  o.models = {"resnet18"};
  o.devices = {"cpu"};
  o.dtypes = {"fp32", "fp16"};  // the CPU skips fp16: a line saying so, no run
  o.quick = true;
  o.batch = 1;  // --quick's batch 4 is the CLI smoke test's; here the cheapest run
  o.steps = 1;
  o.warmup = 0;
  o.out_dir = dir_ + "/out";
  std::ostringstream out, err;
  auto results = run_suite(o, out, err);
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results[0].spec.mode, "train");
  EXPECT_EQ(results[1].spec.mode, "eval");
  ASSERT_TRUE(results[1].speedup_vs_cpu_fp32.has_value());
  EXPECT_DOUBLE_EQ(*results[1].speedup_vs_cpu_fp32, 1.0);
  const std::vector<std::string> lines = read_lines(o.out_dir + "/results.jsonl");
  ASSERT_EQ(lines.size(), 4u);  // train fp32, train fp16 (skipped), eval fp32, eval fp16 (skipped)
  expect_run_line(lines[0], results[0].spec);
  expect_run_line(lines[2], results[1].spec);
  for (size_t i : {1, 3}) {
    const Value v = io::json::parse(lines[i], "test", "");
    EXPECT_EQ(member(v, "dtype").text, "fp16");
    EXPECT_NE(member(v, "skipped").text.find("no fast float16 path on the CPU"), std::string::npos) << lines[i];
    EXPECT_EQ(member(v, "samples_per_s").kind, Value::Kind::Null);
  }
  std::ifstream svg_in(o.out_dir + "/chart.svg");
  std::string svg((std::istreambuf_iterator<char>(svg_in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_TRUE(tags_balanced(svg));
  EXPECT_EQ(count(svg, "class=\"bar\""), 2u);
  // The table: a header and one row per run.
  EXPECT_NE(out.str().find("samples/s"), std::string::npos);
  EXPECT_EQ(count(out.str(), "resnet18   "), 4u);
  EXPECT_EQ(count(out.str(), "skipped (no fast float16 path"), 2u);
}

// A workload that runs out of memory is a row of the table; the next one still runs, and the
// suite then fails naming it (the seed's models on a GPU: one batch too large loses one row).
TEST_F(BenchSuite, AFailedRunIsARowAndTheOthersStillRun) {
  SuiteOptions o;
  o.models = {"resnet18"};
  o.devices = {"cpu"};
  o.batch = 1;
  o.steps = 1;
  o.warmup = 0;
  o.out_dir = dir_ + "/out";
  // ResNet-18's weights are 47 MB: evaluation fits in 100 MB more than what is in use now,
  // training (weights, gradients and SGD momentum) does not.
  const size_t limit = memory_stats(Device::cpu()).limit;
  empty_cache(Device::cpu());
  set_memory_limit(Device::cpu(), memory_stats(Device::cpu()).allocated + (100u << 20));
  std::ostringstream out, err;
  try {
    (void)run_suite(o, out, err);
    ADD_FAILURE() << "the suite did not report its failed run";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("1 of 2 runs failed; the first: [kiln bench] batch 1 does not fit on cpu"),
              std::string::npos)
        << e.what();
  }
  set_memory_limit(Device::cpu(), limit);
  EXPECT_NE(out.str().find("failed: [kiln bench] batch 1 does not fit"), std::string::npos) << out.str();
  // Both runs have their line; the failed one with its error and no numbers.
  const std::vector<std::string> lines = read_lines(o.out_dir + "/results.jsonl");
  ASSERT_EQ(lines.size(), 2u) << out.str();
  const Value failed = io::json::parse(lines[0], "test", "");
  EXPECT_EQ(member(failed, "mode").text, "train");
  EXPECT_EQ(member(failed, "error").text.rfind("[kiln bench] batch 1 does not fit on cpu", 0), 0u) << lines[0];
  EXPECT_EQ(member(failed, "samples_per_s").kind, Value::Kind::Null);
  EXPECT_NE(lines[1].find("\"mode\": \"eval\""), std::string::npos) << lines[1];
}

// A stand-in for python3 with PyTorch and the peer script: `-c` (kiln bench's import check)
// succeeds; a run appends to LOG whether chart.svg existed when it started, then prints its
// result line (sdpa's evaluation after a warning on stderr), or for resnet18's evaluation a stray
// line that is not JSON and exit status 2.
std::string fake_peer(const std::string& dir, const std::string& out_dir) {
  const std::string path = dir + "/python";
  std::ofstream(path) << "#!/bin/sh\n"
                         "case \"$1\" in -c) exit 0;; esac\n"
                         "if [ -f '" << out_dir << "/chart.svg' ]; then echo chart; else echo none; fi"
                         " >>'" << dir << "/log'\n"
                         "case \"$*\" in\n"
                         "  *resnet18*'--mode eval'*) echo 'a stray line'; exit 2;;\n"
                         "  *sdpa*'--mode eval'*) echo 'UserWarning: a warning' >&2;"
                         " echo '{\"framework\": \"pytorch\", \"samples_per_s\": 2.5}';;\n"
                         "  *) echo '{\"framework\": \"pytorch\", \"samples_per_s\": 2.5}';;\n"
                         "esac\n";
  chmod(path.c_str(), 0755);
  return path;
}

// One step of sdpa at batch 1 on the CPU beside a peer that `python` stands in for (its script too).
SuiteOptions sdpa_beside_a_peer(const std::string& out_dir, const std::string& python) {
  SuiteOptions o;
  o.models = {"sdpa"};
  o.devices = {"cpu"};
  o.batch = 1;
  o.steps = 1;
  o.warmup = 1;
  o.seq = 16;
  o.out_dir = out_dir;
  o.vs_pytorch = true;
  o.python = o.pytorch_script = python;
  return o;
}

// The peer still runs for a failed Kiln run (its baseline is the one most wanted); only its
// result lines go into pytorch.jsonl; the chart is rewritten after each run (a bench stopped by a
// signal keeps it).
TEST_F(BenchSuite, ThePeerRunsForAFailedRunAndOnlyItsResultLinesAreSaved) {
  SuiteOptions o = sdpa_beside_a_peer(dir_ + "/out", fake_peer(dir_, dir_ + "/out"));
  o.models = {"sdpa", "resnet18"};
  const size_t limit = memory_stats(Device::cpu()).limit;
  empty_cache(Device::cpu());
  set_memory_limit(Device::cpu(), memory_stats(Device::cpu()).allocated + (100u << 20));  // resnet18 train fails
  std::ostringstream out, err;
  EXPECT_THROW((void)run_suite(o, out, err), Error);
  set_memory_limit(Device::cpu(), limit);
  const std::vector<std::string> lines = read_lines(o.out_dir + "/results.jsonl");
  ASSERT_EQ(lines.size(), 4u) << out.str();
  const Value failed = io::json::parse(lines[2], "test", "");
  EXPECT_EQ(member(failed, "model").text, "resnet18");
  EXPECT_EQ(member(failed, "mode").text, "train");
  EXPECT_EQ(member(failed, "error").kind, Value::Kind::String);
  EXPECT_EQ(number(member(failed, "pytorch_samples_per_s")), 2.5);
  EXPECT_EQ(member(failed, "vs_pytorch").kind, Value::Kind::Null);
  EXPECT_NE(out.str().find("; PyTorch 2.50 samples/s"), std::string::npos) << out.str();
  const Value sdpa = io::json::parse(lines[0], "test", "");
  const double ratio = number(member(sdpa, "samples_per_s")) / 2.5;  // 6 digits each
  EXPECT_NEAR(number(member(sdpa, "vs_pytorch")), ratio, 1e-5 * ratio);
  // sdpa train, sdpa eval, resnet18 train: the stray line is not saved, and it is reported.
  const std::vector<std::string> peer = read_lines(o.out_dir + "/pytorch.jsonl");
  ASSERT_EQ(peer.size(), 3u);
  for (const auto& line : peer) EXPECT_NO_THROW(io::json::parse(line, "test", "")) << line;
  EXPECT_NE(err.str().find("a stray line"), std::string::npos) << err.str();
  // Why the peer gave no number is in the run's line and row.
  const Value eval = io::json::parse(lines[3], "test", "");
  EXPECT_EQ(member(eval, "pytorch_error").text, "failed (exit 2): a stray line");
  EXPECT_NE(out.str().find("(PyTorch failed (exit 2): a stray line)"), std::string::npos) << out.str();
  const Value sdpa_eval = io::json::parse(lines[1], "test", "");  // its peer warned on stderr, then gave its line
  EXPECT_EQ(number(member(sdpa_eval, "pytorch_samples_per_s")), 2.5);
  EXPECT_TRUE(std::none_of(sdpa_eval.members.begin(), sdpa_eval.members.end(),
                           [](const auto& m) { return m.key == "pytorch_error"; }));
  // The second peer run (after sdpa train was recorded) found its chart.
  const std::vector<std::string> log = read_lines(dir_ + "/log");
  ASSERT_EQ(log.size(), 4u);
  EXPECT_EQ(log[0], "none");
  EXPECT_EQ(log[1], "chart");
}

// A peer that hangs (a CUDA start that never returns) is stopped after --pytorch-timeout, and its
// row says so; without the timeout this one would give its number after 30 s.
TEST_F(BenchSuite, AHungPeerIsStoppedAndItsRowSaysSo) {
  if (std::system("command -v timeout >/dev/null 2>&1") != 0) GTEST_SKIP() << "no timeout(1) on this machine";
  const std::string python = dir_ + "/python";
  std::ofstream(python) << "#!/bin/sh\ncase \"$1\" in -c) exit 0;; esac\nsleep 30\n"
                           "echo '{\"framework\": \"pytorch\", \"samples_per_s\": 2.5}'\n";
  chmod(python.c_str(), 0755);
  SuiteOptions o = sdpa_beside_a_peer(dir_ + "/out", python);
  o.modes = {"eval"};
  o.pytorch_timeout_s = 1;
  std::ostringstream out, err;
  (void)run_suite(o, out, err);
  const std::vector<std::string> lines = read_lines(o.out_dir + "/results.jsonl");
  ASSERT_EQ(lines.size(), 1u) << out.str();
  EXPECT_EQ(member(io::json::parse(lines[0], "test", ""), "pytorch_error").text,
            "timed out after 1 s (--pytorch-timeout)");
}

// LC_NUMERIC set to German's (a decimal comma) while alive, built by localedef into `dir` and
// found through LOCPATH; ok() is false where localedef is missing.
// Numbers are read and written the same whatever LC_NUMERIC says (strtod read "0.5" as 0 there).
TEST_F(BenchSuite, NumbersIgnoreTheLocalesDecimalComma) {
  test::CommaDecimalLocale locale;
  if (!locale.active()) GTEST_SKIP() << "no decimal-comma locale here (de_DE, or localedef with Debian's locales)";
  std::ostringstream err;
  EXPECT_EQ(peer_samples_per_s("{\"samples_per_s\": 2.5}", err), 2.5);
  std::vector<std::string> argv_s = {"kiln", "--lr", "0.5", "--wd", "0,5"};
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  const Args args("train", static_cast<int>(argv.size()), argv.data(), {"lr", "wd"}, {});
  EXPECT_EQ(args.get_double("lr", 0), 0.5);
  try {
    args.get_double("wd", 0);
    ADD_FAILURE() << "0,5 was read";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--wd expects a finite number, got '0,5'"), std::string::npos) << e.what();
  }
  RunResult r;
  r.spec = tiny("resnet18", "eval");
  r.median_s = r.min_s = r.max_s = r.host_s = 0.25;
  r.samples_per_s = 2.5;
  EXPECT_EQ(number(member(io::json::parse(to_json(r, environment()), "test", ""), "samples_per_s")), 2.5);
}

TEST(Bench, APeerLineThatIsNotAResultIsRefused) {
  std::ostringstream err;
  EXPECT_EQ(peer_samples_per_s("{\"samples_per_s\": 1e3}", err), 1000.0);
  EXPECT_FALSE(peer_samples_per_s("Warning: something", err));
  EXPECT_FALSE(peer_samples_per_s("{\"framework\": \"pytorch\"}", err));
  EXPECT_NE(err.str().find("PyTorch peer output"), std::string::npos) << err.str();
  EXPECT_NE(err.str().find("has no samples_per_s"), std::string::npos) << err.str();
}

TEST(Bench, Tf32AndFp16OnTheCpuAreSkippedWithAReason) {
  RunSpec s = tiny("resnet18", "eval");
  s.dtype = "tf32";
  EXPECT_NE(skip_reason(s).find("TF32 is a GPU format"), std::string::npos);
  s.dtype = "fp16";  // even with AVX512-FP16: 100 to 350 times slower than fp32
  EXPECT_NE(skip_reason(s).find("no fast float16 path on the CPU"), std::string::npos);
  s.device = "cuda:0";  // the reason is the CPU's; a GPU runs every dtype
  s.dtype = "tf32";
  EXPECT_EQ(skip_reason(s), "");
}

TEST(Bench, EveryDtypeRunsAWorkloadStep) {
  // fp16 training goes through a GradScaler; tf32 only changes GPU matmuls; each step completes.
  for (const char* dtype : {"fp32", "tf32", "bf16", "fp16"}) {
    Workload w = make_workload({"bert-tiny", "train", Device::cpu(), 2, 8, dtype});
    EXPECT_NO_THROW(run_with_dtype(dtype, w.step)) << dtype;
  }
  EXPECT_FALSE(cuda::allow_tf32());  // restored after the tf32 run
}

TEST(Bench, EveryCnnGetsImagesOfItsSize) {
  // The small CNN takes 28x28 grey images (it failed on ImageNet's), the others 224x224 colour ones.
  for (const char* model : {"small_cnn", "resnet18"})
    for (const char* mode : {"train", "eval"}) {
      Workload w = make_workload({model, mode, Device::cpu(), 2, 8, "fp32"});
      EXPECT_NO_THROW(run_with_dtype("fp32", w.step)) << model << " " << mode;
    }
}

}  // namespace
}  // namespace kiln::cli::bench
