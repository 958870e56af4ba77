// kiln bench (tools/kiln/bench_*): runs on tiny batches produce JSON lines that parse and carry
// every field, the suite writes results.jsonl and a well-formed chart, and bad requests are errors.
#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>

#include "io/json.h"
#include "kiln/kiln.h"
#include "test_util.h"
#include "tools/kiln/bench_report.h"
#include "tools/kiln/bench_runner.h"
#include "tools/kiln/bench_suite.h"
#include "tools/kiln/bench_workloads.h"
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
double number(const Value& v) {
  EXPECT_EQ(v.kind, Value::Kind::Number) << v.describe();
  return std::strtod(v.text.c_str(), nullptr);
}

// Every field the issue asks results.jsonl to carry.
// clang-format off
const std::vector<std::string> kFields = {"model", "mode", "device", "device_name", "dtype", "batch", "steps",
                                          "median_s", "min_s", "max_s", "host_s", "samples_per_s", "tflops",
                                          "peak_bytes", "speedup_vs_cpu_fp32", "cpu", "threads", "gpu", "version",
                                          "commit", "onednn", "cuda", "cudnn"};
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
  const double med = number(member(v, "median_s")), lo = number(member(v, "min_s")), hi = number(member(v, "max_s"));
  EXPECT_GT(lo, 0);
  EXPECT_LE(lo, med * (1 + 1e-5));
  EXPECT_LE(med, hi * (1 + 1e-5));
  const double host = number(member(v, "host_s"));  // part of a step's time (all of it on the CPU)
  EXPECT_GT(host, 0);
  EXPECT_LE(host, hi * (1 + 1e-5));
  EXPECT_NEAR(number(member(v, "samples_per_s")), spec.batch / med, 1e-4 * spec.batch / med);
  EXPECT_GT(member(v, "peak_bytes").integer, 0);
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
      ASSERT_TRUE(r.tflops.has_value());
      const double fwd = 4.0 * 12 * 16 * 16 * 64, flops = *r.tflops * 1e12 * r.median_s;
      EXPECT_NEAR(flops, mode == "eval" ? fwd : 3.5 * fwd, 1e-3 * fwd);
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

TEST(Bench, Bf16IsSkippedExactlyOnACpuWithoutBfloat16Instructions) {
  RunSpec s = tiny("resnet18", "eval");
  EXPECT_EQ(skip_reason(s), "");
  s.dtype = "bf16";
  const std::string f = build_info().cpu_features;
  const bool native = f.find("avx512bf16") != std::string::npos || f.find("amx") != std::string::npos;
  EXPECT_EQ(skip_reason(s).empty(), native) << f;
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
  EXPECT_NE(svg.find("7.0x"), std::string::npos);
  // Beside PyTorch: a Kiln and a PyTorch bar per run.
  for (auto& r : runs) r.pytorch_samples_per_s = r.samples_per_s * 2;
  svg = chart_svg(runs);
  EXPECT_TRUE(tags_balanced(svg));
  EXPECT_EQ(count(svg, "class=\"bar\""), 4u);
  EXPECT_EQ(count(svg, "class=\"bar peer\""), 4u);
  // Names are escaped.
  runs = {fake("a<b>&\"c", "eval", "cpu", 1)};
  svg = chart_svg(runs);
  EXPECT_TRUE(tags_balanced(svg));
  EXPECT_NE(svg.find("a&lt;b&gt;&amp;&quot;c"), std::string::npos);
}

class BenchSuite : public test::TempDirTest {};

TEST_F(BenchSuite, QuickResnet18WritesResultsAndChart) {
  SuiteOptions o;
  o.models = {"resnet18"};
  o.devices = {"cpu"};
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
  std::ifstream jsonl(o.out_dir + "/results.jsonl");
  std::vector<std::string> lines;
  for (std::string line; std::getline(jsonl, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 2u);
  for (size_t i = 0; i < lines.size(); ++i) expect_run_line(lines[i], results[i].spec);
  std::ifstream svg_in(o.out_dir + "/chart.svg");
  std::string svg((std::istreambuf_iterator<char>(svg_in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_TRUE(tags_balanced(svg));
  EXPECT_EQ(count(svg, "class=\"bar\""), 2u);
  // The table: a header and one row per run.
  EXPECT_NE(out.str().find("samples/s"), std::string::npos);
  EXPECT_EQ(count(out.str(), "resnet18   "), 2u);
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
  std::ifstream jsonl(o.out_dir + "/results.jsonl");
  std::vector<std::string> lines;
  for (std::string line; std::getline(jsonl, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 1u) << out.str();
  EXPECT_NE(lines[0].find("\"mode\": \"eval\""), std::string::npos) << lines[0];
}

TEST(Bench, Tf32AndFp16OnTheCpuAreSkippedWithAReason) {
  RunSpec s = tiny("resnet18", "eval");
  s.dtype = "tf32";
  EXPECT_NE(skip_reason(s).find("TF32 is a GPU format"), std::string::npos);
  s.dtype = "fp16";
  const bool native = build_info().cpu_features.find("avx512fp16") != std::string::npos;
  EXPECT_EQ(skip_reason(s).empty(), native);
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
