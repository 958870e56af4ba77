// Kiln side of the CPU BERT benchmark (issue 4, Speed): BertForMaskedLM train and eval steps,
// the same workload as bench/pytorch_bert.py (float32, random weights and token ids, no padding,
// 15% of positions labelled), printing the same JSON lines. A train step is forward, MLM
// cross-entropy, backward and an AdamW step (lr 1e-4, weight decay 0.01); an eval step is a
// forward under NoGradGuard.
// --mlm full computes logits at every position as HF's BertForMaskedLM does; --mlm sparse only at
// the labelled ones (BertForMaskedLMImpl::masked_lm_loss; pytorch_bert.py has the same option).
//
//   OMP_NUM_THREADS=2 build/bench/bench_bert --config base --modes train,eval --batch 8 --seq 128
// --profile 1 prints kiln::profiler's per-op table of the timed steps to stderr.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "kiln/models.h"
#include "kiln/optim.h"

namespace {

using namespace kiln;

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');) out.push_back(item);
  return out;
}

struct Flags {
  std::string config = "base", modes = "train,eval", mlm = "full";
  int64_t batch = 8, seq = 128, threads = 2, warmup = 1, steps = 3;
  bool profile = false;  // --profile 1: kiln::profiler table of the timed steps on stderr
};

Flags parse(int argc, char** argv) {
  Flags f;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--config") f.config = v;
    else if (k == "--modes") f.modes = v;
    else if (k == "--mlm") f.mlm = v;
    else if (k == "--batch") f.batch = std::atoll(v.c_str());
    else if (k == "--seq") f.seq = std::atoll(v.c_str());
    else if (k == "--threads") f.threads = std::atoll(v.c_str());
    else if (k == "--warmup") f.warmup = std::atoll(v.c_str());
    else if (k == "--steps") f.steps = std::atoll(v.c_str());
    else if (k == "--profile") f.profile = v == "1";
    else {
      std::fprintf(stderr, "bench_bert: unknown flag %s\n", k.c_str());
      std::exit(2);
    }
  }
  if (f.mlm != "full" && f.mlm != "sparse") {
    std::fprintf(stderr, "bench_bert: --mlm must be full or sparse, got %s\n", f.mlm.c_str());
    std::exit(2);
  }
  if (argc % 2 == 0) {
    std::fprintf(stderr, "bench_bert: flag %s needs a value\n", argv[argc - 1]);
    std::exit(2);
  }
  return f;
}

void bench(const std::string& mode, const Flags& f) {
  manual_seed(0);
  const models::BertConfig cfg = models::BertConfig::preset(f.config);
  auto model = models::bert_for_masked_lm(cfg);
  model->train(mode == "train");
  Tensor ids = randint(0, cfg.vocab_size, {f.batch, f.seq});
  Tensor mask = ones({f.batch, f.seq}, kInt64);
  // HF's MLM recipe labels 15% of the positions; the rest are ignored (-100).
  Tensor labels = where(lt(rand({f.batch, f.seq}), 0.15), ids, full({f.batch, f.seq}, -100, kInt64));
  const char* opt_name = "adamw";
  optim::AdamW opt(model->parameters(), {.lr = 1e-4, .weight_decay = 0.01});
  auto step = [&] {
    if (mode == "train") {
      opt.zero_grad();
      Tensor loss = f.mlm == "sparse" ? model->masked_lm_loss(ids, labels, mask)
                                      : models::BertForMaskedLMImpl::loss(model(ids, mask), labels);
      loss.backward();
      opt.step();
    } else {
      NoGradGuard ng;
      model(ids, mask);
    }
  };
  for (int64_t i = 0; i < f.warmup; ++i) step();
  reset_peak_memory_stats(Device::cpu());
  std::vector<double> times;
  std::optional<profiler::Session> session;
  if (f.profile) session.emplace();
  for (int64_t i = 0; i < f.steps; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    step();
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  if (session) {
    const std::string tag = "bert-" + f.config;
    double wall = 0;
    for (double t : times) wall += t;
    std::fprintf(stderr, "%s %s: per-op profile of %lld steps, %.3f s wall\n%s", tag.c_str(), mode.c_str(),
                 static_cast<long long>(f.steps), wall, profiler::format_table(session->stats(), wall).c_str());
  }
  std::vector<double> sorted = times;
  std::sort(sorted.begin(), sorted.end());
  const double med = sorted.size() % 2 ? sorted[sorted.size() / 2]
                                       : 0.5 * (sorted[sorted.size() / 2 - 1] + sorted[sorted.size() / 2]);
  std::printf(
      "{\"framework\": \"kiln\", \"model\": \"bert-%s\", \"mode\": \"%s\", \"optimizer\": \"%s\", \"mlm\": \"%s\", \"batch\": %lld, "
      "\"seq\": %lld, \"threads\": %d, \"warmup\": %lld, \"steps\": %lld, \"median_step_s\": %.4f, "
      "\"min_step_s\": %.4f, \"samples_per_s\": %.2f, \"peak_bytes\": %lld}\n",
      f.config.c_str(), mode.c_str(), mode == "train" ? opt_name : "none", mode == "train" ? f.mlm.c_str() : "none",
      static_cast<long long>(f.batch),
      static_cast<long long>(f.seq), get_num_threads(), static_cast<long long>(f.warmup),
      static_cast<long long>(f.steps), med, sorted.front(), static_cast<double>(f.batch) / med,
      static_cast<long long>(memory_stats(Device::cpu()).peak));
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  Flags f = parse(argc, argv);
  set_num_threads(static_cast<int>(f.threads));
  try {
    for (const auto& mode : split(f.modes)) bench(mode, f);
  } catch (const Error& e) {
    std::fprintf(stderr, "bench_bert: %s\n", e.what());
    return 1;
  }
  return 0;
}
