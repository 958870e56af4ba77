// Kiln side of the CPU CNN benchmark (issue 3, Speed): ResNet-50 / VGG-16 train and eval steps,
// the same workload as bench/pytorch_cnn.py (float32, channels-last input, random weights and
// data, SGD with momentum), printing the same JSON lines.
//
//   OMP_NUM_THREADS=2 build/bench/bench_cnn --models resnet50,vgg16 --modes train,eval --batch 16
// --profile 1 prints kiln::profiler's per-op table of the timed steps to stderr.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "kiln/models.h"
#include "kiln/nn/functional.h"
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
  std::string models = "resnet50,vgg16", modes = "train,eval";
  int64_t batch = 16, image_size = 224, num_classes = 1000, threads = 2, warmup = 2, steps = 5;
  bool profile = false;  // --profile 1: kiln::profiler table of the timed steps on stderr
};

Flags parse(int argc, char** argv) {
  Flags f;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--models") f.models = v;
    else if (k == "--modes") f.modes = v;
    else if (k == "--batch") f.batch = std::atoll(v.c_str());
    else if (k == "--image-size") f.image_size = std::atoll(v.c_str());
    else if (k == "--num-classes") f.num_classes = std::atoll(v.c_str());
    else if (k == "--threads") f.threads = std::atoll(v.c_str());
    else if (k == "--warmup") f.warmup = std::atoll(v.c_str());
    else if (k == "--steps") f.steps = std::atoll(v.c_str());
    else if (k == "--profile") f.profile = v == "1";
    else {
      std::fprintf(stderr, "bench_cnn: unknown flag %s\n", k.c_str());
      std::exit(2);
    }
  }
  return f;
}

void bench(const std::string& name, const std::string& mode, const Flags& f) {
  manual_seed(0);
  nn::AnyModule model = models::create(name, f.num_classes);
  model->train(mode == "train");
  Tensor x = randn({f.batch, 3, f.image_size, f.image_size}).contiguous(MemoryFormat::ChannelsLast);
  Tensor y = randint(0, f.num_classes, {f.batch});
  optim::SGD opt(model->parameters(), {.lr = 0.01, .momentum = 0.9, .weight_decay = 1e-4});
  auto step = [&] {
    if (mode == "train") {
      opt.zero_grad();
      Tensor loss = nn::functional::cross_entropy(model(x), y);
      loss.backward();
      opt.step();
    } else {
      NoGradGuard ng;
      model(x);
    }
  };
  for (int64_t i = 0; i < f.warmup; ++i) step();
  reset_peak_memory_stats(Device::cpu());  // the peak of this run's steady state, not the last run's
  std::vector<double> times;
  std::optional<profiler::Session> session;
  if (f.profile) session.emplace();
  for (int64_t i = 0; i < f.steps; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    step();
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  if (session) {
    const std::string& tag = name;
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
      "{\"framework\": \"kiln\", \"model\": \"%s\", \"mode\": \"%s\", \"batch\": %lld, \"image_size\": %lld, "
      "\"threads\": %d, \"warmup\": %lld, \"steps\": %lld, \"median_step_s\": %.4f, \"min_step_s\": %.4f, "
      "\"images_per_s\": %.2f, \"peak_bytes\": %lld}\n",
      name.c_str(), mode.c_str(), static_cast<long long>(f.batch), static_cast<long long>(f.image_size),
      get_num_threads(), static_cast<long long>(f.warmup), static_cast<long long>(f.steps), med, sorted.front(),
      static_cast<double>(f.batch) / med, static_cast<long long>(memory_stats(Device::cpu()).peak));
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  Flags f = parse(argc, argv);
  set_num_threads(static_cast<int>(f.threads));
  try {
    for (const auto& m : split(f.models))
      for (const auto& mode : split(f.modes)) bench(m, mode, f);
  } catch (const Error& e) {
    std::fprintf(stderr, "bench_cnn: %s\n", e.what());
    return 1;
  }
  return 0;
}
